/// A store that keeps each pipeline's HTTP answers for conditional requests (docs/pipelines.md,
/// "Conditional requests"), in `_ingot_http_answers`: per request (its URL without secrets), the
/// validators of its last answer, that answer's body (zstd-compressed) and the headers the archive
/// keeps of it.
protocol AnswerKeeping {
    /// What the last finished run of `pipeline` kept: its validators, read now; a body read when
    /// a 304 asks for it, on a connection of its own.
    func keptAnswers(pipeline: String) throws -> KeptAnswers
    /// Keeps a finished run's answers for the next: a fresh answer replaces what was kept for its
    /// request, a 304's kept answer stays, and a request the run did not make is forgotten.
    func keepAnswers(_ answers: KeptAnswers, pipeline: String) throws
}

extension AnswerKeeping {
    /// The table's columns, after `pipeline` and `request` (its key).
    static var answerColumns: String { "etag, last_modified, size, body, headers" }
}
