import Foundation

extension IngotDatabase {
    /// What `fetch` cannot express — a join, a `GROUP BY`, a window — as SQL of your own, read-only
    /// (a write in it fails: SQLite's handle is read-only, PostgreSQL's transaction `READ ONLY`),
    /// each row decoded into `R` by its column names (`SELECT count(*) AS n …` for a property
    /// `n`). `arguments` bind to the backend's own placeholders: `?` in SQLite, `$1`, `$2`… in
    /// PostgreSQL. Values decode as `fetch`'s do: integers, doubles, booleans (`0`/`1`, `t`/`f`),
    /// text, ISO 8601 dates, and any other `Decodable` from its JSON or its text.
    ///
    /// ```swift
    /// struct Busy: Decodable { var country: String?; var people: Int }
    /// let busy = try await db.query(Busy.self, sql: "SELECT country, count(*) AS people FROM person GROUP BY country")
    /// ```
    public func query<R: Decodable>(_ type: R.Type, sql: String, arguments: [any Sendable] = []) async throws -> [R] {
        let bound = try arguments.map { argument -> ScalarValue in
            // As a predicate's constant; a decimal or a date as its stored text.
            switch try RowExpression.constant(argument) {
            case .value(let value), .decimal(.value(let value)), .time(.value(let value)): return value
            default: throw IngotQueryError(message: "the argument \(argument) cannot be bound")
            }
        }
        let (columns, rows) = try await read { reader in try reader.rows(sql: sql, arguments: bound) }
        return try rows.map { try R(from: ColumnsDecoder(columns: columns, values: $0)) }
    }
}

/// Decodes one row of `IngotDatabase.query` by its columns' names.
private struct ColumnsDecoder: Decoder {
    let columns: [String]
    let values: [ScalarValue]
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(Columns<Key>(decoder: self))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw DecodingError.typeMismatch([Any].self, .init(codingPath: codingPath, debugDescription: "a row decodes as an object"))
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        throw DecodingError.typeMismatch(Any.self, .init(codingPath: codingPath, debugDescription: "a row decodes as an object"))
    }

    func value(_ key: some CodingKey) -> ScalarValue? {
        columns.firstIndex(of: key.stringValue).map { values[$0] }
    }

    struct Columns<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let decoder: ColumnsDecoder
        var codingPath: [any CodingKey] { decoder.codingPath }
        var allKeys: [Key] { decoder.columns.compactMap { Key(stringValue: $0) } }

        func contains(_ key: Key) -> Bool { decoder.value(key) != nil }

        func decodeNil(forKey key: Key) throws -> Bool { (decoder.value(key) ?? .null) == .null }

        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
            guard let value = decoder.value(key), value != .null else {
                throw DecodingError.valueNotFound(
                    type, .init(codingPath: codingPath + [key], debugDescription: "no value in column \(key.stringValue)"))
            }
            if let decoded = ColumnsDecoder.plain(value, as: type) { return decoded }
            let text: String
            switch value {
            case .text(let s): text = s
            case .integer(let n): text = String(n)
            case .real(let d): text = String(d)
            case .bool(let b): text = b ? "true" : "false"
            case .null: text = "null"
            }
            if let decoded = try? JSONDecoder().decode(T.self, from: Data(text.utf8)) { return decoded }
            if let quoted = try? JSONEncoder().encode(text), let decoded = try? JSONDecoder().decode(T.self, from: quoted) {
                return decoded
            }
            throw DecodingError.typeMismatch(
                type, .init(codingPath: codingPath + [key], debugDescription: "column \(key.stringValue) holds \(value)"))
        }

        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<
            NestedKey
        > {
            throw DecodingError.typeMismatch(type, .init(codingPath: codingPath + [key], debugDescription: "a column holds one value"))
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            throw DecodingError.typeMismatch(
                [Any].self, .init(codingPath: codingPath + [key], debugDescription: "a column holds one value"))
        }

        func superDecoder() throws -> any Decoder { decoder }
        func superDecoder(forKey key: Key) throws -> any Decoder { decoder }
    }

    /// `value` as one of the plain types (PostgreSQL's values come as text: read as the type asks).
    static func plain<T>(_ value: ScalarValue, as type: T.Type) -> T? {
        let decoded: Any? =
            switch (type, value) {
            case (is String.Type, .text(let s)): s
            case (is Int.Type, .integer(let n)): Int(exactly: n)
            case (is Int.Type, .text(let s)): Int(s)
            case (is Int64.Type, .integer(let n)): n
            case (is Int64.Type, .text(let s)): Int64(s)
            case (is Double.Type, .real(let d)): d
            case (is Double.Type, .integer(let n)): Double(n)
            case (is Double.Type, .text(let s)): Double(s)
            case (is Bool.Type, .bool(let b)): b
            case (is Bool.Type, .integer(let n)): n != 0
            case (is Bool.Type, .text(let s)): ["t", "true", "1"].contains(s) ? true : ["f", "false", "0"].contains(s) ? false : nil
            case (is Date.Type, .text(let s)): RowDecoder.date(s)
            default: nil
            }
        return decoded as? T
    }
}
