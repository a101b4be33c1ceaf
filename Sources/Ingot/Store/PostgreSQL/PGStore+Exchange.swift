import Foundation

/// A joined run's rows exchanged between its jobs, written once every unit is done
/// (docs/scale-out.md, "Rows exchanged between jobs").
///
/// Each batch's staged rows — what a single job's staged load appends to its stage file — are
/// split into the run's parts by identity (``StagedExchange``), compressed, and kept in the run's
/// exchange table, one `bytea` per part, in the transaction that marks the batch's units done.
/// Once every unit is done and the source ended, the jobs take the parts side by side (one
/// transaction per part, under an advisory lock of the part, recorded in `_ingot_join_merged`):
/// the job that takes a part appends its blobs from every job, as sorted runs, to
/// a stage file of its own, and folds and copies it as a single job's staged load does
/// (``PGStore/copyStaged(_:copyBytes:fills:careful:positioned:refused:)``).
///
/// Why: the server saw every row three times before (copied into the run's tables, folded,
/// inserted row by row into the entities' tables): at two jobs it did 4.2× a single run's work.
/// Exchanged, it stores and returns bytes and makes the final `COPY`s, a single run's work.
///
/// **One position per part.** A part's rows are every write the run makes to its identities, so
/// against any other run they are all newer: the part is written at the run's last position
/// (every unit's columns and sets), straight into the tables in binary `COPY`. A row stored
/// before the run (a unique violation), or a value the server refuses, sends the part the careful
/// way: in pieces under savepoints, upserted with that position over what is stored, a refused
/// row left out and rejected naming the record that gave it last.
///
/// The exchange table is an ordinary (logged) table: a unit marked done has its rows there
/// through a crash of the job or of the server; a job killed while it writes a part leaves the
/// part to the next job that ends its part or joins the run again. Made by the job that creates
/// the run (under the join's row lock), dropped by the transaction that finishes it.
struct ExchangeTable {
    let ordinal: Int64

    /// The table's name, unquoted.
    var plainName: String { "_ingot_run\(ordinal)_x" }
    var name: String { PGStore.quote(plainName) }

    /// The statements that make it: a part, its batch's key, the blob (the raw length, 4 bytes
    /// little-endian, then the zstd frame). The blobs are stored as they come (`STORAGE
    /// EXTERNAL`: compressed already), and the table is left out of autovacuum: written once,
    /// read once, dropped with the run.
    var schema: [String] {
        [
            "CREATE TABLE IF NOT EXISTS \(name) (part int NOT NULL, key bigint NOT NULL, data bytea NOT NULL) WITH (autovacuum_enabled = false)",
            "ALTER TABLE \(name) ALTER COLUMN data SET STORAGE EXTERNAL",
            "CREATE INDEX IF NOT EXISTS \(PGStore.quote(plainName + "_part")) ON \(name) (part, key)",
        ]
    }
}

extension ExchangeTable {
    /// The blobs' zstd level. Level -3 (faster, less compact) against 1, people-200k, one and
    /// four joined jobs at a quarter of a core, two pairs A B A B on the AMD EPYC: the same
    /// within the noise (one joined / one single 1.17, 1.21 against 1.17, 1.26; the jobs' CPU
    /// over a single job's +0.41, +0.44 s against +0.39, +0.47 s), so the smaller blobs stay.
    /// Uncompressed (zstd's raw blocks: the job's instructions −11 % under callgrind at
    /// people-20k), five rounds unconfined at people-200k: the server's CPU 2.62 → 4.09 s for one
    /// joined job and 3.28 → 4.15 s for four (four times the bytes logged and stored), the jobs'
    /// no lower (3.73 → 3.93 s, 4.13 → 4.14 s): level 1 stays.
    static let level: Int32 = 1
}

/// A row the server refused when a part was written: its entity, identity, the server's
/// message, and the record that gave it last (``RecordOrigin``), when known.
typealias PartRefusal = (entity: Int, identity: IdentityKey, reason: String, record: (seq: Int, index: Int)?)

