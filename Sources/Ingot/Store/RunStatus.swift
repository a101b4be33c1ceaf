import Foundation

/// How a run ended, as its row in the database records it.
public enum RunStatus: String, Sendable {
    /// Every page was read and applied (rejections are counted, not fatal).
    case finished
    /// The run stopped on an error; everything committed before it stays.
    case failed
    /// The run was stopped (SIGINT/SIGTERM) before the end of its source; what was read is saved.
    case interrupted
}
