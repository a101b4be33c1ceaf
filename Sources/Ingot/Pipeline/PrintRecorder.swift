import Synchronization

/// A run's page prints, made as the writer saves pages (a page in parts once its last part is
/// saved) and spooled to a file (``PrintSpool``), for the next run's refresh
/// (PipelineRunner+Refresh.swift). Owned by the writer stage, used on its queue.
struct PrintRecorder {
    /// The spooled prints: `nil` when the run keeps none, or dropped them (``dropped`` says why).
    private(set) var spool: PrintSpool?
    private(set) var dropped: String?
    /// Set when the prints are dropped (the stages that make them stop).
    private let off: StopFlag
    /// ``RunOptions/maxPrintBytes``.
    private let maxBytes: Int
    /// The print of a page whose parts are being saved, and its rows so far.
    private var inProgress: (print: PagePrint, parts: PageFootprint.Gatherer)?

    init(keeps: Bool, maxBytes: Int, off: StopFlag) {
        self.maxBytes = maxBytes
        self.off = off
        guard keeps else { return }
        do {
            spool = try PrintSpool()
        } catch {
            dropped = "\(error)"
        }
    }

    /// Adds the prints of the pages of a saved batch. A page is clean when nothing of it was
    /// rejected, skipped or stored as NULL for being invalid, and the database refused nothing of
    /// its batch (`refused`).
    mutating func keep(_ pages: [DecodedPage], refused: Bool) {
        guard spool != nil else { return }
        for page in pages {
            // A page in one part comes with its footprint encoded (on its lane).
            let whole = inProgress == nil && page.isLastPart ? page.encodedFootprint : nil
            var state =
                inProgress.take()
                ?? (PagePrint(seq: page.seq, digest: page.digest ?? [], records: 0, clean: true, footprint: []), PageFootprint.Gatherer())
            // `take()` leaves nothing behind: the parts gathered so far are not copied.
            if whole == nil, let footprint = page.footprint { state.parts.add(footprint) }
            state.print.records += page.recordCount
            state.print.clean =
                state.print.clean && !refused && page.digest != nil && page.rejections.isEmpty && !page.pageRejected
                && page.skipped == 0 && page.invalidValues.isEmpty
            guard page.isLastPart else {
                inProgress = state
                continue
            }
            var print = state.print
            print.footprint = whole ?? state.parts.finish().encoded()
            do {
                try spool?.append(print)
            } catch {
                return drop("\(error)")
            }
            guard (spool?.bytes ?? 0) <= maxBytes else { return drop("the run's page prints passed \(maxBytes) bytes") }
        }
    }

    /// Keeps no prints for this run: the next one reads every page.
    mutating func drop(_ reason: String) {
        guard spool != nil else { return }
        spool = nil
        dropped = reason
        off.value.withLock { $0 = true }
    }
}
