import Dispatch
import Foundation
import Logging
import Synchronization

/// The stages a run wires together: decode lanes, and the source loop that feeds them through
/// the archive.
extension PipelineRunner {
    /// Creates `count` decode lanes, each a serial queue with its own ``DecodingContext``, and
    /// returns the function that decodes a page on its lane (by `seq`) and hands the result to
    /// the assembler.
    /// With `keepsPrints`, each part also carries its page's digest and the rows it touched (a
    /// refresh's print, PipelineRunner+Refresh.swift).
    func makeDecodeLanes(
        count lanes: Int, assembler: BatchAssembler, logger: Logger, flow: PageFlow, keepsPrints: Bool = false,
        printsOff: StopFlag = StopFlag()
    ) -> @Sendable (Page) -> Void {
        let plans = mappingPlans()
        let laneQueues = (0..<lanes).map { k in
            let queue = DispatchQueue(label: "ingot.decode.\(k + 1)", qos: .userInitiated)
            // A new queue and a new context: binding them cannot meet another binding.
            try? DecodingContext.bind(DecodingContext(name: "decode.\(k + 1)", plans: plans), to: queue)
            return queue
        }
        // A lane hands a big page on in parts of a batch's size, and runs at most two parts
        // ahead of the assembler: a page of millions of tiny records is never held decoded whole.
        let gates = (0..<lanes).map { _ in DispatchSemaphore(value: 2) }
        let step = DecodeStep(
            assembler: assembler, logger: logger, flow: flow, keepsPrints: keepsPrints, printsOff: printsOff,
            layouts: keepsPrints ? EntityLayout.layouts(of: config.model) : [],
            partRecords: options.batchRecords(of: config),
            maxPageBytes: maxPageBytes, rootName: config.root)
        return { page in
            let lane = laneQueues[page.seq % lanes]
            let gate = gates[page.seq % lanes]
            lane.async {
                guard let context = DecodingContext.current, context.mappers.indices.contains(page.resource) else {
                    preconditionFailure("decode lane \(lane.label) has no DecodingContext for resource \(page.resource)")
                }
                var mapper = context.mappers[page.resource]
                step.decode(page, with: &mapper, gate: gate)
                context.mappers[page.resource] = mapper
            }
        }
    }

    /// One mapping plan per resource: its root entity and where its records sit.
    private func mappingPlans() -> [MappingPlan] {
        config.resources.map { resource in
            var plan = MappingPlan(
                model: config.model, root: resource.root ?? config.root, framing: resource.framing,
                incrementalPath: config.incremental?.cursorPath)
            plan.storesRecords = resource.root != nil
            plan.keepsRecords = config.rootWriteRules.values.contains { $0.rejectsUnknown }
            plan.maxRecordRows = options.maxRecordRows
            plan.deleteWhen = resource.deleteWhen
            if let choice = resource.rootChoice {
                var entities: [String: Int] = [:]
                for (value, entity) in choice.entities { entities[value] = config.model.index(of: entity) }
                plan.rootChoice = (choice.path, entities, choice.skipsOthers)
            }
            return plan
        }
    }

    /// Reads `source` on its own queue, one in-flight slot per page, numbering pages from
    /// `firstSeq`; each page is archived (when there is an archive) before it is decoded. A page
    /// over ``maxPageBytes`` is rejected here, where it enters: neither archived nor decoded, so
    /// nothing a run accepts is unreadable by a replay. Stops when the source ends, on
    /// ``stop()``, or when the writer or the archive failed, then tells the assembler how many
    /// pages there were and why the source stopped.
    ///
    /// With `keepsPrints`, each page is digested as it is read; with a `refresh` plan, a page it
    /// leaves out is archived like any other, then handed to the assembler undecoded
    /// (``DecodedPage/leftOut(_:print:)``).
    func startSource(
        _ source: any PageSource, firstSeq: Int, budget: PageBudget, flow: PageFlow, archive: ArchiveStage?, writer: WriterStage,
        assembler: BatchAssembler, keepsPrints: Bool = false, refresh: RefreshPlan? = nil, decode: @escaping @Sendable (Page) -> Void
    ) {
        let loop = SourceLoop(
            source: source, budget: budget, flow: flow, archive: archive, writer: writer, assembler: assembler,
            digests: keepsPrints && refresh != nil, refresh: refresh, decode: decode, stopping: stopping, maxPageBytes: maxPageBytes,
            rootName: config.root, resources: config.resources.map(\.name))
        DispatchQueue(label: "ingot.source", qos: .userInitiated).async { loop.run(firstSeq: firstSeq) }
    }

