import Foundation
import Logging

/// The requests of a shared run that any job makes (docs/scale-out.md, "Requests any job
/// makes"): a `for_each` request answered by one page (no pagination of its own) is enqueued by
/// the fetcher unfetched — a unit holding its URL (``Page/request``) — and the job that claims it
/// fetches it, with the resource's own HTTP settings (headers, credentials, retries, timeouts, the
/// origin rules) and up to the resource's `concurrency` of them at once. A fan-out of detail
/// requests then gets faster with every job, where one fetcher made them all before.
///
/// Immutable: the jobs' fetches run on threads of their own.
package final class ForEachRequests: Sendable {
    private let resources: [ResourceConfig]
    private let environment: [String: String]
    private let maxPageBytes: Int

    init(config: PipelineConfig, environment: [String: String], maxPageBytes: Int) {
        resources = config.resources
        self.environment = environment
        self.maxPageBytes = maxPageBytes
    }

    /// Whether the fetcher leaves `resource`'s requests to the jobs: a `for_each` whose requests
    /// answer one page each.
    package static func defers(_ resource: ResourceConfig) -> Bool { resource.forEach.map { $0.http.paginate == .none } ?? false }

    /// How many requests of `page`'s resource a job makes at once (its `concurrency`).
    func concurrency(of page: Page) -> Int {
        resources.first { $0.name == page.resourceName }?.forEach.map { max(1, $0.http.concurrency) } ?? 1
    }

    /// Whether `page` is a request still to be made (a job that took the unit over may find it
    /// fetched already).
    static func isPending(_ page: Page) -> Bool {
        page.request != nil && page.bytes.isEmpty && page.unreadable == nil && page.oversized == nil
    }

    /// `page` with its request's answer: the payload, its URL as the source and the HTTP
    /// exchange. A request answered 404 or 410 is a rejected page naming it, as a single run's
    /// (`not_found: fail` makes it fail the job); any other failure, once the retries ran out,
    /// fails the job, and the unit goes back to the queue.
    func fetch(_ page: Page, logger: Logger) throws -> Page {
        guard let url = page.request, let resource = resources.first(where: { $0.name == page.resourceName }),
            let forEach = resource.forEach
        else { return page }
        var answered = page
        // The URL comes from the work queue, which is input: it must pass the for_each's origin
        // rules as the fetcher's requests do (no job sends the resource's credentials elsewhere).
        let policy = OriginPolicy(url: forEach.http.url, allowedHosts: forEach.http.allowedHosts)
        if let refusal = policy.refusal(ofRequest: url) {
            answered.unreadable = "the request \(HTTPPageSource.shown(url)) of unit \(page.unit?.seq ?? page.seq) was refused: \(refusal)"
            return answered
        }
        var http = forEach.http
        http.url = url
        do {
            let source = try HTTPPageSource(
                config: http, framing: resource.framing, environment: environment, maxPageBytes: maxPageBytes, logger: logger)
            guard let fetched = try source.next() else {
                answered.unreadable = "\(HTTPPageSource.shown(url)) gave no page"
                return answered
            }
            answered.bytes = fetched.bytes
            answered.source = fetched.source
            answered.http = fetched.http
            answered.parsed = fetched.parsed
            answered.oversized = fetched.oversized
            answered.compression = fetched.compression
        } catch let error as FetchError where (error.status == 404 || error.status == 410) && !forEach.notFoundFails {
            answered.unreadable = ForEachRequests.skipped(error, of: resource, logger: logger)
        }
        return answered
    }

    /// A request of `resource` answered 404 or 410 (its record was deleted after the list was
    /// read), logged as `for_each.skipped`: why its page is rejected.
    static func skipped(_ error: FetchError, of resource: ResourceConfig, logger: Logger) -> String {
        let status = error.status ?? 404
        logger.warning(
            "for_each.skipped",
            metadata: [
                "resource": "\(resource.name)", LogKey.url: "\(error.url)", "status": .int(status),
                LogKey.reason:
                    "the request was answered \(status): its record was deleted after the list was read? (not_found: fail makes it fatal)",
            ])
        return
            "\(error.url) was answered HTTP \(status): the \(resource.name) request of for_each \(resource.forEach?.resource ?? "") was skipped"
    }
}
