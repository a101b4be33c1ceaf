import Foundation
import GRDB

/// HTTP answers kept for conditional requests (``AnswerKeeping``), in `_ingot_http_answers`.
extension SQLiteStore: AnswerKeeping {
    func keptAnswers(pipeline: String) throws -> KeptAnswers {
        var previous: [String: KeptAnswers.Validators] = [:]
        try dbQueue.read { db in
            guard try db.tableExists("_ingot_http_answers") else { return }
            let rows = try Row.fetchCursor(
                db, sql: "SELECT request, etag, last_modified FROM _ingot_http_answers WHERE pipeline = ?", arguments: [pipeline])
            while let row = try rows.next() {
                if let request = row[0] as String?, let validators = KeptAnswers.Validators(etag: row[1], lastModified: row[2]) {
                    previous[request] = validators
                }
            }
        }
        guard !previous.isEmpty else { return KeptAnswers(previous: [:]) { _ in nil } }
        var configuration = Configuration()
        configuration.readonly = true
        let reader = try DatabaseQueue(path: dbQueue.path, configuration: configuration)
        return KeptAnswers(previous: previous) { request in
            try reader.read { db in
                try Row.fetchOne(
                    db, sql: "SELECT body, size, headers FROM _ingot_http_answers WHERE pipeline = ? AND request = ?",
                    arguments: [pipeline, request])
            }.flatMap { row in
                (row[0] as Data?).map {
                    KeptAnswers.Body(
                        compressed: [UInt8]($0), size: row[1] as Int? ?? -1, headers: KeptAnswers.Body.headers(fromJSON: row[2]))
                }
            }
        }
    }

    func keepAnswers(_ answers: KeptAnswers, pipeline: String) throws {
        try writeTransaction { db in
            try db.execute(
                sql: """
                    CREATE TABLE IF NOT EXISTS _ingot_http_answers (pipeline TEXT NOT NULL, request TEXT NOT NULL, etag TEXT,
                      last_modified TEXT, size INTEGER NOT NULL, body BLOB NOT NULL, headers TEXT, PRIMARY KEY (pipeline, request));
                    CREATE TEMP TABLE IF NOT EXISTS _ingot_answered (request TEXT PRIMARY KEY);
                    DELETE FROM _ingot_answered;
                    """)
            let fresh = try db.makeStatement(
                sql: """
                    INSERT INTO _ingot_http_answers (pipeline, request, \(Self.answerColumns)) VALUES (?, ?, ?, ?, ?, ?, ?)
                      ON CONFLICT (pipeline, request) DO UPDATE SET etag = excluded.etag, last_modified = excluded.last_modified,
                        size = excluded.size, body = excluded.body, headers = excluded.headers
                    """)
            let stands = try db.makeStatement(
                sql: "UPDATE _ingot_http_answers SET etag = ?, last_modified = ? WHERE pipeline = ? AND request = ?")
            let answered = try db.makeStatement(sql: "INSERT OR IGNORE INTO _ingot_answered (request) VALUES (?)")
            try answers.answers { answer in
                let validators = answer.validators
                if let body = answer.body {
                    try fresh.execute(arguments: [
                        pipeline, answer.request, validators.etag, validators.lastModified, body.size, Data(body.compressed),
                        body.headersJSON,
                    ])
                } else {
                    try stands.execute(arguments: [validators.etag, validators.lastModified, pipeline, answer.request])
                }
                try answered.execute(arguments: [answer.request])
            }
            try db.execute(
                sql: "DELETE FROM _ingot_http_answers WHERE pipeline = ? AND request NOT IN (SELECT request FROM _ingot_answered)",
                arguments: [pipeline])
            try db.execute(sql: "DROP TABLE _ingot_answered")
        }
    }
}