    /// A page the run cannot take, as a rejected page: over the size limit, or unreadable (a
    /// damaged unit of a joined run). Its reason, its size, and a prefix of its text (when the
    /// source kept any). It carries its resume state: the source goes on after it.
    static func rejectedPage(_ page: Page, limit: Int, entity: String) -> DecodedPage {
        let size = max(page.oversized ?? 0, page.bytes.count)
        let seen = page.oversized.map { "\(max($0, limit + 1))" } ?? "\(size)"
        let reason =
            page.unreadable
            ?? "the page is \(seen) bytes, over max_page_bytes (\(limit)); it was not archived"
        let rejection = RecordRejection(
            entity: entity, codingPath: "", reason: reason, source: page.source, recordIndex: nil,
            raw: RecordRejection.prefix(page.bytes[...]), rawLength: size, code: page.unreadable == nil ? .pageTooLarge : .unreadable)
        var rejected = DecodedPage(
            seq: page.seq, source: page.source, bytes: page.bytes.count, pageBytes: page.bytes.count, records: [],
            rejections: [rejection], pageRejected: true, recordCount: 0)
        rejected.resumeState = page.resumeState
        rejected.unit = page.unit
        rejected.unitContinues = page.unitContinues
        return rejected
    }
}

/// What a decode lane does with one page, on the lane: inflate it when compressed, give a
/// for_each child its parent's values, map it in parts, and hand each part to the assembler
/// (with its print when the run keeps them). Immutable: shared by every lane.
struct DecodeStep: Sendable {
    let assembler: BatchAssembler
    let logger: Logger
    let flow: PageFlow
    let keepsPrints: Bool
    let printsOff: StopFlag
    let layouts: [EntityLayout]
    /// Records per part, by resource (a batch's size).
    let partRecords: [Int]
    let maxPageBytes: Int
    let rootName: String

    func decode(_ page: Page, with mapper: inout RecordMapper, gate: DispatchSemaphore) {
        var page = page
        if keepsPrints && page.digest == nil && !printsOff.value.withLock({ $0 }) {
            page.digest = page.bytes.withUnsafeBytes { SHA256.digest($0) }
        }
        // What the source charged the page's slot: given back, and counted as bytes read,
        // whatever inflating or a for_each's injection made of it.
        let chargedBytes = page.bytes.count
        // A compressed file is inflated here, on its lane, bounded as an HTTP body is.
        if page.compression != nil, let rejected = inflate(&page) {
            hand(rejected, gate: gate)
            return
        }
        // A for_each child's records learn their parent's values (`with:`) before mapping.
        var bytes = page.bytes
        var parsed = page.parsed
        if !page.injected.isEmpty, let injected = mapper.plan.framing.injecting(page.injected, into: bytes) {
            (bytes, parsed) = (injected, nil)
        }
        // A refresh applies this unchanged page in part: its dirty rows only.
        let appliedRows = page.appliedRows.flatMap { try? PageFootprint(decoding: $0) }
        let clock = ContinuousClock()
        let started = clock.now
        var records = 0
        mapper.map(
            bytes: bytes, seq: page.seq, source: page.source, parsed: parsed,
            partRecords: partRecords.indices.contains(page.resource) ? partRecords[page.resource] : RunOptions.defaultBatchRecords
        ) { part in
            records += part.recordCount
            if part.isLastPart {
                flow.counts.withLock { $0.decoded += 1 }
                if logger.logLevel <= .debug {
                    logger.debug(
                        "page.decoded",
                        metadata: [
                            LogKey.seq: .int(page.seq), LogKey.source: "\(page.source)", LogKey.bytes: .int(page.bytes.count),
                            LogKey.records: .int(records), "decode_ms": .seconds((clock.now - started).inSeconds * 1000),
                        ])
                }
            }
            hand(finished(part, of: page, chargedBytes: chargedBytes, appliedRows: appliedRows), gate: gate)
        }
    }

