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
/// An array found at the path is read as records whatever the layout (an export's pages, or an
/// API that answers an empty dictionary as `[]`).
package enum RecordsLayout: Sendable, Equatable, CustomStringConvertible {
    /// An array of records (or, at the top level, one object: one record).
    case array
    /// An object's members' values, each given its member's key under `key`.
    case values(key: String, value: String?)
    /// An object of parallel arrays, zipped into records.
    case columns

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
        }
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
        }
    }
}
