/// Which job of a shared run may claim a unit next (``RunOptions/claimTurns``). A run leaves it to
/// chance — whichever job asks first — and that is what a run wants: a faster job takes more.
/// A test gives the run's in-process jobs a turn order instead, so that every job provably takes
/// units (a test of a joined run that one job did alone would prove nothing about sharing), and
/// the interleaving of units between jobs is the same at every run.
///
/// Only the claims a job asks for wait for its turn: committing, writing and fetching never do,
/// and a job waits for its turn where it waits for work (handing its open batch to the writer
/// first, as when no unit is free), so a job waiting for its turn holds up no other.
package protocol ClaimTurns: Sendable {
    /// Whether job `job` may claim a unit now.
    func mayClaim(_ job: String) -> Bool
    /// Job `job` claimed a unit.
    func claimed(_ job: String)
    /// Job `job` ended its part: it claims nothing more, and no turn waits for it.
    func left(_ job: String)
}
