import Foundation

/// A validated pipeline: where pages come from, where records sit in a page, and the model they
/// map to. Built from `pipelines/*.yml` by ``PipelineConfig/load(path:)``; see docs/pipelines.md.
public struct PipelineConfig: Sendable {
    /// The file this pipeline was read from (as given), for messages.
    public var path: String
    /// The file's exact text (archived with every run).
    public var text: String
    /// `incremental:` — remember the highest value seen at a key path and send it on the next run.
    package var incremental: IncrementalConfig?
    /// The pipeline's name (`name:`): runs, locks and kept values are per pipeline.
    public var name: String
    /// `source:` — where pages come from when the runner is not given a source.
    package var source: SourceConfig = .none
    /// The key path from a page to its array of records; empty when the page is the array (or
    /// one object, its one record).
    public var recordsPath: [String]
    /// How the value at ``recordsPath`` holds its records: an array, a dictionary's values, columns.
    package var recordsLayout = RecordsLayout.array
    /// `format: jsonl` (in `source:`): pages are JSON Lines, one record per line.
    package var jsonLines = false
    /// Its resources, in file order (one for a file without `resources:`, mirroring `source`,
    /// `records` and `root` above).
    package var resources: [ResourceConfig] = []

    /// Records per batch for each resource (by index): `--batch-records`, else the resource's
    /// `batch_records`, else the pipeline's, else `fallback`.
    package func batchRecordsPerResource(override: Int?, fallback: Int) -> [Int] {
        resources.map { override ?? $0.batchRecords ?? batchRecords ?? fallback }
    }

    /// The entities `write: replace` deletes untouched rows of at the end of a complete run: the
    /// root of a pipeline that replaces, or the root entities of the resources that do.
    package var replacedEntities: [Int] {
        let names = resources.flatMap { resource in (resource.write ?? write) == .replace ? resource.rootEntities : [] }
        return Set(names.compactMap { model.index(of: $0) }).sorted()
    }

    /// Per root entity (by index) whose resource writes `insert_only` or `update_only`: what the
    /// resolver does to its records. Validation refuses two resources giving one root different rules.
    package var rootWriteRules: [Int: RootWriteRule] {
        var rules: [Int: RootWriteRule] = [:]
        for resource in resources {
            let mode = resource.write ?? write
            guard mode == .insertOnly || mode == .updateOnly else { continue }
            for root in resource.rootEntities {
                guard let entity = model.index(of: root) else { continue }
                rules[entity] = RootWriteRule(mode: mode, rejectsUnknown: resource.writeRejectsUnknown ?? writeRejectsUnknown)
            }
        }
        return rules
    }

    /// Per replaced root entity (by index) with a `scope:`, the entities whose records' scope
    /// values bound its deletes: the entities of its resource's `root: {by: …}` (one scope key
    /// for all its kinds: a listing of one subreddit is a complete view of that subreddit's links
    /// and comments alike), else itself.
    package var replaceScopePeers: [Int: [Int]] {
        var peers: [Int: [Int]] = [:]
        for resource in resources where (resource.write ?? write) == .replace && (resource.writeScope ?? writeScope) != nil {
            let group = resource.rootEntities.compactMap { model.index(of: $0) }
            for entity in group { peers[entity, default: []] += group }
        }
        return peers.mapValues { Array(Set($0)).sorted() }
    }

    /// Per replaced root entity (by index) with a `scope:`: the column whose values the run saw
    /// bound the rows it deletes (``replacedEntities``).
    package var replaceScopes: [Int: String] {
        var scopes: [Int: String] = [:]
        for resource in resources where (resource.write ?? write) == .replace {
            guard let scope = resource.writeScope ?? writeScope else { continue }
            for root in resource.rootEntities {
                guard let entity = model.index(of: root), let column = model.scopeColumn(scope, of: root) else { continue }
                scopes[entity] = column
            }
        }
        return scopes
    }

    /// Whether the pipeline reads several resources (or drives one by another's records).
    package var hasSeveralResources: Bool { resources.count > 1 || resources.first?.forEach != nil }

    /// What its records are, as `validate` and `--dry-run` say it: its resources when it has
    /// several (each says its own root), the entities of a `root: {by: …}`, else its root.
    package var shownRoot: String {
        if hasSeveralResources { return "resources \(resources.map(\.name).joined(separator: ", "))" }
        if let choice = resources.first?.rootChoice { return choice.description }
        return "root \(root)"
    }

