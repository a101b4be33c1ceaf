/// A pipeline file that cannot run, pointing at the line and column that is wrong.
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The pipeline file.
    public var file: String
    /// The line of the problem (1-based).
    public var line: Int
    /// The column of the problem (1-based).
    public var column: Int
    /// What is wrong, and what is expected.
    public var message: String
    /// The other problems found in the same file, in file order (`ingot validate` reports all).
    public var others: [ConfigError] = []

    /// A problem at `file:line:column`, and the others found with it.
    public init(file: String, line: Int, column: Int, message: String, others: [ConfigError] = []) {
        self.file = file
        self.line = line
        self.column = column
        self.message = message
        self.others = others
    }

    /// `file:line:column: message`, the form editors and compilers use; one line per problem.
    public var description: String {
        ([self] + others).map { "\($0.file):\($0.line):\($0.column): \($0.message)" }.joined(separator: "\n")
    }
}
