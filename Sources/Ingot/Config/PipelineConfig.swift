import Foundation

/// A validated pipeline: where pages come from, where records sit in a page, and the model they
/// map to. Built from `pipelines/*.yml` by ``PipelineConfig/load(path:)``; see docs/pipelines.md.
public struct PipelineConfig: Sendable {
    /// The file this pipeline was read from (as given), for messages.
    public var path: String
    /// The file's exact text (archived with every run).
    public var text: String
    /// `incremental:` — remember the highest value seen at a key path and send it on the next run.
    public var incremental: IncrementalConfig?
    public var name: String
    public var source: SourceConfig
    /// The key path from a page to its array of records; empty when the page is the array.
    public var recordsPath: [String]
    /// The entity each record is.
    public var root: String
    public var write: WriteMode
    /// Records per transaction; `nil` takes ``RunOptions``'s default.
    public var batchRecords: Int?
    /// `max_page_bytes`: the largest page accepted; `nil` takes ``RunOptions``'s (64 MiB).
    public var maxPageBytes: Int?
    /// `limits: {max_rejects: N, max_reject_ratio: R}`: past them a finished run says so (exit 3).
    public var maxRejects: Int?
    /// `limits: {max_reject_ratio: R}`: rejects as a share of what was read (0…1), at most.
    public var maxRejectRatio: Double?
    public var model: EntityModel

    /// The largest pipeline file accepted (its text is archived in every run's header).
    public static let maxFileBytes = 1 << 20

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

/// `incremental: {cursor_path: updated_at, param: updated_since}`.
public struct IncrementalConfig: Sendable, Equatable {
    /// Key path in each record whose highest value is kept (compared as text, so ISO-8601 dates and
    /// zero-padded numbers order correctly).
    public var cursorPath: [String]
    /// Query parameter that sends the kept value on the next run.
    public var param: String
}

/// Where a pipeline's pages come from.
public enum SourceConfig: Sendable, Equatable {
    /// No source in the file: pages must be given at run time (`--pages`).
    case none
    /// The files of `directory` whose names match `glob`, in name order.
    case files(directory: String, glob: String)
    /// Pages fetched over HTTP.
    case http(HTTPSourceConfig)
}

/// `source: {http: …}`: where and how to fetch pages.
public struct HTTPSourceConfig: Sendable, Equatable {
    public var url: String
    /// The parts of `url` that came from the environment (`${VAR}`) and landed in its user info,
    /// path, query or fragment: secrets like a header's value, redacted wherever a URL is shown
    /// and never stored in a resume state. A variable that only gives the scheme, host or port
    /// (`${API:-http://127.0.0.1:8080}/items`) is not one.
    public var urlSecrets: [String] = []
    public var headers: [Header]
    public var auth: Auth?
    public var paginate: Pagination
    /// `allowed_hosts`: hosts (`host` or `host:port`) besides the URL's own origin that a next
    /// URL or a redirect may lead to; they receive credentials too (never over a downgrade to
    /// plain http). Default: none.
    public var allowedHosts: [String] = []
    /// A hard cap on pages; reaching it is logged. Default 10000.
    public var maxPages = 10000
    /// Requests in flight, where the paginator allows prefetching (page, offset). Default 1.
    public var concurrency = 1
    /// Seconds for one whole request. Default 30.
    public var timeout: Double = 30
    public var retry = RetryPolicy()

    public init(url: String, headers: [Header] = [], auth: Auth? = nil, paginate: Pagination = .none) {
        self.url = url
        self.headers = headers
        self.auth = auth
        self.paginate = paginate
    }

    /// A request header from `headers:`.
    public struct Header: Sendable, Equatable {
        public var name: String
        public var value: String
        /// Set when the value came from the environment (`${VAR}`): it is treated as a secret.
        public var isSecret = false

        /// A header sent with every request to the configured origin and the allowed hosts.
        public init(name: String, value: String, isSecret: Bool = false) {
            self.name = name
            self.value = value
            self.isSecret = isSecret
        }
    }

    /// Credentials, always read from the environment at run time, never from the file.
    public enum Auth: Sendable, Equatable {
        case bearer(env: String)
        case basic(user: String, passwordEnv: String)
        case apiKeyHeader(header: String, env: String)
        case apiKeyQuery(param: String, env: String)
    }

    /// `paginate:`: how the next page is found.
    public enum Pagination: Sendable, Equatable {
        /// One request.
        case none
        /// The body's next-page URL at this key path; stop on null or absent.
        case nextURL(path: [String])
        /// RFC 8288 `Link: <…>; rel="next"`.
        case linkHeader
        /// `?param=start`, `start+1`, …; stop on an empty page.
        case page(param: String, start: Int)
        /// `?offset=0&limit=L`, `L`, `2L`, …; stop on an empty page or past `total` (a key path).
        case offset(param: String, limitParam: String, limit: Int, total: [String]?)
        /// The next cursor at this key path, sent as `param`; stop on null, absent or empty.
        case cursor(path: [String], param: String)
    }

    /// `retry:`: how failed requests (unreachable, timeouts, 5xx, 429) are tried again.
    public struct RetryPolicy: Sendable, Equatable {
        /// Tries per request, the first included. Default 6.
        public var attempts = 6
        public var baseDelayMs = 250
        public var maxDelayMs = 60000
    }
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

extension HTTPSourceConfig {
    /// Checks an `allowed_hosts` entry: `host` or `host:port`, nothing else.
    static func isValidHostEntry(_ entry: String) -> Bool {
        guard !entry.isEmpty, !entry.contains("/"), !entry.contains("@"), !entry.contains("?"), !entry.contains("#"),
            let c = URLComponents(string: "http://" + entry), let host = c.host, !host.isEmpty, c.path.isEmpty
        else { return false }
        return true
    }
}