    /// The pipeline with only the resources named (`--resource NAME`, repeated), in file order,
    /// and the ones their for_each read, which are then read only (their records drive the
    /// requests, nothing of them is stored). A name the pipeline does not have is refused.
    package func selectingResources(_ names: [String]) throws(ConfigError) -> PipelineConfig {
        for name in names where !resources.contains(where: { $0.name == name }) {
            throw ConfigError(
                file: path, line: 1, column: 1,
                message: "--resource \(name): the pipeline has no such resource (it has \(resources.map(\.name).joined(separator: ", ")))")
        }
        var needed = Set(names)
        for resource in resources.reversed() where needed.contains(resource.name) {
            if let parent = resource.forEach?.resource { needed.insert(parent) }
        }
        var selected = self
        selected.resources = resources.filter { needed.contains($0.name) }.map { resource in
            var resource = resource
            if !names.contains(resource.name) { (resource.root, resource.rootChoice) = (nil, nil) }
            // The pipeline's write settings, made the resource's own: the pipeline-wide ones
            // mirror the selection's first resource below.
            resource.write = resource.write ?? write
            resource.writeRejectsUnknown = resource.writeRejectsUnknown ?? writeRejectsUnknown
            resource.writeScope = resource.writeScope ?? writeScope
            return resource
        }
        selected.mirrorFirstStoredResource()
        if let first = selected.resources.first(where: { $0.root != nil }) {
            selected.write = first.write ?? write
            selected.writeRejectsUnknown = first.writeRejectsUnknown ?? writeRejectsUnknown
            selected.writeScope = first.writeScope
        }
        return selected
    }

    /// The pipeline-wide `source`, `records`, format and `root` mirror the first resource that
    /// stores records: what a run of one resource reads, and what `--dry-run` shows. A selection
    /// (`--resource`) mirrors its own first resource, never the file's.
    mutating func mirrorFirstStoredResource() {
        guard let first = resources.first(where: { $0.root != nil }), let root = first.root else { return }
        (source, recordsPath, recordsLayout, jsonLines, self.root) =
            (first.source, first.recordsPath, first.recordsLayout, first.jsonLines, root)
    }

    /// Where records sit in this pipeline's pages, for the mapper and the paginators.
    package var framing: RecordFraming { RecordFraming.of(recordsPath: recordsPath, jsonLines: jsonLines, layout: recordsLayout) }
    /// The entity each record is.
    public var root: String
    /// `write:` — merge into what is stored, or replace the root entity's rows.
    package var write: WriteMode = .merge
    /// `write: {mode: update_only, unknown: reject}`.
    package var writeRejectsUnknown = false
    /// `write: {mode: replace, scope: KEY.PATH}`: the key path of the root's attribute (or to-one)
    /// whose values the run saw bound what it deletes.
    package var writeScope: String?
    /// Records per transaction; `nil` takes ``RunOptions``'s default.
    public var batchRecords: Int?
    /// `max_page_bytes`: the largest page accepted; `nil` takes ``RunOptions``'s (64 MiB).
    public var maxPageBytes: Int?
    /// `limits: {max_rejects: N, max_reject_ratio: R}`: past them a finished run says so (exit 3).
    public var maxRejects: Int?
    /// `limits: {max_reject_ratio: R}`: rejects as a share of what was read (0…1), at most.
    public var maxRejectRatio: Double?
    /// The entities records map to.
    public var model: EntityModel

    /// The largest pipeline file accepted (its text is archived in every run's header).
    public static let maxFileBytes = 1 << 20

    /// A pipeline `name` whose pages hold records of `root` at `recordsPath`, mapped to `model`;
    /// the pages come from the source given to the runner, and merge into what is stored.
    public init(
        path: String = "<memory>", text: String = "", name: String, recordsPath: [String] = [], root: String,
        batchRecords: Int? = nil, model: EntityModel
    ) {
        self.path = path
        self.text = text
        self.name = name
        self.recordsPath = recordsPath
        self.root = root
        self.batchRecords = batchRecords
        self.model = model
        // One resource, named after the pipeline (the YAML reader replaces it with the file's).
        self.resources = [ResourceConfig(name: name, source: .none, recordsPath: recordsPath, root: root)]
    }
}

