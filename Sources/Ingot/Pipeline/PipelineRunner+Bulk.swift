import Foundation

// The run's load plan (Store/LoadPlan.swift), decided once from the pipeline, the options, the
// source and the backend's capabilities.
extension PipelineRunner {
    /// What in `config` decides per stored row, which a staged load cannot: write modes other
    /// than merge.
    static func writeObstacles(_ config: PipelineConfig) -> [String] {
        var obstacles: [String] = []
        if !config.rootWriteRules.isEmpty { obstacles.append("write: insert_only and update_only decide per stored row") }
        if !config.replacedEntities.isEmpty { obstacles.append("write: replace deletes stored rows the run did not see") }
        if config.resources.contains(where: { $0.deleteWhen != nil }) {
            obstacles.append("delete_when deletes stored rows where its tombstones stand")
        }
        return obstacles
    }

    /// A joined run that commits its units in order writes each as it comes: rows exchanged for
    /// the run's end would leave the next unit's writes nothing to follow.
    static func inOrderObstacles(_ config: PipelineConfig) -> [String] {
        joinOrder(config) == .anyOrder ? [] : ["a joined run whose units are committed in order writes each unit as it comes"]
    }

    /// How a run of `config` with `options` writes into `backend`, from a source that fetches or
    /// reads local pages: the run and `--dry-run` both ask here.
    package static func loadPlan(
        _ config: PipelineConfig, _ options: RunOptions, fetching: Bool, backend: any StoreBackend
    ) -> LoadPlan {
        LoadPlan.decide(
            LoadPlan.Inputs(
                loading: options.loading, joined: options.join != nil, fetching: fetching,
                writeObstacles: writeObstacles(config) + (options.join != nil ? inOrderObstacles(config) : []),
                modelObstacles: backend.stagedLoadObstacles(config.model), capabilities: backend.loadCapabilities))
    }
}