extension PGStore {
    /// A joined batch's staged rows split by part and kept in the run's exchange table, in the
    /// open transaction that marked its units done. Nothing reaches the entities' tables, so
    /// nothing is counted yet: the part's writer counts what it writes.
    func writeExchanged(_ batch: ResolvedBatch, _ join: JoinContext) throws -> [EntityCounts] {
        let blobs = StagedExchange.split(try StageFile.feeds(of: batch, layouts), layouts)
        var data = PGBinaryCopy.header
        let zstd = exchangeCompressor
        var any = false
        for (part, blob) in blobs.enumerated() where !blob.isEmpty {
            var framed: [UInt8] = []
            LittleEndian.appendInteger(UInt64(blob.count), bytes: 4, to: &framed)
            framed += try zstd.compress(blob)
            PGBinaryCopy.appendRowStart(fields: 3, to: &data)
            PGBinaryCopy.appendField(withUnsafeBytes(of: Int32(part).bigEndian, Array.init), to: &data)
            PGBinaryCopy.appendField(withUnsafeBytes(of: Int64(batch.lastUnitKey).bigEndian, Array.init), to: &data)
            PGBinaryCopy.appendField(framed, to: &data)
            any = true
        }
        if any {
            data += PGBinaryCopy.trailer
            try connection.copy(
                "COPY \(ExchangeTable(ordinal: join.ordinal).name) (part, key, data) FROM STDIN (FORMAT binary)", data: data)
        }
        return [EntityCounts](repeating: EntityCounts(), count: layouts.count)
    }

    /// Whether the run's exchange table exists (its jobs defer), as committed when the statement
    /// starts (``PGConnection/tableExists(_:)``: the job that finishes the run drops it while
    /// others may be between two parts).
    func exchanges(_ join: JoinContext) throws -> Bool {
        try connection.tableExists(ExchangeTable(ordinal: join.ordinal).plainName)
    }

    /// Writes the parts of the run's exchanged rows no job wrote or is writing, each in a
    /// transaction of its own under an advisory lock of the part, once every unit is done and
    /// the source ended (before that, nothing). Returns what it wrote, counted as this job's.
    ///
    /// Every job that ends its part this way writes parts side by side with the others; a part
    /// written is recorded in `_ingot_join_merged` with its counts (the run's end sums them), and a
    /// part whose job died is written by the next (its transaction, lock included, went with it).
    func mergeExchangedParts(_ join: JoinContext) throws -> (counts: RunCounters, seconds: Double)? {
        guard try exchanges(join) else { return nil }
        let ready = try connection.execute(
            """
            SELECT j.end_seq IS NOT NULL AND j.status = 'running' AND NOT EXISTS (SELECT 1 FROM _ingot_units u WHERE u.name = j.name AND u.status <> 'done')
              FROM _ingot_joins AS j WHERE j.name = $1
            """, [join.name])
        guard ready.first?[0] == "t" else { return nil }
        let started = Date()
        try dropKeysForMerge()
        var merged = RunCounters()
        let size = try groupSize(join)
        var next = 0
        while next < StagedExchange.parts {
            try begin()
            do {
                // The parts' locks first (those another job holds are its own); then whether
                // the run's table is still there: the job that finished the run may have written
                // the rest and dropped it since this loop began (its transaction held each
                // part's lock until it committed). The check reads the catalog as committed now,
                // not this backend's cache of it.
                var group: [Int] = []
                while next < StagedExchange.parts && group.count < size {
                    if try lockPart(join, next, waiting: false), try !partMerged(join, next) { group.append(next) }
                    next += 1
                }
                guard !group.isEmpty, try exchanges(join) else {
                    try commit()
                    if group.isEmpty { continue } else { break }
                }
                merged.add(try writeParts(group, join))
                try commit()
            } catch let error as StoreError where error.sqlState == PGStore.undefinedTable {
                // Defence in depth: the table cannot go while this part's lock is held, but if it
                // is gone the run was finished by another job, which wrote what was left.
                try? rollback()
                break
            } catch {
                try? rollback()
                throw error
            }
        }
        return (merged, Date().timeIntervalSince(started))
    }

