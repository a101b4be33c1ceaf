/// "Did you mean …?" for a word a pipeline file gives where another is expected: the expected
/// word it is closest to (by edits: a letter added, dropped, changed or two swapped), when it is
/// close enough to be a slip — `identitiy` → `identity`, `atributes` → `attributes`,
/// `strng` → `string` — or a word other tools use for it (`int` → `integer`, `iso` → `iso8601`).
enum NearMiss {
    /// Words other tools (JSON Schema, SQL, Swift) use for what Ingot names otherwise.
    private static let aliases: [String: String] = [
        "int": "integer", "int64": "integer", "number": "double", "float": "double", "real": "double", "str": "string",
        "text": "string", "boolean": "bool", "iso": "iso8601", "iso-8601": "iso8601", "iso_8601": "iso8601",
        "datetime": "date", "timestamp": "date", "next": "next_url", "object": "json",
    ]

    /// The expected word `word` most likely stands for, if any.
    static func suggestion(for word: String, among expected: [String]) -> String? {
        if let alias = aliases[word.lowercased()], expected.contains(alias) { return alias }
        let lowered = word.lowercased()
        if let same = expected.first(where: { $0.lowercased() == lowered && $0 != word }) { return same }
        let limit = max(1, min(2, word.count / 3))
        let scored = expected.map { ($0, distance(lowered, $0.lowercased())) }.filter { $0.1 <= limit }
        guard let best = scored.min(by: { $0.1 < $1.1 }), scored.filter({ $0.1 == best.1 }).count == 1 else { return nil }
        return best.0
    }

    /// ` (did you mean 'x'?)`, or nothing.
    static func hint(for word: String, among expected: [String]) -> String {
        suggestion(for: word, among: expected).map { " (did you mean '\($0)'?)" } ?? ""
    }

    /// Edits from `a` to `b`: insertions, deletions, substitutions, and swaps of two neighbours
    /// (optimal string alignment).
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8)
        let b = Array(b.utf8)
        if a.isEmpty || b.isEmpty { return max(a.count, b.count) }
        var rows = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { rows[i][0] = i }
        for j in 0...b.count { rows[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                rows[i][j] = min(rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] { rows[i][j] = min(rows[i][j], rows[i - 2][j - 2] + 1) }
            }
        }
        return rows[a.count][b.count]
    }
}
