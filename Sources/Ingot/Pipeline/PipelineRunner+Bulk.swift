import Foundation

// What keeps a run from staging its load, before a database is opened: the pipeline's write
// modes and the job's part in a shared run; the store checks the model (SQLiteStore+Staged.swift).
extension PipelineRunner {
    /// Why a staged load (`--bulk`) cannot run `config`: what decides per stored row (write modes
    /// other than merge) or needs other jobs' rows (`--join`). The store checks the model.
    /// `stretch`: a load staged from its first batch, which a joined job may be (its stretch of
    /// units, PGStore+JoinedStaging.swift).
    static func bulkObstacle(_ config: PipelineConfig, _ options: RunOptions, stretch: Bool = false) -> String? {
        if options.join != nil && !stretch { return "a joined job (--join) stages only its unbroken stretch of units, by default" }
        if !config.rootWriteRules.isEmpty { return "write: insert_only and update_only decide per stored row" }
        if !config.replacedEntities.isEmpty { return "write: replace deletes stored rows the run did not see" }
        return nil
    }

    /// Everything that refuses a staged load of `config` before a database is opened (the
    /// pipeline's and the model's), for `--dry-run`; empty when it can run (on SQLite).
    package static func bulkObstacles(_ config: PipelineConfig, _ options: RunOptions, stretch: Bool = false) -> [String] {
        let model = config.model
        return [bulkObstacle(config, options, stretch: stretch)].compactMap { $0 }
            + SQLiteStore.stagedLoadObstacles(model, EntityLayout.layouts(of: model))
    }
}