    /// In the transaction that finishes the run: writes any part still unwritten (waiting for a
    /// job writing one), sums every part's counts, and drops the exchange table. `nil` when the
    /// run's jobs do not exchange; else the run's counts from its parts, and what this call wrote.
    func finishExchanged(_ join: JoinContext) throws -> (total: RunCounters, merged: RunCounters)? {
        guard try exchanges(join) else { return nil }
        // The schema's lock before any row: this transaction makes the foreign keys' indexes
        // again at its end (``createIndexes(_:)``), and a job starting meanwhile that finds one
        // missing waits here rather than make it too. Taken later, it would wait for that job
        // while the job's index waits for this transaction's rows: a deadlock.
        try connection.execute(PGStore.schemaLock)
        var counts = RunCounters()
        var mine = RunCounters()
        var left: [Int] = []
        for part in 0..<StagedExchange.parts {
            _ = try lockPart(join, part, waiting: true)
            if try !partMerged(join, part) { left.append(part) }
        }
        if !left.isEmpty { mine.add(try writeParts(left, join)) }
        for row in try connection.execute(
            "SELECT inserted, updated, entity_counts FROM _ingot_join_merged WHERE name = $1", [join.name])
        {
            var c = RunCounters()
            c.inserted = row[0].flatMap { Int($0) } ?? 0
            c.updated = row[1].flatMap { Int($0) } ?? 0
            c.readEntities(fromJSON: row[2])
            // Rows the server refused when their part was written: rejected records of the run.
            let refused = c.entities.values.reduce(0) { $0 + $1.rejected }
            if refused > 0 {
                c.rejectedRecords = refused
                c.rejectsByReason[RejectReason.unstorable.rawValue] = refused
            }
            counts.add(c)
        }
        try connection.execute("DELETE FROM _ingot_join_merged WHERE name = $1", [join.name])
        // The keys and foreign keys' indexes a writing job dropped, built once now that every row is in.
        try buildKeysDropped()
        try dropExchange(ordinal: join.ordinal)
        removePartFiles(join)
        return (counts, mine)
    }

    /// How many parts a job writes at once: the parts shared out among the run's jobs still
    /// running, so that a lone job writes them all as one staged load (one gather, one fold, one
    /// `COPY` per table, as a single run's) and N jobs write about 1/N each side by side. Each
    /// part written costs a stage file, a fold and its copies: eight parts one by one took a lone
    /// job 1.9 s where one staged load's copy takes 0.85 s (docs/scale-out.md, "Measured").
    private func groupSize(_ join: JoinContext) throws -> Int {
        let running =
            try connection.execute(
                "SELECT count(*) FROM _ingot_join_jobs WHERE name = $1 AND status = 'running'", [join.name]
            ).first?[0].flatMap { Int($0) } ?? 1
        let jobs = max(running, 1)
        return (StagedExchange.parts + jobs - 1) / jobs
    }

    /// Where this job stages a part it writes: in its staging directory, named for the run
    /// (`ingot-part-<the run id's digest>-<uuid>.db`), so that the job that finishes the run
    /// removes those a job killed while writing a part left on this machine.
    private func partFilePath(_ join: JoinContext) -> String {
        let base = stagingFiles.directory.map { URL(fileURLWithPath: $0) } ?? FileManager.default.temporaryDirectory
        return base.appendingPathComponent(partFilePrefix(join) + UUID().uuidString + ".db").path
    }

    private func partFilePrefix(_ join: JoinContext) -> String {
        "ingot-part-" + String(SHA256.hex((runID ?? join.name).utf8).prefix(16)) + "-"
    }

