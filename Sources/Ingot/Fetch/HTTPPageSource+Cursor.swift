import Foundation

/// Where an HTTP source goes next, as a value (``HTTPPageSource/Cursor``: a URL, a body cursor,
/// a page number, an offset, a list item) and as the resume state a page carries; and a body
/// cursor written into the source's JSON body.
extension HTTPPageSource {
    /// Where the next page comes from.
    enum Cursor: Equatable {
        case url(String)
        /// A body cursor (`paginate: {cursor: {…, body: PATH}}`): the cursor's JSON text, written
        /// into the source's body at the path; the URL stays the source's.
        case body(String)
        case page(Int)
        case offset(Int)
        /// List mode (``init(config:framing:urls:environment:maxPageBytes:logger:)``): the URL at
        /// this index of the list.
        case item(Int)

        /// A numbered cursor's number (a page number, an offset).
        var position: Int {
            switch self {
            case .page(let n), .offset(let n), .item(let n): n
            case .url, .body: 0
            }
        }

        /// Every form a URL may hold each secret in (``URLText/forms(of:)``), longest first, so
        /// that a longer form is hidden before a shorter one inside it. A marker's number is its
        /// place in this list, the same for the same secrets.
        static func forms(of secrets: [String]) -> [String] {
            var forms: [String] = []
            for form in secrets.flatMap(URLText.forms(of:)) where !forms.contains(form) { forms.append(form) }
            return forms.enumerated().sorted { ($0.element.utf8.count, -$0.offset) > ($1.element.utf8.count, -$1.offset) }.map(\.element)
        }

        /// The cursor as a resume state (stored in the run's row), each of `secrets` (the URL's
        /// parts from the environment) written as `⟨secret N⟩` in every form (``forms(of:)``):
        /// a stored state holds no secret, and a resume puts back the values of its own
        /// environment. The marker cannot occur in a URL Ingot sends: non-ASCII is
        /// percent-encoded there.
        func state(hiding secrets: [String]) -> String {
            switch self {
            case .url(var u):
                for (k, secret) in Cursor.forms(of: secrets).enumerated() where !secret.isEmpty {
                    u = u.replacingOccurrences(of: secret, with: "⟨secret \(k)⟩")
                }
                return "url:" + u
            case .body(let json): return "body:" + json
            case .page(let n): return "page:\(n)"
            case .offset(let n): return "offset:\(n)"
            case .item(let n): return "item:\(n)"
            }
        }

        init?(state: String, secrets: [String]) {
            if state.hasPrefix("url:") {
                var u = String(state.dropFirst(4))
                for (k, secret) in Cursor.forms(of: secrets).enumerated() { u = u.replacingOccurrences(of: "⟨secret \(k)⟩", with: secret) }
                self = .url(u)
            } else if state.hasPrefix("body:"), (try? JSONDocument(bytes: Array(state.utf8.dropFirst(5)))) != nil {
                // Parsed to be sure: a resume state is input, and this one goes into a request.
                self = .body(String(state.dropFirst(5)))
            } else if state.hasPrefix("page:"), let n = Int(state.dropFirst(5)) {
                self = .page(n)
            } else if state.hasPrefix("offset:"), let n = Int(state.dropFirst(7)) {
                self = .offset(n)
            } else if state.hasPrefix("item:"), let n = Int(state.dropFirst(5)) {
                self = .item(n)
            } else {
                return nil
            }
        }
    }

    /// `body` (a JSON object's text) with `value` (JSON text) at `path`, replacing what is there
    /// or adding the missing keys.
    static func setting(_ value: String, at path: JSONKeyPath, in body: String) -> String {
        guard let document = try? JSONDocument(bytes: Array(body.utf8)) else { return body }
        var current = document.root
        let keys = path.components.compactMap { if case .key(let key) = $0 { key } else { nil } }
        for (k, key) in keys.enumerated() {
            guard current.kind == .object else { return body }
            if let next = current[key], k < keys.count - 1, next.kind == .object {
                current = next
                continue
            }
            // The value at the rest of the path: objects around `value` for the keys missing.
            var rest = value
            for inner in keys[(k + 1)...].reversed() {
                var name = ""
                JSONText.quote(inner, into: &name)
                rest = "{" + name + ":" + rest + "}"
            }
            var bytes = document.bytes
            if let existing = current[key] {
                // Replaced where it stands (a key on the way that is no object, by the path's objects).
                bytes.replaceSubrange(existing.rawBytes.indices, with: Array(rest.utf8))
            } else {
                // Added inside this object, before its closing brace.
                var member = current.count > 0 ? "," : ""
                JSONText.quote(key, into: &member)
                member += ":" + rest
                bytes.insert(contentsOf: Array(member.utf8), at: current.rawBytes.endIndex - 1)
            }
            return String(decoding: bytes, as: UTF8.self)
        }
        return body
    }
}
