/// How the value at a pipeline's `records:` path holds its records when it is an object rather
/// than an array (docs/pipelines.md, "Records that are not an array"):
///
/// - `records: {values: versions, key: version}` — npm's `versions: {"1.0.0": {…}}`, MediaWiki's
///   `pages`, Firebase's pushed children: each member's value is a record, and the member's key is
///   given to it as `version` (a record that has a `version` of its own keeps its own). A value
///   that is not an object becomes `{version: KEY, VALUE_NAME: value}` with `value: NAME`
///   (npm's `time: {"1.0.0": "2015-…"}`), and is the record as it is without.
/// - `records: {columns: hourly}` — Open-Meteo's `hourly: {time: […], temperature_2m: […]}`:
///   parallel arrays of one length, zipped; record *i* has each column's *i*th value under the
///   column's name.
///
/// - `records: {paths: {users: user, tickets: ticket}}` — Zendesk's sideloads (`?include=users`),
///   Discourse's `users` beside `topics`: several arrays of one page, each of an entity, read in
///   the order listed. Each object is given its array's path as `@from`, and the records of all
///   of them are one array at `@records` beside the page's own members (the resource's root
///   chooses each record's entity by `@from`). An array that is absent holds no records (JSON:API
///   leaves `included` out when nothing is).
///
/// An array found at the path is read as records whatever the layout (an export's pages, or an
/// API that answers an empty dictionary as `[]`).
package enum RecordsLayout: Sendable, Equatable, CustomStringConvertible {
    /// An array of records (or, at the top level, one object: one record).
    case array
    /// An object's members' values, each given its member's key under `key`.
    case values(key: String, value: String?)
    /// An object of parallel arrays, zipped into records.
    case columns
    /// Several arrays of the page, each of an entity, in order.
    case paths([RecordsPath])

    /// One array of a `paths` layout: where it is in the page and the entity its records are.
    package struct RecordsPath: Sendable, Equatable {
        package var path: [String]
        package var entity: String
        /// The path as written: what `@from` says.
        package var text: String { path.joined(separator: ".") }
    }

    /// Where a `paths` layout puts its records, beside the page's members.
    package static let combinedKey = "@records"
    /// The member each record of a `paths` layout is given: its array's path.
    package static let fromKey = "@from"

    /// Why an object cannot be read in this layout, as the page's rejection says it.
    package struct Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        package var description: String
    }

    /// The records of `object`, written as the JSON array ``RecordFraming`` reads instead, or why
    /// there are none. Values keep their exact text (numbers their digits, strings their escapes).
    func arrayText(of object: JSONValue) -> Result<[UInt8], Refusal> {
        switch self {
        case .array: .success(Array(object.rawBytes))
        case .values(let key, let value): .success(Self.values(of: object, key: key, value: value))
        case .columns: Self.zipped(object)
        case .paths(let paths): Self.combined(object, paths)
        }
    }

    private static func combined(_ page: JSONValue, _ paths: [RecordsPath]) -> Result<[UInt8], Refusal> {
        var out: [UInt8] = [UInt8(ascii: "[")]
        var first = true
        for entry in paths {
            guard let array = JSONKeyPath(keys: entry.path).resolve(in: page), !array.isNull else { continue }
            guard array.kind == .array else {
                return .failure(Refusal(description: "expected an array of records at '\(entry.text)', got \(array.kind.rawValue)"))
            }
            var from = ""
            JSONText.quote(fromKey, into: &from)
            from += ":"
            JSONText.quote(entry.text, into: &from)
            for element in array.elements {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                guard element.kind == .object else {
                    out += element.rawBytes
                    continue
                }
                out.append(UInt8(ascii: "{"))
                out += from.utf8
                if element.count > 0 { out.append(UInt8(ascii: ",")) }
                out += element.rawBytes.dropFirst()
            }
        }
        out.append(UInt8(ascii: "]"))
        return .success(out)
    }

    private static func values(of object: JSONValue, key: String, value valueName: String?) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "[")]
        out.reserveCapacity(object.rawBytes.count + object.count * (key.utf8.count + 8))
        var keyText = ""
        JSONText.quote(key, into: &keyText)
        var valueText = ""
        if let valueName { JSONText.quote(valueName, into: &valueText) }
        for (index, (name, value)) in object.members.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            if value.kind == .object, value[key] == nil {
                // `{` KEY `:` NAME, then the object's members as they came.
                out.append(UInt8(ascii: "{"))
                out += keyText.utf8
                out.append(UInt8(ascii: ":"))
                out += name.rawBytes
                let inner = value.rawBytes.dropFirst()
                if value.count > 0 { out.append(UInt8(ascii: ",")) }
                out += inner
            } else if value.kind != .object, valueName != nil {
                out.append(UInt8(ascii: "{"))
                out += keyText.utf8
                out.append(UInt8(ascii: ":"))
                out += name.rawBytes
                out.append(UInt8(ascii: ","))
                out += valueText.utf8
                out.append(UInt8(ascii: ":"))
                out += value.rawBytes
                out.append(UInt8(ascii: "}"))
            } else {
                out += value.rawBytes
            }
        }
        out.append(UInt8(ascii: "]"))
        return out
    }

    private static func zipped(_ object: JSONValue) -> Result<[UInt8], Refusal> {
        var names: [ArraySlice<UInt8>] = []
        var columns: [[ArraySlice<UInt8>]] = []
        for (name, column) in object.members {
            guard column.kind == .array else {
                return .failure(
                    Refusal(description: "column \(name.rawText) is \(column.kind.rawValue), not an array (records: {columns: …})"))
            }
            if let first = columns.first, first.count != column.count {
                let firstName = String(decoding: names[0], as: UTF8.self)
                return .failure(
                    Refusal(
                        description:
                            "column \(name.rawText) has \(column.count) values where \(firstName) has \(first.count): columns are zipped, one length for all"
                    ))
            }
            names.append(name.rawBytes)
            columns.append(column.elements.map(\.rawBytes))
        }
        var out: [UInt8] = [UInt8(ascii: "[")]
        for row in 0..<(columns.first?.count ?? 0) {
            if row > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            for (c, name) in names.enumerated() {
                if c > 0 { out.append(UInt8(ascii: ",")) }
                out += name
                out.append(UInt8(ascii: ":"))
                out += columns[c][row]
            }
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "]"))
        return .success(out)
    }

    /// The layout as the pipeline file writes it.
    package var description: String {
        switch self {
        case .array: "array"
        case .values(let key, let value): "values (key: \(key)\(value.map { ", value: \($0)" } ?? ""))"
        case .columns: "columns"
        case .paths(let paths): "paths (\(paths.map { "\($0.text): \($0.entity)" }.joined(separator: ", ")))"
        }
    }
}
