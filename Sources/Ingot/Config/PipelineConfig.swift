/// A validated pipeline: where pages come from, where records sit in a page, and the model they
/// map to. Built from `pipelines/*.yml` by ``PipelineConfig/load(path:)``; see docs/pipelines.md.
public struct PipelineConfig: Sendable {
    /// The file this pipeline was read from (as given), for messages.
    public var path: String
    /// The file's exact text (archived with every run).
    public var text: String
    public var name: String
    public var source: SourceConfig
    /// The key path from a page to its array of records; empty when the page is the array.
    public var recordsPath: [String]
    /// The entity each record is.
    public var root: String
    public var write: WriteMode
    /// Records per transaction; `nil` takes ``RunOptions``'s default.
    public var batchRecords: Int?
    public var model: EntityModel

    public init(
        path: String = "<memory>", text: String = "", name: String, source: SourceConfig = .none,
        recordsPath: [String] = [], root: String, write: WriteMode = .merge, batchRecords: Int? = nil,
        model: EntityModel
    ) {
        self.path = path
        self.text = text
        self.name = name
        self.source = source
        self.recordsPath = recordsPath
        self.root = root
        self.write = write
        self.batchRecords = batchRecords
        self.model = model
    }
}

/// Where a pipeline's pages come from.
public enum SourceConfig: Sendable, Equatable {
    /// No source in the file: pages must be given at run time (`--pages`).
    case none
    /// The files of `directory` whose names match `glob`, in name order.
    case files(directory: String, glob: String)
}

/// How a run treats rows it did not see.
public enum WriteMode: String, Sendable, CaseIterable {
    /// Insert and update; never delete.
    case merge
    /// Like merge, then delete the root entity's rows the run did not touch (only after a complete run).
    case replace
}

/// A pipeline file that cannot run, pointing at the line and column that is wrong.
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    public var file: String
    public var line: Int
    public var column: Int
    public var message: String

    public init(file: String, line: Int, column: Int, message: String) {
        self.file = file
        self.line = line
        self.column = column
        self.message = message
    }

    /// `file:line:column: message`, the form editors and compilers use.
    public var description: String { "\(file):\(line):\(column): \(message)" }
}
