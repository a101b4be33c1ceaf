/// A parsed JSON text (RFC 8259): the original bytes and a flat *tape* of nodes that indexes them.
///
/// Parsing validates the whole text once and records where every value starts and ends; nothing is
/// materialised. Strings stay bytes until someone asks for a `String`, numbers stay digits until
/// someone asks for an `Int64` or a `Double`. Object members are laid out as a key node followed by
/// the value's subtree; a container node knows the index just past its subtree (`end`), so a value
/// is skipped in O(1).
///
/// ```
/// {"id":1,"dogs":[{"id":2}]}
/// tape: 0 object(count 2, end 8) · 1 "id" · 2 1 · 3 "dogs" · 4 array(count 1, end 8)
///       · 5 object(count 1, end 8) · 6 "id" · 7 2
/// ```
///
/// A document is immutable and `Sendable`: a decode lane parses it, then hands it on.
package struct JSONDocument: Sendable {
    /// The bytes the document was parsed from.
    package let bytes: [UInt8]
    /// The tape; node 0 is the root value.
    let nodes: [JSONNode]
    /// JSON Lines (``init(lines:maxDepth:)``): the line number of each of the root array's elements.
    package let lines: [Int]?
    /// JSON Lines: the lines that are not JSON, left out of the root array.
    package let lineFailures: [(line: Int, error: JSONSyntaxError)]

    /// Parses `bytes`, or throws a ``JSONSyntaxError`` naming the byte offset of the first error.
    package init(bytes: [UInt8], maxDepth: Int = 512) throws(JSONSyntaxError) {
        var parser = JSONParser(maxDepth: maxDepth)
        self.nodes = try parser.parse(bytes)
        self.bytes = bytes
        lines = nil
        lineFailures = []
    }

    /// Parses `bytes` as JSON Lines: the root is an array of the lines' values (blank lines
    /// skipped); a line that is not JSON is left out and listed in ``lineFailures``. Throws only
    /// for a text the tape cannot index (4 GiB or more).
    package init(lines bytes: [UInt8], maxDepth: Int = 512) throws(JSONSyntaxError) {
        var parser = JSONParser(maxDepth: maxDepth)
        let parsed = try parser.parseLines(bytes)
        nodes = parsed.nodes
        self.bytes = bytes
        lines = parsed.lines
        lineFailures = parsed.failures.map { ($0.line, $0.error) }
    }

    /// The root value.
    package var root: JSONValue { JSONValue(document: self, index: 0) }
}

/// One node of a ``JSONDocument``'s tape.
struct JSONNode: Sendable {
    enum Kind: UInt8, Sendable {
        case null, `false`, `true`
        /// A number without fraction or exponent.
        case integer
        /// A number with a fraction or an exponent.
        case double
        /// A string without escapes: its bytes are its UTF-8.
        case string
        /// A string with at least one escape sequence.
        case escapedString
        case array, object
    }
    var kind: Kind
    /// Offset of the value's first byte. Strings: the first byte after the opening quote.
    var start: UInt32
    /// Length in bytes. Strings: the content between the quotes; containers: brackets included.
    var length: UInt32
    /// Containers: members (objects) or elements (arrays).
    var count: UInt32
    /// Index of the first node after this value's subtree.
    var end: UInt32
}

/// A JSON text that is not valid, with the byte offset where the parser gave up.
package struct JSONSyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
    package var offset: Int
    package var reason: String
    package var description: String { "invalid JSON at byte \(offset): \(reason)" }
}