    /// Inflates a compressed page in place; the rejected page when it cannot be read or inflates
    /// past `max_page_bytes`.
    private func inflate(_ page: inout Page) -> DecodedPage? {
        guard let compression = page.compression else { return nil }
        do {
            let (inflated, oversized) = try compression.decompress(page.bytes, limit: maxPageBytes)
            if let oversized {
                page.unreadable =
                    "\(page.source) inflates to more than \(maxPageBytes) bytes (max_page_bytes; \(oversized) seen); nothing of it was kept"
                page.oversized = oversized
            } else {
                (page.bytes, page.parsed) = (inflated, nil)
            }
        } catch {
            page.unreadable = "\(page.source) cannot be decompressed: \(error)"
        }
        guard page.unreadable != nil else { return nil }
        var rejected = PipelineRunner.rejectedPage(page, limit: maxPageBytes, entity: rootName)
        if page.oversized != nil { rejected.rejections[0].code = .pageTooLarge }
        rejected.archive = page.archive
        rejected.digest = page.digest
        for k in rejected.rejections.indices { rejected.rejections[k].archive = page.archive }
        flow.counts.withLock { $0.decoded += 1 }
        return rejected
    }

    /// A mapped part with what its page carries: its print, size, unit, resource, resume state
    /// and archive entry.
    private func finished(_ part: DecodedPage, of page: Page, chargedBytes: Int, appliedRows: PageFootprint?) -> DecodedPage {
        var decoded = part
        if keepsPrints && !printsOff.value.withLock({ $0 }) {
            decoded.digest = page.digest
            let footprint = PageFootprint(of: part, layouts: layouts)
            decoded.footprint = footprint
            if part.part == 0 && part.isLastPart { decoded.encodedFootprint = footprint.encoded() }
            if let only = appliedRows {
                decoded.unchangedRows = decoded.apply(only: only, layouts: layouts, footprint: footprint)
            }
        }
        if decoded.isLastPart { decoded.pageBytes = chargedBytes }
        decoded.unit = page.unit
        decoded.unitContinues = page.unitContinues
        decoded.resource = page.resource
        if decoded.isLastPart { (decoded.resumeState, decoded.syncState) = (page.resumeState, page.syncState) }
        if let location = page.archive {
            decoded.archive = location
            for k in decoded.rejections.indices { decoded.rejections[k].archive = location }
        } else if let unit = page.unit {
            for k in decoded.rejections.indices { decoded.rejections[k].unit = unit.seq }
        }
        return decoded
    }

    /// Hands `decoded` to the assembler, at most two parts ahead of it on this lane.
    private func hand(_ decoded: DecodedPage, gate: DispatchSemaphore) {
        gate.wait()
        var decoded = decoded
        decoded.laneGate = gate
        assembler.queue.async { [decoded] in assembler.receive(decoded) }
    }
}

/// The source queue's loop (``PipelineRunner/startSource(_:firstSeq:budget:flow:archive:writer:assembler:keepsPrints:refresh:decode:)``):
/// one in-flight slot per page, each page numbered, checked where it enters, decided on by a
/// refresh, archived, then decoded; at the end the assembler learns how many pages there were and
/// why the source stopped.
struct SourceLoop: Sendable {
    let source: any PageSource
    let budget: PageBudget
    let flow: PageFlow
    let archive: ArchiveStage?
    let writer: WriterStage
    let assembler: BatchAssembler
    /// A refresh decides on each page's digest here (a first load digests on the lanes).
    let digests: Bool
    let refresh: RefreshPlan?
    let decode: @Sendable (Page) -> Void
    let stopping: StopFlag
    let maxPageBytes: Int
    let rootName: String
    let resources: [String]

