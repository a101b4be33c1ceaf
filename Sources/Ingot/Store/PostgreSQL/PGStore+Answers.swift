import Foundation

/// HTTP answers kept for conditional requests (``AnswerKeeping``), in `_ingot_http_answers`.
extension PGStore: AnswerKeeping {
    func keptAnswers(pipeline: String) throws -> KeptAnswers {
        guard try connection.tableExists("_ingot_http_answers") else {
            return KeptAnswers(previous: [:]) { _ in nil }
        }
        var previous: [String: KeptAnswers.Validators] = [:]
        for row in try connection.execute(
            "SELECT request, etag, last_modified FROM _ingot_http_answers WHERE pipeline = $1", [pipeline])
        {
            if let request = row[0], let validators = KeptAnswers.Validators(etag: row[1], lastModified: row[2]) {
                previous[request] = validators
            }
        }
        guard !previous.isEmpty else { return KeptAnswers(previous: [:]) { _ in nil } }
        let reader = AnswerReader(url: url)
        return KeptAnswers(previous: previous) { request in try reader.body(pipeline: pipeline, request: request) }
    }

    func keepAnswers(_ answers: KeptAnswers, pipeline: String) throws {
        try connection.transaction {
            try connection.execute(
                """
                CREATE TABLE IF NOT EXISTS _ingot_http_answers (pipeline text NOT NULL, request text NOT NULL, etag text,
                  last_modified text, size bigint NOT NULL, body bytea NOT NULL, headers text, PRIMARY KEY (pipeline, request))
                """)
            var answered: [String] = []
            try answers.answers { answer in
                let validators = answer.validators
                if let body = answer.body {
                    try connection.execute(
                        """
                        INSERT INTO _ingot_http_answers (pipeline, request, \(Self.answerColumns)) VALUES ($1, $2, $3, $4, $5, $6::bytea, $7)
                          ON CONFLICT (pipeline, request) DO UPDATE SET etag = excluded.etag, last_modified = excluded.last_modified,
                            size = excluded.size, body = excluded.body, headers = excluded.headers
                        """,
                        [
                            pipeline, answer.request, validators.etag, validators.lastModified, String(body.size),
                            PGConnection.byteaText(body.compressed), body.headersJSON,
                        ])
                } else {
                    try connection.execute(
                        "UPDATE _ingot_http_answers SET etag = $1, last_modified = $2 WHERE pipeline = $3 AND request = $4",
                        [validators.etag, validators.lastModified, pipeline, answer.request])
                }
                answered.append(answer.request)
            }
            try connection.execute(
                "DELETE FROM _ingot_http_answers WHERE pipeline = $1 AND NOT (request = ANY($2::text[]))",
                [pipeline, PGStore.arrayLiteral(answered)])
        }
    }
}

extension PGStore {
    /// A `text[]` literal of `values` (each quoted, `"` and `\` escaped).
    static func arrayLiteral(_ values: [String]) -> String {
        let quoted = values.map { value in
            "\"" + value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
        }
        return "{" + quoted.joined(separator: ",") + "}"
    }
}

/// The kept answers' own connection, opened when a 304 first asks for a body (from the source
/// queue, one caller at a time; the lock only makes that explicit).
private final class AnswerReader: @unchecked Sendable {  // its connection is used under `lock` only
    private let url: String
    private let lock = NSLock()
    private var connection: PGConnection?

    init(url: String) {
        self.url = url
    }

    func body(pipeline: String, request: String) throws -> KeptAnswers.Body? {
        try lock.withLock {
            if connection == nil { connection = try PGConnection(url: url, role: .tool) }
            guard
                let row = try connection?.execute(
                    "SELECT body, size, headers FROM _ingot_http_answers WHERE pipeline = $1 AND request = $2", [pipeline, request]
                ).first,
                let body = row[0].flatMap(PGConnection.bytea(fromText:)), let size = row[1].flatMap({ Int($0) })
            else { return nil }
            return KeptAnswers.Body(compressed: body, size: size, headers: KeptAnswers.Body.headers(fromJSON: row[2]))
        }
    }
}
