import GRDB

/// What SQLite's errors, as GRDB throws them, mean for a run: CONSTRAINT, TOOBIG, MISMATCH or
/// RANGE is a value refused (the record is rejected, the run goes on); BUSY or LOCKED a database
/// held by another program.
extension DatabaseError: BackendError {
    var refusal: String? {
        guard [18, 19, 20, 25].contains(resultCode.primaryResultCode.rawValue) else { return nil }
        return message ?? "\(resultCode)"
    }

    var isLock: Bool { resultCode == .SQLITE_BUSY || resultCode == .SQLITE_LOCKED }
}
