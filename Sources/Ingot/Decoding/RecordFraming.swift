/// Where a page's records sit: the one place the record mapper, pagination (page and offset
/// pagination stop on a page without records, cursors read the last record) and `for_each` ask.
/// An array at a key path (`records: results`, or `.` for a page that is the array), JSON Lines,
/// or a layout that is not an array — a dictionary's values, parallel columns — which
/// ``parse(_:)`` rewrites into an array at the same path, so every user reads an array
/// (docs/pipelines.md, "Records that are not an array").
package struct RecordFraming: Sendable, Equatable {
    enum Shape: Sendable, Equatable {
        /// An array of records at this key path of the page's object (empty: the page itself,
        /// an array of records or one object); `layout` says how an object found there is read.
        case array(at: [String], layout: RecordsLayout)
        /// JSON Lines (`format: jsonl`): one record per line.
        case lines
    }

    var shape: Shape

    /// Records in an array at `path` (`[]`: the page is the array).
    static func array(at path: [String], layout: RecordsLayout = .array) -> RecordFraming {
        RecordFraming(shape: .array(at: path, layout: layout))
    }

    /// JSON Lines: one record per line.
    static let lines = RecordFraming(shape: .lines)

    /// The framing of a pipeline's pages: JSON Lines for `format: jsonl`, else `records:`'s path
    /// and layout.
    package static func of(recordsPath: [String], jsonLines: Bool, layout: RecordsLayout = .array) -> RecordFraming {
        jsonLines ? .lines : .array(at: recordsPath, layout: layout)
    }

    /// Parses a page as this framing reads it: one JSON text, or JSON Lines (a line that is not
    /// JSON is then left out and listed in the document's ``JSONDocument/lineFailures``). With a
    /// layout other than an array, an object at the records' path is rewritten into the array of
    /// its records, the rest of the page as it came (``RecordsLayout/arrayText(of:)``); a page the
    /// layout cannot read is returned as it came, and ``records(in:)`` says why.
    package func parse(_ bytes: [UInt8]) throws(JSONSyntaxError) -> JSONDocument {
        switch shape {
        case .array(let path, let layout):
            let document = try JSONDocument(bytes: bytes)
            if case .paths = layout {
                // The records of every array, one array beside the page's members.
                guard document.root.kind == .object, case .success(let array) = layout.arrayText(of: document.root) else { return document }
                let node = document.nodes[0]
                let close = Int(node.start + node.length) - 1
                var member = document.root.count > 0 ? "," : ""
                JSONText.quote(RecordsLayout.combinedKey, into: &member)
                member += ":"
                var rewritten = Array(bytes[..<close])
                rewritten += member.utf8
                rewritten += array
                rewritten += bytes[close...]
                return try JSONDocument(bytes: rewritten)
            }
            guard layout != .array, let value = JSONKeyPath(keys: path).resolve(in: document.root), value.kind == .object,
                case .success(let array) = layout.arrayText(of: value)
            else { return document }
            let node = document.nodes[value.index]
            var rewritten: [UInt8] = []
            rewritten.reserveCapacity(bytes.count + array.count - Int(node.length))
            rewritten += bytes[..<Int(node.start)]
            rewritten += array
            rewritten += bytes[Int(node.start + node.length)...]
            return try JSONDocument(bytes: rewritten)
        case .lines: return try JSONDocument(lines: bytes)
        }
    }

    /// Why a page holds no records where the framing says, as its rejection says it.
    struct Failure: Error, Equatable {
        /// The coding path where the records should have been.
        var path: String
        var reason: String
    }

    /// Where the records sit as a coding path prefix: empty for the top level.
    var codingPath: String {
        switch shape {
        case .array(let path, _): path.joined(separator: ".")
        case .lines: ""
        }
    }

    /// The path as the pipeline file writes it: `.` for the top level.
    var pathText: String { codingPath.isEmpty ? "." : codingPath }

    /// The records of a page, as the mapper walks them: their first node in the document's tape
    /// and how many there are (each record's next sibling follows its `end`).
    struct Records {
        /// The tape index of the first record.
        var first: Int
        /// How many records.
        var count: Int
        /// The page is one object, which is its one record (`records: "."`): its coding path is
        /// the page's, not `[0]`.
        var isSingleObject: Bool
        /// JSON Lines: each record's line number (its coding path is `line N`).
        var lines: [Int]? = nil
        /// `records: {paths: …}`: where each array's records start among all of them, so that a
        /// record's coding path is its own array's (`users[1]`), not the combined one's.
        var segments: [(path: String, start: Int)] = []

        /// Record `index`'s coding path, before the path inside it: `results[3]`, `line 7`,
        /// `users[1]`, or nothing for a page that is one object.
        func prefix(_ index: Int, path: String) -> String {
            if let lines, index < lines.count { return "line \(lines[index])" }
            if let inArray = Self.path(of: index, in: segments) { return inArray }
            return isSingleObject ? path : path + "[\(index)]"
        }

        /// Record `index`'s place in its own array among `segments` (`users[1]`), if it has one.
        static func path(of index: Int, in segments: [(path: String, start: Int)]) -> String? {
            segments.last { $0.start <= index }.map { $0.path + "[\(index - $0.start)]" }
        }

        /// The last record, or `nil` when there is none.
        func last(in document: JSONDocument) -> JSONValue? {
            guard count > 0 else { return nil }
            if isSingleObject { return JSONValue(document: document, index: first) }
            var index = first
            for _ in 1..<count { index = Int(document.nodes[index].end) }
            return JSONValue(document: document, index: index)
        }
    }

    /// The records in `document`, or why there are none. At the top level (`records: "."`) a page
    /// that is an array is its records, and a page that is one object is one record (GitHub's
    /// `GET /repos/{owner}/{repo}`, a PokeAPI detail page); below it, the key path must lead to
    /// an array.
    func records(in document: JSONDocument) -> Result<Records, Failure> {
        switch shape {
        case .lines:
            guard let lines = document.lines else {
                return .failure(Failure(path: "", reason: "the page was not read as JSON Lines"))
            }
            return .success(Records(first: 1, count: document.root.count, isSingleObject: false, lines: lines))
        case .array(let components, let layout):
            // The combined array is there when the page was rewritten; else the layout says why not.
            if case .paths = layout, document.root.kind == .object, document.root[RecordsLayout.combinedKey] == nil,
                case .failure(let reason) = layout.arrayText(of: document.root)
            {
                return .failure(Failure(path: "", reason: reason.description))
            }
            if case .paths = layout, document.root.kind != .object {
                return .failure(
                    Failure(path: "", reason: "expected an object holding the records' arrays, got \(document.root.kind.rawValue)"))
            }
            var value = document.root
            var path = ""
            for component in components {
                path += path.isEmpty ? component : "." + component
                guard let next = value[component] else { return .failure(Failure(path: path, reason: "the page has no '\(path)'")) }
                value = next
            }
            if value.kind == .object, layout != .array, case .failure(let reason) = layout.arrayText(of: value) {
                return .failure(Failure(path: path, reason: reason.description))
            }
            if components.isEmpty && value.kind == .object {
                return .success(Records(first: value.index, count: 1, isSingleObject: true))
            }
            guard value.kind == .array else {
                return .failure(
                    Failure(
                        path: path,
                        reason: components.isEmpty
                            ? "expected an array of records or one object at '.', got \(value.kind.rawValue)"
                            : "expected an array of records at '\(path)', got \(value.kind.rawValue)"))
            }
            var records = Records(first: value.index + 1, count: value.count, isSingleObject: false)
            if case .paths(let paths) = layout {
                var start = 0
                for entry in paths {
                    guard let array = JSONKeyPath(keys: entry.path).resolve(in: document.root), array.kind == .array else { continue }
                    records.segments.append((entry.text, start))
                    start += array.count
                }
            }
            return .success(records)
        }
    }

    /// The exact JSON text of record `index` of the page `bytes` (`ingot rejects --raw`, which
    /// reads the whole record from the archive); `nil` when the page has no such record.
    package func rawRecord(_ index: Int, in bytes: [UInt8]) -> String? {
        guard index >= 0, let document = try? parse(bytes), case .success(let records) = records(in: document), index < records.count
        else { return nil }
        var node = records.first
        for _ in 0..<index { node = Int(document.nodes[node].end) }
        let value = document.nodes[node]
        let quoted = value.kind == .string || value.kind == .escapedString
        let start = Int(value.start) - (quoted ? 1 : 0)
        let end = Int(value.start + value.length) + (quoted ? 1 : 0)
        let bytes = document.bytes  // the page as the layout rewrote it
        guard start >= 0, end <= bytes.count, start <= end else { return nil }
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }

    /// The page with `values` added to each of its records that is an object and lacks the key
    /// (`for_each … with:`): each record's `{` is followed by `"key":value,`. `nil` when the page
    /// is not a page of records (it is then mapped as it came, and rejected as it deserves).
    func injecting(_ values: [InjectedValue], into bytes: [UInt8]) -> [UInt8]? {
        guard let document = try? parse(bytes), case .success(let records) = records(in: document) else { return nil }
        let bytes = document.bytes  // the page as the layout rewrote it: an array at the records' path
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + records.count * 32)
        var copied = 0
        var node = records.first
        for _ in 0..<records.count {
            let record = JSONValue(document: document, index: node)
            node = Int(document.nodes[node].end)
            guard record.kind == .object else { continue }
            let missing = values.filter { record[$0.key] == nil }
            guard !missing.isEmpty else { continue }
            let open = Int(document.nodes[record.index].start) + 1
            out += bytes[copied..<open]
            copied = open
            var text = ""
            for value in missing {
                JSONText.quote(value.key, into: &text)
                text += ":" + value.json + ","
            }
            if record.count == 0 { text.removeLast() }
            out += Array(text.utf8)
        }
        out += bytes[copied...]
        return out
    }
}
