import Foundation
import Logging
import Synchronization

/// The pages of a pipeline with several resources (`resources:`), in one run: each resource's
/// pages in file order, numbered on from the ones before, each page tagged with its resource
/// (its decode plan: root entity, where records sit). A `for_each` resource makes one request
/// (then its own pagination) per record of an earlier resource, in that resource's order; a
/// record without a key the template reads, or whose URL leaves the pipeline's origin, is skipped
/// with a warning and counted.
///
/// Resume states say where the run stands across resources: `res:NAME:ITEM:INNER` — the
/// resource (by name: a run of some resources, `--resource`, resumes as well), the for_each item
/// (`-` for a plain resource), and the resource's own state after the page. Resuming inside a
/// for_each resource reads its parent's list again (its pages are not applied twice) to know the
/// requests, then continues after the last committed one.
///
/// A for_each's ITEM is `POSITION@DIGEST`: the digest chains the identities (URL and injected
/// values) of every request up to the one the state is at. The list read again must give the
/// same requests up to there — then the run continues at POSITION — or it changed before that
/// point (a record deleted, one added): then no position in it stands for "done so far", and the
/// for_each starts again from its first request (`for_each.restarted`), so that no request is
/// skipped. Requesting again is harmless: later pages win, as in any rerun.
///
/// Used from the pipeline's source queue only.
final class ResourcesPageSource: FetchReporting, AnswerReusing, @unchecked Sendable {  // used from the source queue only
    /// One request of a for_each resource.
    struct Item {
        var url: String
        var injected: [InjectedValue]
        /// Its level: 1 from the parent's records, one more from each request of a for_each that
        /// reads its own records (``ResourceConfig/ForEach/depth``).
        var depth = 1
    }

    private let config: PipelineConfig
    private let resources: [ResourceConfig]
    private let environment: [String: String]
    private let maxPageBytes: Int
    private var logger: Logger
    private var metrics: (any FetchObserver)?
    /// What the last finished run kept of its answers, for each source this opens.
    private var kept: KeptAnswers?
    private let cancelled = StopFlag()
    /// The resource being read and its source.
    private var index = 0
    private var current: (any PageSource)?
    /// A for_each resource: its requests, and the one being read.
    private var items = RequestList()
    private var item = 0
    /// Requests collected from the pages of resources a for_each reads, by resource name.
    private var collected: [String: RequestList] = [:]
    /// The requests an `each:` fan-out collected already, by resource name: an id listed by many
    /// records (a character in every film) is requested once, where it first appears.
    private var fannedOut: [String: Set<String>] = [:]
    private var skipped: [String: Int] = [:]
    private var pagesOfResource = 0
    private var seq = 0
    /// The digest chained over the identities of `items[0..<prefix.count]` (ResumeDigest).
    private var prefix = ResumeDigest()
    /// Each for_each resource's template, made ready once (by resource name).
    private let templates: [String: ForEachTemplate]

    init(config: PipelineConfig, environment: [String: String], maxPageBytes: Int, logger: Logger) {
        self.config = config
        self.resources = config.resources
        self.environment = environment
        self.maxPageBytes = maxPageBytes
        self.logger = logger
        templates = Dictionary(
            config.resources.compactMap { resource in resource.forEach.map { (resource.name, ForEachTemplate($0)) } },
            uniquingKeysWith: { first, _ in first })
    }

    var origin: String {
        "resources "
            + resources.map { resource in
                if let forEach = resource.forEach { return "\(resource.name): for_each \(forEach.resource) \(forEach.template)" }
                return "\(resource.name): \(resource.source)"
            }.joined(separator: "; ")
    }

    func useLogger(_ logger: Logger) {
        self.logger = logger
        current?.useLogger(logger)
    }

    func useMetrics(_ metrics: any FetchObserver) {
        self.metrics = metrics
        (current as? any FetchReporting)?.useMetrics(metrics)
    }

    func reuseAnswers(_ answers: KeptAnswers) {
        kept = answers
        (current as? any AnswerReusing)?.reuseAnswers(answers)
    }