/// One resource of a pipeline (`resources:`): where its pages come from, where their records sit,
/// and the entity they are. A file without `resources:` is one resource, named after the
/// pipeline. Resources run in file order, in one run.
package struct ResourceConfig: Sendable, Equatable {
    /// Its name (`--resource NAME`, logs, resume states).
    package var name: String
    /// Where its pages come from (`defaults.http` merged in); `.none` for a `for_each` resource.
    package var source: SourceConfig
    /// The key path to a page's records (empty: the page itself).
    package var recordsPath: [String]
    /// How the value at ``recordsPath`` holds its records.
    package var recordsLayout = RecordsLayout.array
    /// `format: jsonl`.
    package var jsonLines = false
    /// The entity its records are; `nil`: its records only drive a `for_each` (read, not stored).
    /// With ``rootChoice``, the first of its entities.
    package var root: String?
    /// `root: {by: kind, entities: {t1: comment, t3: link}, other: reject|skip}`: records of
    /// several kinds, each mapped as the entity its discriminator names.
    package var rootChoice: RootChoice?
    /// Every entity its records are stored as: ``root``, or each entity of ``rootChoice`` (once,
    /// in file order). A write mode applies to all of them: a `write: replace` over records of
    /// several kinds replaces every kind.
    package var rootEntities: [String] {
        rootChoice?.entityNames ?? root.map { [$0] } ?? []
    }
    /// One request per record of another resource.
    package var forEach: ForEach?
    /// `write:` for this resource; `nil`: the pipeline's.
    package var write: WriteMode?
    /// `unknown: reject` of this resource's `write: update_only`; `nil`: the pipeline's.
    package var writeRejectsUnknown: Bool?
    /// `scope:` of this resource's `write: replace`; `nil`: the pipeline's.
    package var writeScope: String?
    /// `batch_records:` for this resource's records; `nil`: the pipeline's.
    package var batchRecords: Int?
    /// `delete_when:`: the records that say their row is gone (tombstones).
    package var deleteWhen: DeleteWhen?

    /// Where records sit in its pages.
    package var framing: RecordFraming { RecordFraming.of(recordsPath: recordsPath, jsonLines: jsonLines, layout: recordsLayout) }

    /// `for_each: {resource: R, path|url: TEMPLATE, with: {KEY: key.path}}`.
    package struct ForEach: Sendable, Equatable {
        /// The resource whose records drive it (an earlier one).
        package var resource: String
        /// `each: KEY.PATH`: one request per element of the array there in each record (Hacker
        /// News's `kids`), the template reading the element (`{.}`: the element itself) and
        /// ``with`` the record; `nil`: one request per record.
        package var each: JSONKeyPath? = nil
        /// The request's path (relative to `defaults.http.url`, values percent-encoded) or
        /// whole URL (values as given), with `{key.path}` placeholders.
        package var template: URLTemplate
        /// Whether ``template`` is a whole URL (`url:`) rather than a path (`path:`).
        package var isURL: Bool
        /// Values of the parent record added to every child record: new key → key path.
        package var with: [WithKey]
        /// The HTTP settings of its requests: `defaults.http` and its own `source.http` (pagination).
        package var http: HTTPSourceConfig
        /// `not_found: fail`: a request answered 404 or 410 fails the run. By default (`skip`) it
        /// is a rejected page — the record was deleted after the list was read — and the run goes on.
        package var notFoundFails = false
        /// `depth: N`: the levels of requests. 1 (the default): requests from the parent's records
        /// only. More: the resource also reads its own records the same way (`each:`, the
        /// template) — a comment's `kids` fetched as comments, and theirs, N levels down from the
        /// parent's — each request made once across every level.
        package var depth = 1
        /// `when: KEY.PATH`: only a record whose value there is `true` makes requests (Notion's
        /// `has_children`: a block without children is not asked for them); `nil`: every record.
        /// A record it leaves out is not an error: nothing is skipped, warned or counted.
        package var when: JSONKeyPath? = nil

        /// The deepest ``depth`` a pipeline may ask: a bound on a fan-out that could otherwise follow
        /// a cycle of ids, or a thread of replies, as far as the API goes.
        package static let maxDepth = 1000

        /// Whether it reads its own records too (``depth`` above 1).
        package var recurses: Bool { depth > 1 }
    }

    /// `with: {NEW_KEY: key.path}`.
    package struct WithKey: Sendable, Equatable {
        package var key: String
        package var path: JSONKeyPath
    }
}

