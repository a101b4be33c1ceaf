import CLibPQ
import Foundation
import Synchronization

/// One libpq connection, used from one queue at a time: statements with text parameters and
/// results, and `COPY … FROM STDIN` in text format. Synchronous, like the writer queue that uses
/// it (docs/stores.md, "PostgreSQL").
final class PGConnection {
    /// What a connection is for, shown to the server as its `application_name` (`ingot writer`,
    /// `ingot queue`, …) unless the URL names one: `pg_stat_activity` then tells a job's
    /// connections apart, and a profile of the server can be summed by role
    /// (docs/scale-out.md, "Where the server's time goes now").
    enum Role: String, Sendable, CaseIterable {
        /// The store's connection: the schema, the run's rows, its transactions.
        case writer
        /// Lookups of committed rows beside the writer (batch by batch).
        case reader
        /// A joined run's queue: claims, units done, the run's state; a job waiting for work
        /// `LISTEN`s on it.
        case queue
        /// The job that reads the source for a joined run: its enqueues.
        case fetcher
        /// Reads of page prints and kept answers; the CLI's one-off connections.
        case tool

        var applicationName: String { "ingot \(rawValue)" }
    }

    private let handle: OpaquePointer
    /// The URL as logs may show it (no password).
    let shown: String
    /// The SQLSTATE of the last statement that failed (`40P01`: deadlock detected), for a
    /// caller that retries some failures.
    private(set) var lastErrorState: String?

    /// The URL's options checked before connecting (libpq checks numbers only when it connects,
    /// and then fails like an unreachable server): a URL libpq cannot parse, a port that is not
    /// one, a word option it would refuse are configuration errors (exit 2), named here. Returns
    /// the connect timeout (`connect_timeout`, 10 s unless the URL says).
    private static func checkedConnectTimeout(_ url: String, redactor: Redactor) throws(StoreError) -> Double {
        var connectTimeout = 10.0
        // A URL libpq cannot parse is a configuration error (exit 2), not an unreachable server.
        var parseError: UnsafeMutablePointer<CChar>?
        if let options = PQconninfoParse(url, &parseError) {
            // libpq checks numbers only when it connects, and then fails like an unreachable server.
            // So do the options that take one of a few words: a value libpq would refuse there
            // can never connect, so it is a configuration error too, named here.
            var option = options
            var problem: String?
            while let keyword = option.pointee.keyword {
                let name = String(cString: keyword)
                if let value = option.pointee.val.map({ String(cString: $0) }), problem == nil {
                    if name == "port" {
                        let ports = value.split(separator: ",", omittingEmptySubsequences: false)
                        if let bad = ports.first(where: { !$0.isEmpty && !(Int($0).map { (1...65535).contains($0) } ?? false) }) {
                            problem = "'\(redactor.scrub(String(bad)))' is not a port"
                        }
                    } else if name == "connect_timeout" {
                        if let seconds = Int(value), seconds > 0 { connectTimeout = Double(max(2, min(seconds, 86_400))) }
                    } else if let allowed = PGConnection.wordOptions[name], !allowed.contains(value) {
                        problem = "\(name) '\(redactor.scrub(value))' is none of \(allowed.sorted().joined(separator: ", "))"
                    }
                }
                option += 1
            }
            PQconninfoFree(options)
            if let problem {
                throw StoreError.unsupported("--db \(Redactor.redactingDatabase(url)): \(problem)")
            }
        } else {
            let reason = parseError.map { String(cString: $0) }?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "unreadable"
            if let parseError { PQfreemem(parseError) }
            throw StoreError.unsupported(
                "--db \(Redactor.redactingDatabase(url)) is not a PostgreSQL URL libpq can read: \(redactor.scrub(reason))")
        }
        return connectTimeout
    }