    func cancel() {
        cancelled.value.withLock { $0 = true }
        current?.cancel()
        chains.withLock { $0?.cancel() }
    }

    // MARK: - Pages

    /// Told the wait a server asked of one of this source's requests (``HTTPPageSource/onServerDelay``):
    /// a shared run's fetcher passes it on to the jobs. Set before the first page.
    var onServerDelay: (@Sendable (Double) -> Void)?

    /// Set for a shared run's fetcher: requests any job may make (``SharedRequests/defers(_:of:)``)
    /// come out unfetched, as pages naming their URL (``Page/request``), and so do a numbered
    /// resource's pages once its total is known (``SharedRequests/defersPages(of:in:resource:)``).
    var defersRequests = false

    /// What the jobs of a shared run fetch the requests this source defers with.
    var requests: SharedRequests { SharedRequests(config: config, environment: environment, maxPageBytes: maxPageBytes) }

    func next() throws -> Page? {
        while index < resources.count {
            if cancelled.value.withLock({ $0 }) { return nil }
            if defersRequests, current == nil, SharedRequests.defers(resources[index], of: resources) {
                guard let page = deferredRequest() else { continue }
                return page
            }
            if current == nil {
                try open()
                // A for_each with no request left finished its resource: on to the next.
                if current == nil { continue }
            }
            let fetched: Page?
            do {
                fetched = try current?.next()
            } catch let error as FetchError where error.meansNotFound {
                guard let forEach = resources[index].forEach, !forEach.notFoundFails else { throw error }
                return try skipMissing(error)
            }
            if var page = fetched {
                seq += 1
                pagesOfResource += 1
                page.seq = seq
                page.resource = index
                let resource = resources[index]
                page.resourceName = resource.name
                if let start = listStart, let state = page.resumeState, state.hasPrefix("item:"), let k = Int(state.dropFirst(5)) {
                    // A list source's page: its item, and the next one is where the run continues.
                    item = start + k
                    listDelivered = true
                    page.resumeState = "done"
                }
                if resource.forEach != nil, items.indices.contains(item) { page.injected = items[item].injected }
                collect(from: &page, of: resource, depth: items.indices.contains(item) ? items[item].depth : 0)
                page.resumeState = state(after: page.resumeState)
                return page
            }
            // The source (or this request of a for_each) is exhausted.
            current = nil
            if listStart != nil {
                listStart = nil
                // A for_each that reads its own records made requests after the list's end.
                if resources[index].forEach?.recurses == true && listEnd < items.count {
                    item = listEnd
                    continue
                }
                finishResource()
                continue
            }
            if resources[index].forEach != nil && item + 1 < items.count {
                item += 1
                continue
            }
            finishResource()
        }
        return nil
    }

    /// The next request of the for_each resource at the current position, unfetched; `nil` when
    /// the resource has none left (it is finished).
    private func deferredRequest() -> Page? {
        guard let forEach = resources[index].forEach else { return nil }
        if items.isEmpty { items = collected[forEach.resource] ?? RequestList() }
        guard items.indices.contains(item) else {
            finishResource()
            return nil
        }
        seq += 1
        pagesOfResource += 1
        var page = Page(seq: seq, source: items[item].url, bytes: [])
        page.request = items[item].url
        page.resource = index
        page.resourceName = resources[index].name
        page.injected = items[item].injected
        page.resumeState = state(after: "done")
        item += 1
        return page
    }

    /// Where the run continues after a page whose own source said `inner`.
    private func state(after inner: String?) -> String? {
        let resource = resources[index]
        let exhausted = inner == "done"
        if resource.forEach != nil {
            // Either way the digest covers every request up to this one.
            let digest = prefix.advance(over: items, through: item + 1)
            if exhausted { return "res:\(resource.name):\(item + 1)@\(digest):" }
            return "res:\(resource.name):\(item)@\(digest):\(inner ?? "")"
        }
        if exhausted { return index + 1 < resources.count ? "res:\(resources[index + 1].name):-:" : "done" }
        return "res:\(resource.name):-:\(inner ?? "")"
    }

