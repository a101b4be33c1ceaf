import Foundation

/// How a run begins in a store (``IngestStore/beginRun(_:)``).
public enum RunBeginning: Sendable, Equatable {
    /// A new run, recorded with status running.
    case new(id: String, pipeline: String, startedAt: Date, archive: String?)
    /// An unfinished run taken up again (`--resume`, ``IngestStore/unfinishedRun(pipeline:)``),
    /// marked running again.
    case resumed(id: String, archive: String?)

    /// The run's id.
    public var id: String {
        switch self {
        case .new(let id, _, _, _), .resumed(let id, _): id
        }
    }
}