    func run(firstSeq: Int) {
        var seq = firstSeq - 1
        var end = SourceEnd.exhausted
        do {
            while true {
                if stopping.value.withLock({ $0 }) {
                    end = .interrupted
                    break
                }
                if writer.hasFailed || archive?.hasFailed == true { break }
                budget.acquireSlot()
                let next: Page?
                do {
                    next = try source.next()
                } catch {
                    budget.release(0)
                    throw error
                }
                guard var page = next else {
                    budget.release(0)
                    break
                }
                seq += 1
                page.seq = seq
                guard admit(&page) else { continue }
                let leftOut: PagePrint?
                do {
                    leftOut = try decideRefresh(&page)
                } catch {
                    // The run stops before this page: it was never handed on.
                    budget.release(page.bytes.count)
                    seq -= 1
                    throw error
                }
                forward(page, leftOut: leftOut)
            }
        } catch {
            // A source cancelled by stop() fails its wait: the run was interrupted, not broken.
            end = stopping.value.withLock({ $0 }) ? .interrupted : .failed(error)
        }
        let total = seq
        let assembler = self.assembler
        let finish: @Sendable () -> Void = { [end] in
            assembler.queue.async { assembler.sourceFinished(total: total, end: end) }
        }
        // Pages reach the assembler through the archive queue: let it drain first.
        if let archive { archive.queue.async { finish() } } else { finish() }
    }

    /// Names a replayed page's resource, counts it read and charges its slot; a page the run
    /// cannot take (over the size limit, unreadable, of a resource this pipeline lacks) goes to
    /// the assembler as a rejected page instead (`false`).
    private func admit(_ page: inout Page) -> Bool {
        // A replayed page names its resource: this pipeline's index of it.
        if let name = page.resourceName {
            if let k = resources.firstIndex(of: name) {
                page.resource = k
            } else {
                page.unreadable = "\(page.source) belongs to resource '\(name)', which this pipeline does not have"
            }
        }
        let read = page.oversized ?? page.bytes.count
        flow.counts.withLock {
            $0.read += 1
            $0.bytesRead += read
        }
        if page.oversized != nil || page.bytes.count > maxPageBytes || page.unreadable != nil {
            let rejected = PipelineRunner.rejectedPage(page, limit: maxPageBytes, entity: rootName)
            budget.charge(rejected.bytes)
            let assembler = self.assembler
            assembler.queue.async { assembler.receive(rejected) }
            return false
        }
        budget.charge(page.bytes.count)
        return true
    }

    /// A refresh's decision on `page`: its print when it is left out, else `nil` (and the rows to
    /// apply, when only some are).
    private func decideRefresh(_ page: inout Page) throws -> PagePrint? {
        if digests { page.digest = page.bytes.withUnsafeBytes { SHA256.digest($0) } }
        guard let refresh, let digest = page.digest else { return nil }
        let (stopping, writer) = (self.stopping, self.writer)
        switch try refresh.decide(seq: page.seq, digest: digest, abandon: { stopping.value.withLock({ $0 }) || writer.hasFailed }) {
        case .leaveOut(let print):
            flow.counts.withLock { $0.decoded += 1 }
            return print
        case .apply(let only):
            page.appliedRows = only?.encoded()
            return nil
        }
    }

    /// Archives `page` (anything decoded can be replayed), then decodes it — or, left out by a
    /// refresh, hands the assembler its print.
    private func forward(_ page: Page, leftOut: PagePrint?) {
        let (assembler, decode) = (self.assembler, self.decode)
        let forward: @Sendable (Page) -> Void = { page in
            if let leftOut {
                let decoded = DecodedPage.leftOut(page, print: leftOut)
                assembler.queue.async { assembler.receive(decoded) }
            } else {
                decode(page)
            }
        }
        guard let archive else { return forward(page) }
        archive.queue.async {
            if let archived = archive.append(page) {
                forward(archived)
            } else {
                // Not archived, so not decoded: the page is consumed as empty and the run fails.
                let empty = DecodedPage(
                    seq: page.seq, source: page.source, bytes: page.bytes.count, pageBytes: page.bytes.count, records: [],
                    rejections: [], pageRejected: false, recordCount: 0)
                assembler.queue.async { assembler.receive(empty) }
            }
        }
    }
}