    private func finishResource() {
        dropChains()
        let name = resources[index].name
        var metadata: Logger.Metadata = ["resource": "\(name)", LogKey.pages: .int(pagesOfResource)]
        if let count = skipped[name] { metadata["skipped_records"] = .int(count) }
        if resources[index].forEach != nil { metadata["requests"] = .int(items.count) }
        logger.info("resource.done", metadata: metadata)
        index += 1
        item = 0
        items = RequestList()
        prefix = ResumeDigest()
        pagesOfResource = 0
    }

    /// Opens the source of the resource (or for_each request) at the current position, resumed
    /// after the page whose own source said `inner` (empty: from its start).
    private func open(resuming inner: String = "") throws {
        let resource = resources[index]
        guard let forEach = resource.forEach else {
            current = try makeSource(resource)
            if !inner.isEmpty { try current?.resume(from: inner) }
            return
        }
        if items.isEmpty {
            items = collected[forEach.resource] ?? RequestList()
            if items.isEmpty {
                current = nil
                finishResource()
                return
            }
        }
        guard items.indices.contains(item) else {
            finishResource()
            return
        }
        listDelivered = false
        if forEach.http.paginate == .none && forEach.http.concurrency > 1 {
            // One page a request: `concurrency` of them in flight, pages in the list's order.
            listStart = item
            listEnd = items.count
            let source = try HTTPPageSource(
                config: forEach.http, framing: resource.framing, urls: items.urls(from: item), environment: environment,
                maxPageBytes: maxPageBytes, logger: logger)
            current = prepared(source)
            return
        }
        listStart = nil
        if forEach.http.concurrency > 1 && Self.pagesByAnswer(forEach.http.paginate) {
            // Each request's next page named by its answer: `concurrency` requests at once.
            let items = items
            let made = chains.withLock { chains in
                if chains == nil {
                    chains = RequestChains(count: { items.count }, concurrency: forEach.http.concurrency) { [unowned self] k, resume in
                        try requestSource(items[k].url, forEach, resource, resume: resume)
                    }
                }
                return chains
            }
            current = try made?.source(for: item, resume: inner)
            return
        }
        current = try requestSource(items[item].url, forEach, resource, resume: inner)
    }

    /// The source of one for_each request, resumed after the page that said `resume` (empty:
    /// from its first page).
    private func requestSource(
        _ url: String, _ forEach: ResourceConfig.ForEach, _ resource: ResourceConfig, resume: String
    ) throws -> HTTPPageSource {
        var http = forEach.http
        http.url = url
        let source = try HTTPPageSource(
            config: http, framing: resource.framing, environment: environment, maxPageBytes: maxPageBytes, logger: logger)
        if !resume.isEmpty { try source.resume(from: resume) }
        return prepared(source)
    }

    /// `source` reporting to the run's metrics, reusing its kept answers, telling its server's
    /// delays.
    private func prepared(_ source: HTTPPageSource) -> HTTPPageSource {
        if let metrics { source.useMetrics(metrics) }
        if let kept { source.reuseAnswers(kept) }
        source.onServerDelay = onServerDelay
        return source
    }

    /// A for_each's requests in flight, when they paginate by answer (``pagesByAnswer(_:)``):
    /// stopped from another queue by ``cancel()``.
    private let chains = Mutex<RequestChains?>(nil)

    /// Stops the for_each's requests in flight and forgets them.
    private func dropChains() {
        chains.withLock { chains in
            chains?.cancel()
            chains = nil
        }
    }

    /// List mode: the item the list source started at (its pages say `item:K`, counted from there).
    private var listStart: Int?
    /// List mode: the end of the requests the list source was given (a for_each that reads its
    /// own records may have made more since).
    private var listEnd = 0
    /// List mode: the list source delivered a page (``item`` is then its item).
    private var listDelivered = false

