/// What a run of a pipeline will do, decided once from the pipeline, the options, where the
/// pages come from and the backend — before anything is read or written: the load plan, whether
/// and how it joins a shared run, whether a refresh leaves pages out. `--dry-run` prints it
/// (``lines``) and the run asks the same functions (``LoadPlan/decide(_:)`` through
/// ``PipelineRunner/loadPlan(_:_:fetching:backend:)``, ``PipelineRunner/joinRefusal(_:_:sharesRuns:)``,
/// ``PipelineRunner/refreshObstacle(_:)``), so what a dry run says is what the run does
/// (`LoadPlanMatrixTests`, `RunPlanTests`).
package struct RunPlan: Sendable, Equatable {
    /// How a joined job (`--join`) takes part, or why it is refused.
    package enum Join: Sendable, Equatable {
        /// Refused before anything is written (SQLite shares no runs, `--resume`), and why.
        case refused(String)
        /// Units claimed by any job of the run `name`; what the jobs fetch themselves (resources,
        /// files), what the fetcher fetches because its records make the next requests, and the
        /// order its units are committed in.
        case joins(name: String, madeByJobs: [String], madeByFetcher: [String] = [], readsFiles: Bool, order: JoinOrder)
    }

    /// Whether the run leaves out pages unchanged since the last run.
    package enum Refresh: Sendable, Equatable {
        /// Every page applied: the pipeline cannot be refreshed, and why.
        case impossible(String)
        /// Every page applied, as asked (`--full-refresh`); the prints are kept for the next run.
        case full
        /// Unchanged pages sharing no row with a change left out; `fetchesFirst`: a refresh
        /// fetches every page first, then applies (one HTTP source).
        case leavesOut(fetchesFirst: Bool)
    }

    package var load: LoadPlan
    package var join: Join?
    package var refresh: Refresh

    /// The plan of a run of `config` with `options` into `backend`, from a source that fetches
    /// (HTTP, several resources) or reads local pages (`fetching`: the run asks its source, a dry
    /// run ``PipelineConfig/fetches(pages:)``).
    package static func make(_ config: PipelineConfig, _ options: RunOptions, fetching: Bool, backend: any StoreBackend) -> RunPlan {
        let load = PipelineRunner.loadPlan(config, options, fetching: fetching, backend: backend)
        var join: Join?
        if let name = options.join {
            if let refusal = PipelineRunner.joinRefusal(config, options, sharesRuns: backend.loadCapabilities.sharesRuns) {
                join = .refused(refusal)
            } else {
                join = .joins(
                    name: name, madeByJobs: SharedRequests.madeByJobs(config), madeByFetcher: SharedRequests.madeByFetcher(config),
                    readsFiles: !fetching,
                    order: PipelineRunner.joinOrder(config))
            }
        }
        let refresh: Refresh
        if let obstacle = PipelineRunner.refreshObstacle(config) {
            refresh = .impossible(obstacle)
        } else if options.fullRefresh {
            refresh = .full
        } else {
            refresh = .leavesOut(fetchesFirst: fetching && !config.hasSeveralResources)
        }
        return RunPlan(load: load, join: join, refresh: refresh)
    }

    /// Why a joined run is refused before the database is opened, if it is.
    package var joinRefusal: String? {
        if case .refused(let reason)? = join { return reason }
        return nil
    }

    /// As `--dry-run` prints it, one line each: `load:`, `join:` (when joining), `refresh:`.
    package var lines: [String] {
        var lines = ["load: \(load) (load=\(load.code))"]
        switch join {
        case .refused(let reason)?:
            lines.append("join: refused: \(reason)")
        case .joins(let name, let byJobs, let byFetcher, let readsFiles, let order)?:
            var made = byJobs.isEmpty ? "" : "; \(byJobs.joined(separator: ", ")) fetched by the jobs that claim them, `concurrency` each"
            if !byFetcher.isEmpty {
                made += "; \(byFetcher.joined(separator: ", ")) fetched by the fetcher (their records make the next requests)"
            }
            if readsFiles { made += "; each file read by the job that claims it (every job must see the same files at the same path)" }
            lines.append(
                "join: \(name): units (pages, with their resource and for_each values) claimed by any job; one fetcher at a time\(made); \(order)"
            )
        case nil: break
        }
        switch refresh {
        case .impossible(let obstacle): lines.append("refresh: every page is applied (\(obstacle))")
        case .full: lines.append("refresh: every page is applied (--full-refresh); the pages' prints are kept for the next run")
        case .leavesOut(let fetchesFirst):
            lines.append(
                "refresh: pages unchanged since the last run into this database, sharing no row with a change, are left out"
                    + (fetchesFirst ? " (a refresh fetches every page first, then applies)" : "") + " (--full-refresh: apply every page)")
        }
        return lines
    }
}
