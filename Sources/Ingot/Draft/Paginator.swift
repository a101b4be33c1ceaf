import Foundation

/// How a draft's pages follow each other, read from what the first page shows (its headers and
/// body), and the next page's URL by that reading (to read it and confirm).
enum Paginator {
    /// A paginator drafted from a page: its `paginate:` text, why, and the next page's URL.
    struct Reading {
        var yaml: String
        var why: String
        var next: String?
    }

    static let nextURLPaths = [
        "next", "next_url", "nextPageUrl", "next_page", "links.next", "paging.next", "meta.next", "pagination.next", "_links.next.href",
    ]
    static let cursorPaths = [
        "next_cursor", "nextCursor", "response_metadata.next_cursor", "meta.next_cursor", "meta.cursor", "paging.cursors.after",
        "data.after",
        "after", "cursor",
    ]
    static let totalPagesPaths = ["total_pages", "totalPages", "meta.total_pages", "pagination.total_pages", "pages", "page_count"]
    static let totalPaths = ["total", "total_count", "totalCount", "count", "meta.total", "total_results", "totalResults"]

    /// The query parameters a cursor is tried as, in order, until the next page differs from the
    /// one before (``PipelineDraft/samples(url:headers:pages:timeout:)``).
    static let cursorParams = ["cursor", "start_cursor", "after", "page_token", "pageToken", "next"]

    /// The paginator the page `sample` (with records at `recordsPath`) shows, or `nil` when it
    /// shows none; a cursor is sent as `cursorParam` when given.
    static func read(_ sample: PipelineDraft.Sample, recordsPath: String, cursorParam: String? = nil) -> Reading? {
        let url = sample.url ?? ""
        if let link = sample.headers["link"], let next = HTTPPageSource.nextLink(link) {
            return Reading(
                yaml: "{link_header: true}", why: "the response's Link header names the next page",
                next: URLText.resolve(next, against: url))
        }
        for header in ["x-wp-totalpages", "x-total-pages"] where sample.headers[header] != nil {
            let name = header == "x-wp-totalpages" ? "X-WP-TotalPages" : "X-Total-Pages"
            let current = Int(URLText.queryValue(url, named: "page") ?? "") ?? 1
            return Reading(
                yaml: "{page: {param: page, total_pages: {header: \(name)}}}", why: "the \(name) header says how many pages there are",
                next: URLText.settingQuery(url, [("page", "\(current + 1)")]))
        }
        let root = sample.document.root
        guard root.kind == .object else { return nil }
        return nextURL(root, url) ?? cursor(root, url, recordsPath: recordsPath, param: cursorParam) ?? numbered(root, url)
    }

    private static func value(_ path: String, _ root: JSONValue) -> JSONValue? {
        JSONKeyPath(keys: path.components(separatedBy: ".")).resolve(in: root)
    }

    /// A next page's URL in the body.
    private static func nextURL(_ root: JSONValue, _ url: String) -> Reading? {
        for path in nextURLPaths {
            guard let v = value(path, root) else { continue }
            if v.isNull {
                return Reading(yaml: "{next_url: \(path)}", why: "'\(path)' is where a next page's URL goes (null on the last)", next: nil)
            }
            if let next = v.string, next.hasPrefix("http") || next.hasPrefix("/") || next.hasPrefix("?") {
                return Reading(
                    yaml: "{next_url: \(path)}", why: "'\(path)' holds the next page's URL", next: URLText.resolve(next, against: url))
            }
        }
        return nil
    }

    /// A cursor in the body, or `has_more` with records that have ids (the last one's id as the cursor).
    private static func cursor(_ root: JSONValue, _ url: String, recordsPath: String, param cursorParam: String?) -> Reading? {
        let hasMore = ["has_more", "hasMore", "more", "pageInfo.hasNextPage"].first { value($0, root)?.kind == .bool }
        let more = hasMore.map { ", has_more: \($0)" } ?? ""
        for path in cursorPaths {
            guard let v = value(path, root), let cursor = v.string ?? v.numberText else { continue }
            let param =
                cursorParam ?? path.components(separatedBy: ".").last.map { $0.hasPrefix("next_") ? String($0.dropFirst(5)) : $0 }
                ?? "cursor"
            let done = cursor.isEmpty || cursor == "0" || (hasMore.flatMap { value($0, root)?.bool } == false)
            // A numeric cursor ends at 0 (Twitter's next_cursor), a text one at null or "".
            let stops = v.kind == .number ? ", stop_values: [0, \"0\"]" : ""
            return Reading(
                yaml: "{cursor: {path: \(path), param: \(param)\(stops)}\(more)}",
                why: "'\(path)' holds the next cursor, sent as '\(param)'"
                    + (cursorParam == nil ? "; check the parameter the API takes" : ""),
                next: done ? nil : URLText.settingQuery(url, [(param, cursor)]))
        }
        guard let hasMore, let records = PipelineDraft.resolve(recordsPath, in: root), records.kind == .array,
            let last = records.elements.reduce(nil, { _, e in Optional(e) }), let id = last["id"].flatMap({ $0.string ?? $0.numberText })
        else { return nil }
        return Reading(
            yaml: "{cursor: {from_last_record: id, param: starting_after}, has_more: \(hasMore)}",
            why:
                "'\(hasMore)' with records that have ids: the last record's id as the cursor (Stripe's starting_after; check the parameter)",
            next: value(hasMore, root)?.bool == true ? URLText.settingQuery(url, [("starting_after", id)]) : nil)
    }

    /// Page numbers with a total of pages, or offsets with a total of records.
    private static func numbered(_ root: JSONValue, _ url: String) -> Reading? {
        if let path = totalPagesPaths.first(where: { value($0, root)?.int64 != nil }) {
            let current = Int(URLText.queryValue(url, named: "page") ?? "") ?? 1
            let total = Int(value(path, root)?.int64 ?? 0)
            return Reading(
                yaml: "{page: {param: page, total_pages: \(path)}}", why: "'\(path)' says how many pages there are",
                next: current < total ? URLText.settingQuery(url, [("page", "\(current + 1)")]) : nil)
        }
        guard
            let limitParam = ["limit", "per_page", "page_size", "maxResults"].first(where: { URLText.queryValue(url, named: $0) != nil }),
            let path = totalPaths.first(where: { value($0, root)?.int64 != nil }),
            let limit = Int(URLText.queryValue(url, named: limitParam) ?? "")
        else { return nil }
        let offsetParam = ["offset", "startAt", "start", "skip"].first { URLText.queryValue(url, named: $0) != nil } ?? "offset"
        let offset = Int(URLText.queryValue(url, named: offsetParam) ?? "") ?? 0
        let total = Int(value(path, root)?.int64 ?? 0)
        return Reading(
            yaml: "{offset: {param: \(offsetParam), limit_param: \(limitParam), limit: \(limit), total: \(path)}}",
            why: "'\(path)' counts the records, '\(limitParam)' sizes a page",
            next: offset + limit < total ? URLText.settingQuery(url, [(offsetParam, "\(offset + limit)")]) : nil)
    }

    /// The paginator of a draft read from `samples`: the first page's reading, said confirmed
    /// when a second page was read by it.
    static func detect(_ samples: [PipelineDraft.Sample], recordsPath: String) -> (yaml: String, why: String)? {
        guard let first = samples.first, let reading = read(first, recordsPath: recordsPath, cursorParam: first.cursorParam) else {
            return nil
        }
        let confirmed = samples.count > 1 ? " (read \(samples.count) pages by it)" : ""
        return (reading.yaml, reading.why + confirmed)
    }
}