    /// A for_each request answered 404 or 410 (the record was deleted after the list was read):
    /// a rejected page naming the request (`unreadable`, in `_ingot_rejects`), logged as
    /// `for_each.skipped`; the run goes on with the next request, and a resume after it does too.
    /// `not_found: fail` makes it fail the run instead. In list mode the failure is the request
    /// after the last page delivered (they come in list order).
    private func skipMissing(_ error: FetchError) throws -> Page {
        let resource = resources[index]
        if let start = listStart { item = listDelivered ? item + 1 : start }
        current = nil
        listStart = nil
        listDelivered = false
        let reason = SharedRequests.skipped(error, of: resource, logger: logger)
        seq += 1
        var page = Page(seq: seq, source: error.url, bytes: [])
        page.resource = index
        page.resourceName = resource.name
        page.unreadable = reason
        page.resumeState = state(after: "done")
        // The next request, when the loop asks again.
        if item + 1 < items.count {
            item += 1
        } else {
            item = items.count
        }
        return page
    }

    private func makeSource(_ resource: ResourceConfig) throws -> any PageSource {
        var single = config
        single.source = resource.source
        single.recordsPath = resource.recordsPath
        single.recordsLayout = resource.recordsLayout
        single.jsonLines = resource.jsonLines
        single.resources = [resource]
        let source = try single.makeSource(database: nil, maxPageBytes: maxPageBytes, environment: environment, logger: logger)
        if let metrics { (source as? any FetchReporting)?.useMetrics(metrics) }
        if let kept { (source as? any AnswerReusing)?.reuseAnswers(kept) }
        (source as? HTTPPageSource)?.onServerDelay = onServerDelay
        if defersRequests, let http = source as? HTTPPageSource,
            SharedRequests.defersPages(of: http.config, in: config, resource: resource.name)
        {
            http.defersNumberedPages = true
        }
        // A resource's files are read by the jobs that claim them, unless a for_each reads its
        // records (the fetcher collects those requests from the pages it reads).
        if defersRequests, let files = source as? DirectoryPageSource, !resources.haveReader(of: resource.name) {
            files.defersReading = true
        }
        return source
    }

    /// Adds the requests `page`'s records make for the for_each resources that read them: a later
    /// resource (into the list named for `resource`), and `resource` itself when it reads its own
    /// records and the request that brought `page` (at level `depth`) is above its lowest level
    /// (into its own list, named for its parent). A fan-out (`each:`, or one that reads its own
    /// records) makes each request once per list, where it first appears.
    private func collect(from page: inout Page, of resource: ResourceConfig, depth: Int = 0) {
        guard page.oversized == nil, page.unreadable == nil else { return }
        var readers = resources.compactMap { child in
            child.forEach.flatMap { $0.resource == resource.name ? (child, $0, list: resource.name, level: 1) : nil }
        }
        if let own = resource.forEach, own.recurses, depth < own.depth { readers.append((resource, own, own.resource, depth + 1)) }
        guard !readers.isEmpty else { return }
        let document: JSONDocument
        if let parsed = page.parsed {
            document = parsed
        } else {
            guard let parsed = try? resource.framing.parse(page.bytes) else { return }
            document = parsed
            page.parsed = parsed
        }
        guard case .success(let records) = resource.framing.records(in: document) else { return }
        for (child, forEach, list, level) in readers {
            var node = records.first
            for _ in 0..<records.count {
                let record = JSONValue(document: document, index: node)
                node = Int(document.nodes[node].end)
                if let when = forEach.when, when.resolve(in: record)?.bool != true { continue }
                // `each:`: a request per element of the record's array (none when it has none).
                let values = forEach.each.map { path in path.resolve(in: record).map { Array($0.elements) } ?? [] } ?? [record]
                for value in values {
                    guard var request = request(for: value, of: record, forEach, child) else { continue }
                    request.depth = level
                    if forEach.each != nil || forEach.recurses {
                        // Across levels, a request is its URL (the item it names), whichever record listed it first.
                        let key =
                            forEach.recurses
                            ? request.url : ([request.url] + request.injected.flatMap { [$0.key, $0.json] }).joined(separator: "\u{0}")
                        guard fannedOut[list, default: []].insert(key).inserted else { continue }
                    }
                    if collected[list] == nil { collected[list] = RequestList() }
                    collected[list]?.append(request)
                }
            }
        }
    }