    /// Connects to `url` (a `postgresql://` URL or a libpq connection string) and sets the
    /// session up: UTC, quiet notices, and no hash or merge joins — a batch's statements join a
    /// small staging table (which the planner has no statistics for) to a big table, where a
    /// hash join scans the big table once per batch; index lookups measured 12.2 s → 9.0 s on
    /// people-200k.
    /// `stopped`: set when the run stops; connecting gives up then (``finishConnecting(_:timeout:stopped:)``).
    init(url: String, role: Role = .tool, stopped: StopFlag? = nil) throws(StoreError) {
        let redactor = Redactor(Redactor.databaseSecrets(url))
        self.redactor = redactor
        shown = Redactor.redactingDatabase(url)
        let connectTimeout = try PGConnection.checkedConnectTimeout(url, redactor: redactor)
        // Defaults first, the URL last: what the URL sets wins. Connecting gives up after 10 s;
        // TCP keepalives and a user timeout find a dead server or network in about 30 s
        // instead of never (docs/stores.md, "Liveness").
        let keywords = [
            "connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout",
            "fallback_application_name", "dbname",
        ]
        let values = ["10", "1", "10", "5", "3", "30000", role.applicationName, url]
        let started = PGConnection.withCStrings(keywords) { k in
            PGConnection.withCStrings(values) { v in
                PQconnectStartParams(k + [nil], v + [nil], 1)
            }
        }
        guard let handle = started else { throw StoreError.postgres(message: "out of memory", sql: "") }
        // Before `self.handle` is set: once it is, a throw runs deinit, which finishes it.
        switch PGConnection.finishConnecting(handle, timeout: connectTimeout, stopped: stopped) {
        case .connected:
            break
        case .failed:
            let message = redactor.scrub(PGConnection.message(handle))
            PQfinish(handle)
            throw StoreError.unreachable("cannot connect to \(Redactor.redactingDatabase(url)): \(message)")
        case .timedOut:
            PQfinish(handle)
            throw StoreError.unreachable(
                "cannot connect to \(Redactor.redactingDatabase(url)): no answer within \(Int(connectTimeout)) s (connect_timeout)")
        case .abandoned:
            PQfinish(handle)
            throw StoreError.unreachable("stopped while connecting to \(Redactor.redactingDatabase(url))")
        }
        self.handle = handle
        // jit = off: the planner has no statistics for the staging tables, so its cost estimates
        // (millions of rows) cross the JIT thresholds, and compiling took ~90 ms a statement for
        // statements that run in a few: people-200k 7.4 -> 6.2-6.9 s, its rerun 9.6-10.9 -> 6.3-7.1 s.
        try execute(
            "SET TIME ZONE 'UTC'; SET client_min_messages = warning; SET enable_hashjoin = off; SET enable_mergejoin = off; SET jit = off")
    }

    deinit {
        PQfinish(handle)
    }

    /// Scrubs the password from libpq's messages, which may echo the connection string.
    private let redactor: Redactor

    /// Ends the connection's socket from another thread, so that a statement waiting for a server
    /// that does not answer returns at once (with an error): a stopped run does not wait for it.
    /// The connection is not used afterwards but to be finished. Safe from any thread: only
    /// `shutdown(2)` is called on the descriptor, which stays open until `PQfinish`.
    func interrupt() {
        let socket = PQsocket(handle)
        if socket >= 0 { _ = shutdown(socket, Int32(SHUT_RDWR)) }
    }

