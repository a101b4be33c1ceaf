import Foundation

extension HTTPSourceConfig.ErrorWhen {
    /// Why `document` (a body answered with a 2xx status) is an error by this rule — its
    /// reason's value as text, or the sign at ``path`` when the rule names no reason — or `nil`
    /// when it is not one. (A body that is not JSON is not an error by this rule: it goes on as a
    /// page, and is rejected as such.)
    func error(in document: JSONDocument) -> String? {
        let sign = path.resolve(in: document.root)
        if let equals {
            guard let sign, Self.text(sign) == equals else { return nil }
        } else {
            guard let sign, !Self.isEmpty(sign) else { return nil }
        }
        guard let reason, let value = reason.resolve(in: document.root), !value.isNull else {
            return sign.map { "\(path) = \(Self.text($0))" }
        }
        return Self.text(value)
    }

    /// Whether the reason is one the rule retries.
    func retries(_ reason: String) -> Bool { retry.contains(reason) }

    /// Whether the reason says the thing asked for is not there (answered as a 404 is).
    func meansNotFound(_ reason: String) -> Bool { notFound.contains(reason) }

    /// The longest reason kept whole; a longer one (a server's text is input) is cut, as an
    /// error body's start is, and says how long it was.
    static let maxReasonBytes = 200

    /// A value as text: a string's characters, a number's or a literal's JSON text, an array's or
    /// an object's JSON text (at most 200 bytes of it).
    private static func text(_ value: JSONValue) -> String {
        let whole: String
        switch value.kind {
        case .string: whole = value.string ?? ""
        case .array, .object: whole = value.rawText
        default: whole = value.rawText
        }
        guard whole.utf8.count > maxReasonBytes else { return whole }
        return String(decoding: whole.utf8.prefix(maxReasonBytes), as: UTF8.self) + "… (\(whole.utf8.count) bytes)"
    }

    /// Null, `false`, an empty array or object: no sign of an error (`present: true`).
    private static func isEmpty(_ value: JSONValue) -> Bool {
        switch value.kind {
        case .null: true
        case .bool: value.bool == false
        case .array, .object: value.count == 0
        default: false
        }
    }
}
