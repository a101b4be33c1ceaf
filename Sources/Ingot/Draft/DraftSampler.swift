import Foundation

extension PipelineDraft {
    /// Reads up to `pages` pages from `url`, following the paginator the first page shows (on
    /// the URL's origin only: the headers, credentials among them, go nowhere else). Stops at a
    /// page without records, a page it read already, or the end the paginator says.
    package static func samples(
        url: String, headers: [(String, String)], pages: Int, timeout: Double = 30
    ) throws(Failure) -> [Sample] {
        let client = HTTPClient()
        let policy = OriginPolicy(url: url, allowedHosts: [])
        var samples: [Sample] = []
        var next: String? = url
        var seen: Set<String> = []
        var cursorTries = 0
        var cursorParam: String?
        while let target = next, samples.count < max(1, pages), seen.insert(target).inserted {
            let response: HTTPResponse
            do {
                response = try client.get(target, headers: headers, timeout: timeout)
            } catch {
                throw Failure(description: "\(target): \(error)")
            }
            guard (200..<300).contains(response.status) else {
                let start = String(decoding: response.body.prefix(200), as: UTF8.self)
                throw Failure(description: "\(target): HTTP \(response.status)\(start.isEmpty ? "" : ": \(start)")")
            }
            let document: JSONDocument
            do {
                document = try JSONDocument(bytes: response.body)
            } catch {
                throw Failure(description: "\(target): the answer is not JSON (\(error.description))")
            }
            var headerMap: [String: String] = [:]
            for (name, value) in response.headers { headerMap[name] = value }
            let sample = Sample(document: document, url: target, headers: headerMap)
            let path = (try? recordsPath(of: samples.first ?? sample).0) ?? "."
            if let previous = samples.last {
                // A page without records ends the sample (the list's end); one that repeats the
                // page before took the cursor under another name: the next name is tried.
                guard let records = resolve(path, in: document.root), records.kind == .array ? records.count > 0 : records.kind == .object
                else { break }
                if firstRecord(of: sample, path) == firstRecord(of: previous, path) {
                    cursorTries += 1
                    guard cursorTries < Paginator.cursorParams.count else { break }
                    next = Paginator.read(previous, recordsPath: path, cursorParam: Paginator.cursorParams[cursorTries])?.next
                    seen.remove(target)
                    continue
                }
            }
            samples.append(sample)
            cursorParam = cursorTries > 0 ? Paginator.cursorParams[cursorTries] : nil
            next = Paginator.read(sample, recordsPath: path, cursorParam: cursorParam)?.next.flatMap { policy.check($0) == nil ? $0 : nil }
        }
        for k in samples.indices { samples[k].cursorParam = cursorParam }
        return samples
    }

    /// The text of the first record of `sample` at `path` (to see a page repeated).
    private static func firstRecord(of sample: Sample, _ path: String) -> String? {
        guard let records = resolve(path, in: sample.document.root) else { return nil }
        return records.kind == .array ? records.elements.first(where: { _ in true })?.rawText : records.rawText
    }

    /// The first `pages` `*.json` files of `directory`, in path order.
    package static func samples(directory: String, pages: Int) throws(Failure) -> [Sample] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".json") }.sorted()
        } catch {
            throw Failure(description: "\(directory): cannot be read (\(error.localizedDescription))")
        }
        guard !names.isEmpty else { throw Failure(description: "\(directory): no *.json file to draft from") }
        var samples: [Sample] = []
        for name in names.prefix(max(1, pages)) {
            let path = (directory as NSString).appendingPathComponent(name)
            guard let data = FileManager.default.contents(atPath: path) else { throw Failure(description: "\(path): cannot be read") }
            do {
                samples.append(Sample(document: try JSONDocument(bytes: Array(data))))
            } catch {
                throw Failure(description: "\(path): not JSON (\(error.description))")
            }
        }
        return samples
    }
}