    /// Waits up to `timeout` seconds for a notification on a channel this connection `LISTEN`s
    /// to; `true` when one (or more: they are all consumed) came.
    func waitForNotification(timeout: Double) -> Bool {
        func drain() -> Bool {
            var any = false
            while let notification = PQnotifies(handle) {
                PQfreemem(notification)
                any = true
            }
            return any
        }
        _ = PQconsumeInput(handle)
        if drain() { return true }
        let socket = PQsocket(handle)
        guard socket >= 0 else { return false }
        var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, Int32(max(0, min(timeout, 60)) * 1000)) > 0 else { return false }
        _ = PQconsumeInput(handle)
        return drain()
    }

    /// Runs `sql` (one statement when it has parameters), and returns its rows as text
    /// (`nil` for NULL).
    @discardableResult
    func execute(_ sql: String, _ parameters: [String?] = []) throws(StoreError) -> [[String?]] {
        let result = try run(sql, parameters)
        defer { PQclear(result) }
        var out: [[String?]] = []
        let columns = PQnfields(result)
        for r in 0..<PQntuples(result) {
            out.append((0..<columns).map { c in PQgetisnull(result, r, c) == 1 ? nil : String(cString: PQgetvalue(result, r, c)) })
        }
        return out
    }

    /// ``execute(_:_:)`` with the result's column names, for one statement only (the extended
    /// protocol refuses several: `COMMIT; DELETE …` cannot leave a read-only transaction).
    func executeNamed(_ sql: String, _ parameters: [String?] = []) throws(StoreError) -> (columns: [String], rows: [[String?]]) {
        let result = try run(sql, parameters, oneStatement: true)
        defer { PQclear(result) }
        let count = PQnfields(result)
        let names = (0..<count).map { c in PQfname(result, c).map { String(cString: $0) } ?? "" }
        var out: [[String?]] = []
        for r in 0..<PQntuples(result) {
            out.append((0..<count).map { c in PQgetisnull(result, r, c) == 1 ? nil : String(cString: PQgetvalue(result, r, c)) })
        }
        return (names, out)
    }

    /// The first column of each row of `sql` (one statement), in the server's binary form (for a
    /// `bytea`, its bytes as they are: no hex text to write on the server and read here), handed
    /// to `body` a row at a time as the server sends it (libpq's single-row mode): a result of any
    /// size holds one row in memory here, where ``execute(_:_:)`` holds all of them. A NULL is
    /// handed as no bytes. When `body` throws, the rest of the result is read and let go, so the
    /// connection stays usable (to roll back), and its error is rethrown.
    func forEachBinaryValue(_ sql: String, _ parameters: [String?] = [], _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let sent = PGConnection.withCStrings(parameters) { pointers in
            PQsendQueryParams(handle, sql, Int32(parameters.count), nil, pointers, nil, nil, 1)
        }
        guard sent == 1 else { throw StoreError.postgres(message: redactor.scrub(PGConnection.message(handle)), sql: sql) }
        // Refused only when called at the wrong moment; the rows then come as one result, which
        // the loop below reads all the same.
        _ = PQsetSingleRowMode(handle)
        var failure: (any Error)?
        while let result = PQgetResult(handle) {
            defer { PQclear(result) }
            guard failure == nil else { continue }
            let status = PQresultStatus(result)
            guard status == PGRES_SINGLE_TUPLE || status == PGRES_TUPLES_OK else {
                lastErrorState = PQresultErrorField(result, PGConnection.sqlStateField).map { String(cString: $0) }
                failure = StoreError.postgres(
                    message: redactor.scrub(PGConnection.resultMessage(result)), sql: sql, state: lastErrorState)
                continue
            }
            guard PQnfields(result) > 0 else { continue }
            do {
                for r in 0..<PQntuples(result) {
                    let count = Int(PQgetlength(result, r, 0))
                    try body(UnsafeRawBufferPointer(start: count > 0 ? PQgetvalue(result, r, 0) : nil, count: max(count, 0)))
                }
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
    }

    /// Whether table `name` (unquoted, in the current schema) exists, as committed when this
    /// statement starts. A read of `pg_class` under the statement's snapshot, not `to_regclass`:
    /// a name lookup that takes no lock answers from the backend's catalog cache, which learns
    /// of another session's `DROP TABLE` only at its next lock or transaction start — inside an
    /// open transaction it can still see a table dropped and committed since
    /// (`PostgresTests.tableExistsSeesADropCommittedInsideATransaction`).
    func tableExists(_ name: String) throws(StoreError) -> Bool {
        try execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE relname = $1 AND relnamespace = current_schema()::regnamespace)",
            [name]
        ).first?[0] == "t"
    }

    /// Whether a transaction is open on this connection (aborted included).
    var isInTransaction: Bool {
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws. Inside
    /// an open transaction (one a store holds for its caller, ``TransactionOwner/caller``), under
    /// a savepoint of that transaction instead.
    func transaction<T>(_ body: () throws -> T) throws -> T {
        if isInTransaction { return try inSavepoint("ingot_nested", body) }
        try execute("BEGIN")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            _ = try? execute("ROLLBACK")
            throw error
        }
    }

    /// Runs `body` under savepoint `name` in the open transaction: released when it returns,
    /// rolled back to (and released) when it throws, the transaction staying usable either way
    /// (a failed statement aborts it only up to the savepoint) — GRDB's `inSavepoint`.
    func inSavepoint<T>(_ name: String, _ body: () throws -> T) throws -> T {
        try Savepoint.run(name, execute: { _ = try execute($0) }, body)
    }

    /// "Optimistic, then careful": runs `fast` under savepoint `name`; when it throws an error
    /// `fallsBack` accepts, `fast`'s work is undone and `careful` runs instead, in the same
    /// transaction. Any other error is thrown, `fast`'s work undone.
    func optimistically<T>(
        _ name: String, _ fast: () throws -> T, fallingBackWhen fallsBack: (any Error) -> Bool, carefully careful: () throws -> T
    ) throws -> T {
        do {
            return try inSavepoint(name, fast)
        } catch  where fallsBack(error) {
            return try careful()
        }
    }

    /// Rows affected by a statement without results.
    func changes(_ sql: String, _ parameters: [String?] = []) throws(StoreError) -> Int {
        let result = try run(sql, parameters)
        defer { PQclear(result) }
        return Int(String(cString: PQcmdTuples(result))) ?? 0
    }

    /// The successful result of `sql` (the caller clears it), or the server's error. A statement
    /// with parameters that this connection ran before runs prepared (``StatementCache``).
    private func run(_ sql: String, _ parameters: [String?], oneStatement: Bool = false) throws(StoreError)
        -> OpaquePointer
    {
        func unprepared() -> OpaquePointer? {
            PGConnection.withCStrings(parameters) { pointers in
                PQexecParams(handle, sql, Int32(parameters.count), nil, pointers, nil, nil, 0)
            }
        }
        let result: OpaquePointer?
        if parameters.isEmpty && !oneStatement {
            result = PQexec(handle, sql)
        } else if let name = try preparedName(sql, parameters: parameters.count) {
            let prepared = PGConnection.withCStrings(parameters) { pointers in
                PQexecPrepared(handle, name, Int32(parameters.count), pointers, nil, nil, 0)
            }
            do {
                return try checked(prepared, sql: sql)
            } catch {
                // "cached plan must not change result type" (a table it reads changed a column's
                // type): prepared afresh at its next second run; run unprepared now, unless the
                // failure aborted a transaction.
                guard lastErrorState == "0A000" else { throw error }
                statements.forget(sql)
                if isInTransaction { throw error }
                result = unprepared()
            }
        } else {
            result = unprepared()
        }
        return try checked(result, sql: sql)
    }

    /// `result` when it succeeded (the caller clears it); otherwise it is cleared and the
    /// server's error thrown, its SQLSTATE kept in ``lastErrorState``.
    private func checked(_ result: OpaquePointer?, sql: String) throws(StoreError) -> OpaquePointer {
        guard let result else { throw StoreError.postgres(message: redactor.scrub(PGConnection.message(handle)), sql: sql) }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            let message = redactor.scrub(PGConnection.resultMessage(result))
            lastErrorState = PQresultErrorField(result, PGConnection.sqlStateField).map { String(cString: $0) }
            PQclear(result)
            throw StoreError.postgres(message: message, sql: sql, state: lastErrorState)
        }
        return result
    }

    /// The statements this connection prepared (docs/stores.md, "Prepared statements").
    private var statements = StatementCache()

    /// The name `sql` is prepared under on this connection, preparing it at its second run;
    /// `nil` to run it unprepared (its first run, or the cache is full). A statement that
    /// cannot be prepared fails as it would have run.
    private func preparedName(_ sql: String, parameters: Int) throws(StoreError) -> String? {
        switch statements.lookUp(sql) {
        case .runUnprepared: return nil
        case .prepared(let name): return name
        case .prepare(let name):
            let result = PQprepare(handle, name, sql, Int32(parameters), nil)
            PQclear(try checked(result, sql: sql))
            statements.prepared(sql, as: name)
            return name
        }
    }

    /// `COPY … FROM STDIN` (text format): `sql` is the COPY statement, `data` its rows, tab
    /// separated, `\N` for NULL, escaped with ``PGConnection/appendCopyText(_:to:)``.
    func copy(_ sql: String, data: [UInt8]) throws(StoreError) {
        try copy(sql, data: data[...])
    }

    /// Copies `data` (COPY text) with `sql` in one statement.
    func copy(_ sql: String, data: ArraySlice<UInt8>) throws(StoreError) {
        try beginCopy(sql)
        try putCopyData(data, sql: sql)
        try endCopy(sql)
    }

    /// Starts `COPY … FROM STDIN` (`sql`): the rows follow in ``putCopyData(_:sql:)`` calls (the
    /// server works on what it has while the caller makes the next), then ``endCopy(_:)``.
    func beginCopy(_ sql: String) throws(StoreError) {
        guard let start = PQexec(handle, sql) else {
            throw StoreError.postgres(message: redactor.scrub(PGConnection.message(handle)), sql: sql)
        }
        let started = PQresultStatus(start)
        let startMessage = redactor.scrub(PGConnection.resultMessage(start))
        PQclear(start)
        guard started == PGRES_COPY_IN else { throw StoreError.postgres(message: startMessage, sql: sql) }
    }

    /// Sends rows of the COPY ``beginCopy(_:)`` started.
    func putCopyData(_ data: [UInt8], sql: String) throws(StoreError) {
        try putCopyData(data[...], sql: sql)
    }

    /// Sends rows of the COPY ``beginCopy(_:)`` started.
    func putCopyData(_ data: ArraySlice<UInt8>, sql: String) throws(StoreError) {
        var offset = 0
        while offset < data.count {
            let count = min(1 << 20, data.count - offset)
            let sent = data.withUnsafeBufferPointer { buffer -> Int32 in
                guard let base = buffer.baseAddress else { return -1 }
                return base.advanced(by: offset).withMemoryRebound(to: CChar.self, capacity: count) {
                    PQputCopyData(handle, $0, Int32(count))
                }
            }
            guard sent == 1 else { throw StoreError.postgres(message: redactor.scrub(PGConnection.message(handle)), sql: sql) }
            offset += count
        }
    }

    /// Ends the COPY ``beginCopy(_:)`` started; throws what the server refused in it.
    func endCopy(_ sql: String) throws(StoreError) {
        guard PQputCopyEnd(handle, nil) == 1 else {
            throw StoreError.postgres(message: redactor.scrub(PGConnection.message(handle)), sql: sql)
        }
        var failure: String?
        var state: String?
        while let result = PQgetResult(handle) {
            if PQresultStatus(result) != PGRES_COMMAND_OK, failure == nil {
                failure = redactor.scrub(PGConnection.resultMessage(result))
                state = PQresultErrorField(result, PGConnection.sqlStateField).map { String(cString: $0) }
            }
            PQclear(result)
        }
        if let failure {
            lastErrorState = state
            throw StoreError.postgres(message: failure, sql: sql, state: state)
        }
    }

    /// Ends the COPY ``beginCopy(_:)`` started as failed: the server discards its rows and the
    /// transaction fails (the caller rolls it back).
    func abandonCopy() {
        _ = PQputCopyEnd(handle, "abandoned by Ingot")
        while let result = PQgetResult(handle) { PQclear(result) }
    }

    /// Appends `text` to a COPY text-format row, escaping what the format needs escaped.
    static func appendCopyText(_ text: some Sequence<UInt8>, to out: inout [UInt8]) {
        // Most text has nothing to escape: appended whole.
        let whole: Bool? = text.withContiguousStorageIfAvailable { bytes in
            guard
                !bytes.contains(where: {
                    $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "\t") || $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r")
                })
            else { return false }
            out.append(contentsOf: bytes)
            return true
        }
        if whole == true { return }
        for byte in text {
            switch byte {
            case UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case UInt8(ascii: "\t"): out += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case UInt8(ascii: "\n"): out += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case UInt8(ascii: "\r"): out += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            default: out.append(byte)
            }
        }
    }

    /// `PG_DIAG_SQLSTATE` ('C'), which the C macro does not bring into Swift.
    private static let sqlStateField = Int32(UInt8(ascii: "C"))

    /// `bytes` as a `bytea` parameter in text form (`\x` and hex digits).
    static func byteaText(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = [UInt8(ascii: "\\"), UInt8(ascii: "x")]
        out.reserveCapacity(2 + bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of a `bytea` result in text form (`\x` and hex digits); `nil` when it is not one.
    static func bytea(fromText text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { utf8 -> [UInt8]? in
            guard utf8.count >= 2, utf8[0] == UInt8(ascii: "\\"), utf8[1] == UInt8(ascii: "x"), utf8.count % 2 == 0 else { return nil }
            let count = utf8.count / 2 - 1
            var valid = true
            let out = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                for k in 0..<count {
                    let high = hexValue[Int(utf8[2 + 2 * k])]
                    let low = hexValue[Int(utf8[3 + 2 * k])]
                    if high > 15 || low > 15 {
                        valid = false
                        break
                    }
                    buffer[k] = high << 4 | low
                }
                initialized = valid ? count : 0
            }
            return valid ? out : nil
        }
    }

    /// Each byte's value as a hex digit; 255 for a byte that is not one.
    private static let hexValue: [UInt8] = (0..<256).map { c in
        switch c {
        case 48...57: UInt8(c - 48)
        case 97...102: UInt8(c - 87)
        case 65...70: UInt8(c - 55)
        default: 255
        }
    }

    private static func message(_ handle: OpaquePointer) -> String {
        PQerrorMessage(handle).map { String(cString: $0) }?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "unknown error"
    }

    private static func resultMessage(_ result: OpaquePointer) -> String {
        PQresultErrorMessage(result).map { String(cString: $0) }?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "unknown error"
    }

    private static func withCStrings<R>(_ values: [String?], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
        let owned: [UnsafeMutablePointer<CChar>?] = values.map { $0.flatMap { strdup($0) } }
        defer { for p in owned { free(p) } }
        return body(owned.map { $0.map { UnsafePointer($0) } })
    }
}

