/// Where the writer stage is. `writing` → `failed` (nothing more is saved; the source stops) →
/// `ended`, or `writing` → `ended`: ``WriterStage/finish(_:)`` ends it once, and after that the
/// runner owns the store (a pending commit timer does nothing). The first failure is the one
/// reported; later ones (a commit after it) are only logged. Tested alone (`WriterPhaseTests`).
enum WriterPhase {
    case writing
    case failed(any Error)
    case ended(Outcome)

    /// How the stage ended.
    enum Outcome {
        case finished
        /// The run was stopped before its source was exhausted.
        case interrupted
        case failed(any Error)
    }

    /// Why saving failed, if it did.
    var failure: (any Error)? {
        switch self {
        case .failed(let error), .ended(.failed(let error)): error
        case .writing, .ended: nil
        }
    }

    var isWriting: Bool { if case .writing = self { true } else { false } }
    var isInterrupted: Bool { if case .ended(.interrupted) = self { true } else { false } }
    var hasEnded: Bool { if case .ended = self { true } else { false } }

    /// Saving failed with `error`: whether it is the first failure (the source is to be stopped).
    mutating func fail(_ error: any Error) -> Bool {
        switch self {
        case .writing:
            self = .failed(error)
            return true
        case .failed: return false
        case .ended:
            assertionFailure("the writer stage failed after it ended: \(error)")
            return false
        }
    }

    /// The stage ended, its source `exhausted` or not: failed if it failed, else finished or
    /// interrupted.
    mutating func end(exhausted: Bool) {
        self = .ended(failure.map { .failed($0) } ?? (exhausted ? .finished : .interrupted))
    }
}