    /// The request `value` makes — the record, or an element of its `each:` array — with the
    /// record's `with:` values, or `nil` (skipped, warned, counted) when it lacks a key the
    /// template reads or its URL may not be requested.
    func request(for value: JSONValue, of record: JSONValue, _ forEach: ResourceConfig.ForEach, _ child: ResourceConfig) -> Item? {
        func skip(_ reason: String) -> Item? {
            skipped[child.name, default: 0] += 1
            if skipped[child.name, default: 0] <= 20 {
                logger.warning("for_each.skipped", metadata: ["resource": "\(child.name)", LogKey.reason: "\(reason)"])
            }
            return nil
        }
        let template = templates[child.name] ?? ForEachTemplate(forEach)
        let url: String
        switch template.request(for: value) {
        case .url(let made): url = made
        case .missing(let path):
            return skip("a record has no value at '\(path.components.isEmpty ? "." : "\(path)")' for \(forEach.template)")
        case .notAURL(let rendered): return skip("'\(HTTPPageSource.shown(rendered))' is not a URL")
        case .refused(let resolved, let refusal): return skip("refused \(HTTPPageSource.shown(resolved)): \(refusal)")
        }
        var injected: [InjectedValue] = []
        for key in forEach.with {
            guard let value = key.path.resolve(in: record) else { continue }
            injected.append(InjectedValue(key: key.key, json: value.rawText))
        }
        return Item(url: url, injected: injected)
    }

    // MARK: - Resume

    /// Continues after a committed page: `res:NAME:ITEM:INNER`.
    func resume(from state: String) throws {
        if state == "done" {
            index = resources.count
            return
        }
        let fields = state.split(separator: ":", maxSplits: 3, omittingEmptySubsequences: false)
        guard fields.count == 4, fields[0] == "res" else {
            throw SourceError(source: config.path, message: "cannot resume from state '\(state)'")
        }
        guard let resource = resources.firstIndex(where: { $0.name == fields[1] }) else {
            throw SourceError(
                source: config.path,
                message: "the run stopped in resource '\(fields[1])', which this run does not read (give it with --resource)")
        }
        var inner = String(fields[3])
        index = resource
        dropChains()
        if let forEach = resources[index].forEach {
            // `-`: the resource not begun (the one before it ended with the last page committed).
            let itemField = fields[2] == "-" ? ["0"] : fields[2].split(separator: "@", maxSplits: 1)
            guard let position = itemField.first.flatMap({ Int($0) }), position >= 0 else {
                throw SourceError(source: config.path, message: "cannot resume from state '\(state)'")
            }
            let resumed = try resumeRequests(forEach, at: position, digest: itemField.count == 2 ? String(itemField[1]) : nil, inner: inner)
            guard let resumed else {
                finishResource()
                return
            }
            inner = resumed
            // A shared run's fetcher taken over: the requests left come out unfetched, as before.
            if defersRequests, SharedRequests.defers(resources[index], of: resources) { return }
        } else {
            inner = try resumeListing(inner: inner)
        }
        try open(resuming: inner)
    }

    /// Resuming in the current for_each resource at request `position`, after its page that said
    /// `inner`: its list made again (its parent's pages read again; its own requests before
    /// `position` made again when it reads its own records), checked against the run's by
    /// `digest`. Returns where the request's source continues, or `nil` when no request is left.
    private func resumeRequests(_ forEach: ResourceConfig.ForEach, at position: Int, digest: String?, inner: String) throws -> String? {
        var inner = inner
        try recollect(forEach.resource)
        items = collected[forEach.resource] ?? RequestList()
        prefix = ResumeDigest()
        item = position
        if forEach.recurses {
            // Its requests before the one it stopped in made requests of its own, after them in
            // its list: made again (the list then reads as the run's did, which the digest below
            // checks); the one it stopped in starts over, its pages collected as they come.
            try collectRequests(of: resources[index], forEach, through: position)
            inner = ""
        }
        // The requests up to where the run stopped: the same in the list read again, or it
        // starts over (the type's doc). A state without a digest resumes by position.
        let covered = position + (inner.isEmpty ? 0 : 1)
        if let digest, covered > items.count || prefix.advance(over: items, through: covered) != digest {
            logger.warning(
                "for_each.restarted",
                metadata: [
                    "resource": "\(resources[index].name)", "requests": .int(items.count),
                    LogKey.reason:
                        "the list of \(forEach.resource) read again differs before request \(covered) from the one the run stopped in: every request is made again, so that none is skipped",
                ])
            item = 0
            inner = ""
            prefix = ResumeDigest()
        }
        if resources.haveReader(of: resources[index].name) && !forEach.recurses {
            // Its requests before the one it stopped in made requests of the for_each that
            // reads it: made again; the one it stopped in starts over (its pages applied
            // again, in order: the tables end the same), its pages collected as they come.
            try collectRequests(of: resources[index], forEach, through: item)
            inner = ""
        }
        return items.indices.contains(item) ? inner : nil
    }