extension [ResourceConfig] {
    /// Whether a for_each of these resources reads the records of the resource `name`.
    package func haveReader(of name: String) -> Bool { contains { $0.forEach?.resource == name } }
}

/// `root: {by: KEY.PATH, entities: {VALUE: ENTITY, …}, other: reject|skip}`.
package struct RootChoice: Sendable, Equatable {
    /// Where a record says its kind.
    package var path: JSONKeyPath
    /// The entity of each kind, in file order.
    package var entities: [(value: String, entity: String)]
    /// `other: skip`: a record of another kind is skipped (counted); `reject` (the default)
    /// rejects it.
    package var skipsOthers = false

    /// The entities it routes to, each once, in file order.
    package var entityNames: [String] {
        var seen = Set<String>()
        return entities.map(\.entity).filter { seen.insert($0).inserted }
    }

    /// `root by kind (t1: comment, t3: link; others rejected)`.
    package var description: String {
        "root by \(path) (\(entities.map { "\($0.value): \($0.entity)" }.joined(separator: ", ")); others \(skipsOthers ? "skipped" : "rejected"))"
    }

    package static func == (a: RootChoice, b: RootChoice) -> Bool {
        a.path == b.path && a.skipsOthers == b.skipsOthers && a.entities.map(\.value) == b.entities.map(\.value)
            && a.entities.map(\.entity) == b.entities.map(\.entity)
    }
}

/// A URL or path with `{key.path}` placeholders (``JSONKeyPath``'s grammar).
package struct URLTemplate: Sendable, Equatable, CustomStringConvertible {
    package enum Part: Sendable, Equatable {
        case literal(String)
        case value(JSONKeyPath)
    }
    package var parts: [Part]

    /// The template as written.
    package var description: String {
        parts.map {
            switch $0 {
            case .literal(let text): text
            case .value(let path): path.components.isEmpty ? "{.}" : "{\(path)}"
            }
        }.joined()
    }

    /// The key paths it reads.
    package var paths: [JSONKeyPath] {
        parts.compactMap { if case .value(let path) = $0 { path } else { nil } }
    }
}

/// `incremental: {cursor_path: updated_at, param: updated_since}`.
package struct IncrementalConfig: Sendable, Equatable {
    /// Key path in each record whose highest value is kept (compared as text, so ISO-8601 dates and
    /// zero-padded numbers order correctly).
    package var cursorPath: [String]
    /// Query parameter that sends the kept value on the next run.
    package var param: String
}

/// Where a pipeline's pages come from.
package enum SourceConfig: Sendable, Equatable {
    /// No source in the file: pages must be given at run time (`--pages`).
    case none
    /// The files of `directory` whose names match `glob`, in name order.
    case files(directory: String, glob: String)
    /// Pages fetched over HTTP.
    case http(HTTPSourceConfig)
}

/// A request's method: GET, or POST with a JSON body (GraphQL, search endpoints).
package enum HTTPMethod: String, Sendable, Equatable {
    case get = "GET"
    case post = "POST"
}