    /// Removes the part files of this run left in this job's staging directory (every part is
    /// written by now: no job of the run writes one any more).
    private func removePartFiles(_ join: JoinContext) {
        let directory = stagingFiles.directory ?? FileManager.default.temporaryDirectory.path
        let prefix = partFilePrefix(join)
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] where name.hasPrefix(prefix) {
            var info = stat()
            let path = URL(fileURLWithPath: directory).appendingPathComponent(name).path
            guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
            unlink(path)
        }
    }

    /// Drops join `ordinal`'s exchange table: its end wrote it, or a single run overtook it.
    func dropExchange(ordinal: Int64) throws {
        try connection.execute("DROP TABLE IF EXISTS \(ExchangeTable(ordinal: ordinal).name)")
    }

    /// Takes part `part`'s advisory lock for the open transaction (`waiting`: until the job that
    /// holds it ends its transaction); whether it has it.
    private func lockPart(_ join: JoinContext, _ part: Int, waiting: Bool) throws -> Bool {
        let keys = [String(Int32(truncatingIfNeeded: join.ordinal)), String(part)]
        guard !waiting else {
            try connection.execute("SELECT pg_advisory_xact_lock($1::int, $2::int)", keys)
            return true
        }
        return try connection.execute("SELECT pg_try_advisory_xact_lock($1::int, $2::int)", keys).first?[0] == "t"
    }

    /// Whether part `part` is written, as committed when this statement starts (a statement of
    /// its own after the lock: one snapshot taken before the lock was granted would miss the
    /// write of the job that held it).
    private func partMerged(_ join: JoinContext, _ part: Int) throws -> Bool {
        try connection.execute(
            "SELECT EXISTS (SELECT 1 FROM _ingot_join_merged WHERE name = $1 AND part = $2::int)", [join.name, String(part)]
        ).first?[0] == "t"
    }

    /// Parts `parts` of the run's exchanged rows written into the entities' tables, in the open
    /// transaction, and recorded with their counts (on the first part's row): their blobs
    /// gathered into a stage file of this job's, folded and copied at the run's last position —
    /// straight in, or the careful way when a row was stored before the run or a value is
    /// refused. Parts hold disjoint identities, so several gather into one load as one part does.
    private func writeParts(_ parts: [Int], _ join: JoinContext) throws -> RunCounters {
        var merged = RunCounters()
        if let file = try gather(parts, join) {
            defer { file.discard() }
            let position = PGStagedCopy.Positioned(store: self, position: join.position(UnitOrder.lastKey(seq: UnitOrder.lastSeq)))
            let (counts, refusals) = try copyPart(file, position: position)
            for (entity, written) in counts.enumerated() where model.entities.indices.contains(entity) {
                var written = written
                written.rejected = refusals.filter { $0.entity == entity }.count
                if written != EntityCounts() { merged.entities[model.entities[entity].name] = written }
                merged.inserted += written.inserted
                merged.updated += written.updated
            }
            if !refusals.isEmpty {
                try recordRefusals(refusals, join)
                merged.rejectedRecords = refusals.count
                merged.rejectsByReason[RejectReason.unstorable.rawValue] = refusals.count
            }
        }
        for (k, part) in parts.enumerated() {
            let counts = k == 0 ? merged : RunCounters()
            try connection.execute(
                "INSERT INTO _ingot_join_merged (name, part, inserted, updated, entity_counts) VALUES ($1, $2, $3, $4, $5)",
                [join.name, String(part), String(counts.inserted), String(counts.updated), counts.entitiesJSON])
        }
        return merged
    }

    /// The blobs of parts `parts`, from every job, in their batches' order, appended as sorted
    /// runs to a new stage file of this job's (a throwaway: a failed part is gathered again), and
    /// committed; `nil` when the parts hold no blob.
    ///
    /// A blob at a time, as the server sends them: decompressed, its runs appended, let go.
    /// Fetched together, the blobs of a lone job's parts were every staged row of the run,
    /// compressed: people-1M peaked at 250 MiB against a single job's 113 MiB; read a row at a
    /// time, 118 MiB (docs/scale-out.md, "A job's memory").
    private func gather(_ parts: [Int], _ join: JoinContext) throws -> StageFile? {
        let zstd = Zstd()
        let list = PGStore.arrayLiteral(parts.map { .integer(Int64($0)) })
        let file = try StageFile.create(at: partFilePath(join), token: "\(join.name):\(parts)", layouts: layouts, durability: .throwaway)
        do {
            try file.begin()
            var blobs = 0
            try connection.forEachBinaryValue(
                "SELECT data FROM \(ExchangeTable(ordinal: join.ordinal).name) WHERE part = ANY($1::int[]) ORDER BY key", [list]
            ) { framed in
                let length = framed.count >= 4 ? Int(LittleEndian.integer(framed, 0, 4)) : -1
                guard length >= 0,
                    let blob = try? zstd.decompress(UnsafeRawBufferPointer(rebasing: framed[4...]), expectedLength: length, limit: length)
                else {
                    throw StoreError.schema(
                        "parts \(parts) of join '\(join.name)' hold a blob that does not read back (\(framed.count) bytes)")
                }
                for (entity, feed) in try StagedExchange.runs(of: [blob], layouts) { try file.appendRun(of: layouts[entity], feed) }
                blobs += 1
            }
            guard blobs > 0 else {
                file.discard()
                return nil
            }
            try file.commit()
            return file
        } catch {
            file.discard()
            throw error
        }
    }

    /// A part's folded rows copied in, under a savepoint: straight and without positions, as a
    /// single run's staged copy into empty tables; the careful way when a value is refused or
    /// not certain in binary (pieces under savepoints, a refused row left out); and, when a row
    /// was stored before the run (a unique violation), the careful way at `position`, upserted
    /// over what is stored. Its counts per entity, and the rows the server refused.
    private func copyPart(
        _ file: StageFile, position: PGStagedCopy.Positioned
    ) throws -> (counts: [EntityCounts], refusals: [PartRefusal]) {
        let fills = BatchResolver.fills(of: model, layouts)
        let stagedBefore = stagedInTransaction.count
        var refusals: [PartRefusal] = []
        var careful = false
        var positioned: PGStagedCopy.Positioned?
        while true {
            do {
                refusals = []
                let counts = try connection.inSavepoint("ingot_part") {
                    try copyStaged(file, copyBytes: stagingFiles.copyBytes, fills: fills, careful: careful, positioned: positioned) {
                        refusals.append(($0, $1, $2, $3))
                    }
                }
                return (counts, refusals)
            } catch {
                forgetStaging(after: stagedBefore)
                if positioned == nil, PGStore.isUniqueViolation(error) {
                    (careful, positioned) = (true, position)
                } else if !careful, StoreError.refusedValue(error) != nil || error is PGBinaryCopy.Unfit {
                    careful = true
                } else {
                    throw error
                }
            }
        }
    }

    /// The rows the server refused when a part was written, rejected as the run's records: each
    /// names the record that gave the row last (its unit's source and its place in the page).
    private func recordRefusals(
        _ refusals: [PartRefusal], _ join: JoinContext
    ) throws {
        var sources: [Int: String] = [:]
        let seqs = Set(refusals.compactMap { $0.record?.seq })
        if !seqs.isEmpty {
            for row in try connection.execute(
                "SELECT seq, source FROM _ingot_units WHERE name = $1 AND seq = ANY($2::bigint[])",
                [join.name, PGStore.arrayLiteral(seqs.sorted().map { .integer(Int64($0)) })])
            {
                if let seq = row[0].flatMap({ Int($0) }) { sources[seq] = row[1] ?? "" }
            }
        }
        let rejections = refusals.map { refusal -> RecordRejection in
            let name = model.entities.indices.contains(refusal.entity) ? model.entities[refusal.entity].name : "?"
            var rejection = RecordRejection(
                entity: name, codingPath: refusal.record.map { join.recordsPath + "[\($0.index)]" } ?? "",
                reason:
                    "the database refused the row merged from this and the earlier records of \(name) \(String("\(refusal.identity)".prefix(100))): \(refusal.reason.prefix(500))",
                source: refusal.record.flatMap { sources[$0.seq] } ?? refusal.record.map { "unit \($0.seq) of join '\(join.name)'" }
                    ?? "join '\(join.name)'",
                recordIndex: refusal.record?.index, raw: "", code: .unstorable)
            rejection.unit = refusal.record?.seq
            return rejection
        }
        guard let runID else { return }
        try recordRejectsAndKept(RunProgress(runID: runID, counters: RunCounters(), rejections: rejections, kept: []), join: join)
    }
}