    /// Resuming in the current resource, not a for_each, after its page that said `inner`: the
    /// lists of the resources before it that a later for_each reads are read again; inside one a
    /// later for_each reads, its pages before the resume point made requests too — read again up
    /// to that point, or, when no page ends there any more, the resource starts over (its pages
    /// applied again, in order: the tables end the same). Returns where its source continues.
    private func resumeListing(inner: String) throws -> String {
        for parent in Set(resources[index...].compactMap { $0.forEach?.resource }) {
            if let k = resources.firstIndex(where: { $0.name == parent }), k < index { try recollect(parent) }
        }
        guard !inner.isEmpty, resources.haveReader(of: resources[index].name), try !recollect(resources[index], upTo: inner) else {
            return inner
        }
        logger.warning(
            "resource.restarted",
            metadata: [
                "resource": "\(resources[index].name)",
                LogKey.reason:
                    "read again, no page of it ends where the run stopped: it starts over, so that no request of the for_each reading it is missed",
            ])
        return ""
    }

    /// Reads `resource`'s pages again from its start — to its end, or up to the page after which
    /// the run stopped (its source's resume state `state`) — only to collect the requests their
    /// records make. Whether it got there (else nothing is collected).
    @discardableResult private func recollect(_ resource: ResourceConfig, upTo state: String? = nil) throws -> Bool {
        logger.info("resource.reread", metadata: ["resource": "\(resource.name)", LogKey.reason: "to resume the for_each that reads it"])
        if let forEach = resource.forEach {
            // A for_each read by another: its own requests made again, from its parent's list.
            try recollect(forEach.resource)
            try collectRequests(of: resource, forEach, through: nil)
            return true
        }
        let source = try makeSource(resource)
        collected[resource.name] = RequestList()
        fannedOut[resource.name] = nil
        while var page = try source.next() {
            collect(from: &page, of: resource)
            if let state, page.resumeState == state { return true }
        }
        guard state == nil else {
            collected[resource.name] = nil
            return false
        }
        return true
    }

    /// Makes requests `0..<end` of the for_each `resource` again (`nil`: every one, those it makes
    /// of its own included; a request answered 404 or 410 skipped, as the run skipped it), only to
    /// collect the requests their records make: for the for_each resources that read it, and,
    /// when it reads its own records, its own later requests, appended to its list as the run
    /// appended them.
    private func collectRequests(of resource: ResourceConfig, _ forEach: ResourceConfig.ForEach, through end: Int?) throws {
        let list = collected[forEach.resource] ?? RequestList()
        if resources.haveReader(of: resource.name) {
            collected[resource.name] = RequestList()
            fannedOut[resource.name] = nil
        }
        var k = 0
        // The list grows as the pages of a resource that reads its own records are collected.
        while k < min(end ?? .max, list.count) {
            let source = try requestSource(list[k].url, forEach, resource, resume: "")
            do {
                while var page = try source.next() { collect(from: &page, of: resource, depth: list[k].depth) }
            } catch let error as FetchError where error.meansNotFound {}
            k += 1
        }
    }

    /// Reads resource `name`'s pages again, once, only to collect the requests its records make.
    private func recollect(_ name: String) throws {
        guard collected[name] == nil, let resource = resources.first(where: { $0.name == name }) else { return }
        try recollect(resource)
    }
}