/// `source: {http: …}`: where and how to fetch pages.
package struct HTTPSourceConfig: Sendable, Equatable {
    package var url: String
    /// The parts of `url` that came from the environment (`${VAR}`) and landed in its user info,
    /// path, query or fragment: secrets like a header's value, redacted wherever a URL is shown
    /// and never stored in a resume state. A variable that only gives the scheme, host or port
    /// (`${API:-http://127.0.0.1:8080}/items`) is not one.
    package var urlSecrets: [String] = []
    package var headers: [Header]
    package var auth: Auth?
    package var paginate: Pagination
    /// `allowed_hosts`: hosts (`host` or `host:port`) besides the URL's own origin that a next
    /// URL or a redirect may lead to; they receive credentials too (never over a downgrade to
    /// plain http). Default: none.
    package var allowedHosts: [String] = []
    /// A hard cap on pages; reaching it is logged. Default 10000.
    package var maxPages = 10000
    /// Requests in flight, where the paginator allows prefetching (page, offset). Default 1.
    package var concurrency = 1
    /// Seconds for one whole request. Default 30.
    package var timeout: Double = 30
    package var retry = RetryPolicy()
    /// `error_when:`: which bodies answered with a 2xx status are errors all the same.
    package var errorWhen: ErrorWhen?
    /// `method: POST` (GraphQL, search endpoints); GET unless said.
    package var method = HTTPMethod.get
    /// `body:` (POST only): the JSON text every request of the source sends, a body cursor
    /// (`paginate: {cursor: {…, body: KEY.PATH}}`) written into it from the second page on.
    package var body: String?
    /// The parts of ``body`` that came from the environment: scrubbed wherever the body is shown
    /// or archived, like a URL's.
    package var bodySecrets: [String] = []
    /// `sync_url: KEY.PATH`: where a page says the URL the next run starts from (Contentful's
    /// `nextSyncUrl`): kept with the page's batch, used by the next run instead of ``url``, and
    /// forgotten by `--full-refresh` (docs/pipelines.md, "Sync tokens").
    package var syncURL: JSONKeyPath?

    /// The keys of `source: {http: …}`.
    static let keys = [
        "url", "headers", "auth", "paginate", "allowed_hosts", "max_pages", "concurrency", "timeout_s", "retry", "format", "error_when",
        "method", "body", "sync_url",
    ]

    /// `error_when: {path: ok, equals: false, reason: error, retry: [ratelimited]}`: an API that
    /// answers its errors with HTTP 200 (Slack's `{"ok": false, "error": "ratelimited"}`,
    /// GraphQL's `{"errors": […]}`, `present: true`). Such a body is never a page: its request is
    /// retried as a 429 is (backoff, `Retry-After`) when its reason is one of `retry`, and fails
    /// the run otherwise, naming the request and the reason — a cursor list does not end at it.
    package struct ErrorWhen: Sendable, Equatable {
        /// Where the sign is in the body.
        package var path: JSONKeyPath
        /// The body is an error when the value at ``path``, as text (`false`, `0`, `error`), is
        /// this; `nil` (`present: true`): when a value is there that is not null, `false` or an
        /// empty array or object.
        package var equals: String?
        /// Where the error's reason is (`reason:`): named in the failure, matched against ``retry``.
        package var reason: JSONKeyPath?
        /// Reasons that are temporary (`retry: [ratelimited]`): the request is tried again.
        package var retry: [String] = []
        /// Reasons that say the thing asked for is not there (`not_found: [channel_not_found]`):
        /// the answer is taken as a 404 is — in a `for_each`, a rejected page, and the run goes on
        /// (unless the for_each says `not_found: fail`).
        package var notFound: [String] = []
    }

    package init(url: String, headers: [Header] = [], auth: Auth? = nil, paginate: Pagination = .none) {
        self.url = url
        self.headers = headers
        self.auth = auth
        self.paginate = paginate
    }

    /// A request header from `headers:`.
    package struct Header: Sendable, Equatable {
        package var name: String
        package var value: String
        /// Set when the value came from the environment (`${VAR}`): it is treated as a secret.
        package var isSecret = false

        /// A header sent with every request to the configured origin and the allowed hosts.
        package init(name: String, value: String, isSecret: Bool = false) {
            self.name = name
            self.value = value
            self.isSecret = isSecret
        }
    }

    /// Credentials, always read from the environment at run time, never from the file.
    package enum Auth: Sendable, Equatable {
        case bearer(env: String)
        case basic(user: String, passwordEnv: String)
        case apiKeyHeader(header: String, env: String)
        case apiKeyQuery(param: String, env: String)
    }

    /// `paginate:`: how the next page is found.
    package enum Pagination: Sendable, Equatable, CustomStringConvertible {
        /// One request.
        case none
        /// The body's next-page URL at this key path; stop on null or absent.
        case nextURL(path: JSONKeyPath)
        /// RFC 8288 `Link: <…>; rel="next"`.
        case linkHeader
        /// `?param=start`, `start+1`, …; stop on an empty page, or after the page numbered
        /// `start + total_pages - 1` when `totalPages` (the body's or a header's) says how many.
        case page(param: String, start: Int, totalPages: CountSource?)
        /// `?offset=0&limit=L`, `L`, `2L`, …; stop on an empty page or past `total`.
        case offset(param: String, limitParam: String, limit: Int, total: CountSource?)
        /// The next cursor, sent as `param`: found at a key path of the page, or in the page's
        /// last record (Stripe's `starting_after`); stop on null, absent, empty or one of
        /// `stopValues` (Twitter's `next_cursor: 0`).
        case cursor(CursorSource, into: CursorTarget, stopValues: [String])

        /// `paginate: {…}` as `ingot validate` shows it.
        package var description: String {
            switch self {
            case .none: "none"
            case .nextURL(let path): "next_url(\(path))"
            case .linkHeader: "link_header"
            case .page(let param, let start, let total):
                "page(\(param) from \(start)\(total.map { ", total_pages \($0)" } ?? ""))"
            case .offset(let param, let limitParam, let limit, let total):
                "offset(\(param), \(limitParam) \(limit)\(total.map { ", total \($0)" } ?? ""))"
            case .cursor(let source, let target, let stop):
                "cursor(\(source) as \(target)\(stop.isEmpty ? "" : ", stops on \(stop.joined(separator: "|"))"))"
            }
        }
    }

    /// Where a cursor paginator sends the cursor: a query parameter, or a place in the request's
    /// JSON body (GraphQL's `variables.cursor`, Notion's `start_cursor`, Elasticsearch's
    /// `search_after`), where the cursor's JSON value is written as it came.
    package enum CursorTarget: Sendable, Equatable, CustomStringConvertible {
        case query(String)
        case body(JSONKeyPath)

        package var description: String {
            switch self {
            case .query(let param): param
            case .body(let path): "body \(path)"
            }
        }
    }

    /// Where a numbered paginator reads its total: a key path of the page, or a response header
    /// (WordPress's `X-WP-TotalPages`, GitLab's `X-Total-Pages`, `X-Total-Count`).
    package enum CountSource: Sendable, Equatable, CustomStringConvertible {
        case body(JSONKeyPath)
        /// The header's name, lowercased.
        case header(String)

        /// The header's name, when the count is one.
        package var header: String? { if case .header(let name) = self { name } else { nil } }

        package var description: String {
            switch self {
            case .body(let path): "\(path)"
            case .header(let name): "header \(name)"
            }
        }
    }

    /// The header a numbered paginator reads its total from, if any: kept with the page (and
    /// archived) whatever its name.
    package var paginationHeader: String? {
        switch paginate {
        case .page(_, _, let total), .offset(_, _, _, let total): total?.header
        default: nil
        }
    }

    /// Where a cursor paginator finds the next cursor.
    package enum CursorSource: Sendable, Equatable, CustomStringConvertible {
        /// At this key path of the page.
        case path(JSONKeyPath)
        /// At this key path of the page's last record (`from_last_record`).
        case lastRecord(JSONKeyPath)

        /// `PATH` or `last record's PATH`.
        package var description: String {
            switch self {
            case .path(let path): "\(path)"
            case .lastRecord(let path): "last record's \(path)"
            }
        }
    }

    /// `paginate: {…, has_more: KEY.PATH}`: a flag in each page that says whether another
    /// follows. `false` stops; absent stops unless `continueWhenAbsent` (`has_more_absent`).
    package struct HasMore: Sendable, Equatable {
        /// Where the flag is.
        package var path: JSONKeyPath
        /// `has_more_absent: continue`: a page without the flag does not stop pagination.
        package var continueWhenAbsent = false
    }

    /// `paginate: {…, has_more: …}`.
    package var hasMore: HasMore?

    /// `retry:`: how failed requests (unreachable, timeouts, 5xx, 429) are tried again.
    package struct RetryPolicy: Sendable, Equatable {
        /// Tries per request, the first included. Default 6.
        package var attempts = 6
        package var baseDelayMs = 250
        package var maxDelayMs = 60000
    }
}

/// How a run writes its root records, and treats the rows it did not see.
package enum WriteMode: String, Sendable, CaseIterable {
    /// Insert and update; never delete.
    case merge
    /// Like merge, then delete the root entity's rows the run did not touch (only after a complete run).
    case replace
    /// Only new rows: a record whose root row exists (stored, or made by an earlier record) is
    /// skipped whole, and counted.
    case insertOnly = "insert_only"
    /// Only rows that exist: a record of an unknown identity is skipped whole and counted — or
    /// rejected (`unknown_identity`) with `unknown: reject`.
    case updateOnly = "update_only"
}

/// What a record-level write mode does to the records of one root entity (``WriteMode/insertOnly``,
/// ``WriteMode/updateOnly``), as the resolver applies it.
package struct RootWriteRule: Sendable, Equatable {
    package var mode: WriteMode
    /// `update_only`: reject a record of an unknown identity instead of skipping it.
    package var rejectsUnknown = false
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