extension PGConnection {
    /// The connection options that take one of a few words, and those words (libpq's own lists).
    static let wordOptions: [String: Set<String>] = [
        "sslmode": ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"],
        "gssencmode": ["disable", "prefer", "require"],
        "channel_binding": ["disable", "prefer", "require"],
        "target_session_attrs": ["any", "read-write", "read-only", "primary", "standby", "prefer-standby"],
        "load_balance_hosts": ["disable", "random"],
        "sslnegotiation": ["postgres", "direct"],
    ]

    enum Connecting { case connected, failed, timedOut, abandoned }

    /// Drives a connection `PQconnectStartParams` began until it is made, fails, takes longer
    /// than `timeout` seconds (libpq leaves `connect_timeout` to the caller of `PQconnectPoll`),
    /// or the run stops (`stopped`): polled a fifth of a second at a time, so SIGTERM while a
    /// server never answers ends the run within the runner's 2 s, not after `connect_timeout`.
    static func finishConnecting(_ handle: OpaquePointer, timeout: Double, stopped: StopFlag?) -> Connecting {
        guard PQstatus(handle) != CONNECTION_BAD else { return .failed }
        let deadline = ContinuousClock.now + .milliseconds(Int(timeout * 1000))
        var state = PGRES_POLLING_WRITING
        while true {
            if state == PGRES_POLLING_OK { return .connected }
            if state == PGRES_POLLING_FAILED { return .failed }
            if stopped?.value.withLock({ $0 }) == true { return .abandoned }
            if ContinuousClock.now >= deadline { return .timedOut }
            var fd = pollfd(fd: PQsocket(handle), events: Int16(state == PGRES_POLLING_READING ? POLLIN : POLLOUT), revents: 0)
            let ready = poll(&fd, 1, 200)
            if ready < 0 && errno != EINTR { return .failed }
            if ready > 0 { state = PQconnectPoll(handle) }
        }
    }
}
