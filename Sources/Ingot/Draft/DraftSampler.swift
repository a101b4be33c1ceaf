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

    /// The first `pages` files of `directory` (``FilesShape``: its JSON pages, or its JSON Lines
    /// files, gzipped or zstd-compressed or not, in its folders too), in path order, read and
    /// decompressed as a run reads them; a JSON Lines file's lines become one array (a line that
    /// is not JSON left out: the run rejects it).
    package static func samples(directory: String, pages: Int) throws(Failure) -> [Sample] {
        let shape = try FilesShape.of(directory)
        let files: [String]
        do {
            files = try DirectoryPageSource(directory: directory, glob: shape.glob).files
        } catch {
            throw Failure(description: "\(directory): cannot be read (\(error))")
        }
        var samples: [Sample] = []
        for name in files.prefix(max(1, pages)) {
            let path = (directory as NSString).appendingPathComponent(name)
            do {
                var (bytes, oversized) = try DirectoryPageSource.read(path, limit: Page.defaultMaxBytes)
                if oversized == nil, let compression = Compression.of(path: path) {
                    (bytes, oversized) = try compression.decompress(bytes, limit: Page.defaultMaxBytes)
                }
                if let oversized {
                    throw Failure(description: "\(path): \(oversized) bytes, over the \(Page.defaultMaxBytes) a page may hold")
                }
                var sample = Sample(document: try JSONDocument(bytes: shape.jsonLines ? Self.arrayOfLines(bytes) : bytes))
                sample.files = shape
                samples.append(sample)
            } catch let failure as Failure {
                throw failure
            } catch let error as JSONSyntaxError {
                throw Failure(description: "\(path): not JSON (\(error.description))")
            } catch {
                throw Failure(description: "\(path): cannot be read (\(error))")
            }
        }
        return samples
    }

    /// JSON Lines as one JSON array of its lines (blank lines, and lines that are not JSON, left out).
    static func arrayOfLines(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "[")]
        for line in bytes.split(separator: UInt8(ascii: "\n")) {
            let text = line.last == UInt8(ascii: "\r") ? line.dropLast() : line
            guard text.contains(where: { $0 != 0x20 && $0 != 0x09 }), (try? JSONDocument(bytes: Array(text))) != nil else { continue }
            if out.count > 1 { out.append(UInt8(ascii: ",")) }
            out += text
        }
        out.append(UInt8(ascii: "]"))
        return out
    }
}

/// What files `ingot init --pages DIR` drafts from: the kind of file the directory (and its
/// folders) holds most of — JSON pages (`.json`), or JSON Lines (`.jsonl`, `.ndjson`), each
/// plain, gzipped (`.gz`) or zstd-compressed (`.zst`) — as the glob and format of a `files:`
/// source.
package struct FilesShape: Sendable, Equatable {
    /// `*.json`, or `**/*.jsonl.gz` when some are in folders.
    package var glob: String
    /// `format: jsonl`.
    package var jsonLines: Bool

    /// The endings a draft reads, JSON pages first (the kind chosen on a tie).
    static let endings: [(ending: String, jsonLines: Bool)] = ["json", "jsonl", "ndjson"].flatMap { base in
        ["", ".gz", ".zst"].map { ("." + base + $0, base != "json") }
    }

    static func of(_ directory: String) throws(PipelineDraft.Failure) -> FilesShape {
        guard let walk = FileManager.default.enumerator(atPath: directory) else {
            throw PipelineDraft.Failure(description: "\(directory): cannot be read")
        }
        var counts = [Int](repeating: 0, count: endings.count)
        var nested = [Bool](repeating: false, count: endings.count)
        var seen = 0
        // A look at the first 100,000 entries is enough to tell what the directory holds.
        while seen < 100_000, let path = walk.nextObject() as? String {
            seen += 1
            guard walk.fileAttributes?[.type] as? FileAttributeType == .typeRegular,
                let k = endings.indices.last(where: { path.hasSuffix(endings[$0].ending) })
            else { continue }
            counts[k] += 1
            if path.contains("/") { nested[k] = true }
        }
        guard let most = counts.max(), most > 0, let k = counts.firstIndex(of: most) else {
            throw PipelineDraft.Failure(
                description: "\(directory): no page to draft from (*.json, or JSON Lines: *.jsonl, *.ndjson; plain, .gz or .zst)")
        }
        return FilesShape(glob: (nested[k] ? "**/*" : "*") + endings[k].ending, jsonLines: endings[k].jsonLines)
    }
}
