import Foundation
import Logging
import Synchronization

/// The files of a directory whose paths match a glob, read whole, in path order. A glob with a
/// `/` matches paths below the directory, part by part, and `**` matches zero or more folders
/// (git's and bash's globstar: `**/*.json.gz`); without one, only the directory's own files.
/// A file ending in `.gz` or `.zst` comes as it is, marked with its ``Compression``: the archive
/// keeps it so, and the decode lane inflates it, bounded by `maxPageBytes` after decompression
/// as an HTTP body is (one that cannot be decompressed is a rejected page, not a failed run).
package final class DirectoryPageSource: ListingPageSource, @unchecked Sendable {  // used from the source queue only
    package let directory: String
    /// The path pattern (`fnmatch` per part, `**` for any folders) the files match.
    package let glob: String
    package let files: [String]
    /// Files bigger than this are not read: they become oversized pages (rejected by the run).
    package let maxPageBytes: Int
    private var position = 0
    /// Set for a shared run's fetcher: each file is enqueued unread, a unit naming it and its
    /// size (``FileUnit``), and the job that claims the unit reads it from its own directory
    /// (docs/scale-out.md, "Pages any job reads").
    package var defersReading = false

    /// Lists the matching files; throws when the directory cannot be read. Files over
    /// `maxPageBytes` are not read: they come as oversized pages.
    package init(directory: String, glob: String, maxPageBytes: Int = Page.defaultMaxBytes) throws {
        self.directory = directory
        self.glob = glob
        self.maxPageBytes = maxPageBytes
        let names: [String]
        do {
            if glob.contains("/") || glob.contains("**") {
                guard let walk = FileManager.default.enumerator(atPath: directory) else {
                    throw SourceError(source: directory, message: "cannot list the directory")
                }
                var found: [String] = []
                while let path = walk.nextObject() as? String {
                    if walk.fileAttributes?[.type] as? FileAttributeType == .typeRegular { found.append(path) }
                }
                names = found
            } else {
                names = try FileManager.default.contentsOfDirectory(atPath: directory)
            }
        } catch let error as SourceError {
            throw error
        } catch {
            throw SourceError(source: directory, message: "cannot list the directory: \(error.localizedDescription)")
        }
        let pattern = glob.split(separator: "/", omittingEmptySubsequences: true)
        files = names.filter { DirectoryPageSource.matches(pattern[...], $0.split(separator: "/")[...]) }.sorted()
    }

    /// Whether `path`'s parts match `pattern`'s: each part by `fnmatch`, `**` any number of parts.
    static func matches(_ pattern: ArraySlice<Substring>, _ path: ArraySlice<Substring>) -> Bool {
        guard let first = pattern.first else { return path.isEmpty }
        if first == "**" {
            return matches(pattern.dropFirst(), path) || (!path.isEmpty && matches(pattern, path.dropFirst()))
        }
        guard let part = path.first, fnmatch(String(first), String(part), 0) == 0 else { return false }
        return matches(pattern.dropFirst(), path.dropFirst())
    }

    /// `files DIR/GLOB`, the directory's path standardized.

    package var origin: String { "files \((directory as NSString).standardizingPath)/\(glob)" }

    package func next() throws -> Page? {
        guard position < files.count else { return nil }
        let path = (directory as NSString).appendingPathComponent(files[position])
        position += 1
        let resumeState = "after:" + files[position - 1]
        if defersReading {
            var st = stat()
            guard stat(path, &st) == 0 else {
                throw SourceError(source: path, message: "cannot read the file: \(String(cString: strerror(errno)))")
            }
            var page = Page(seq: position, source: path, bytes: [], resumeState: resumeState)
            page.cursor = FileUnit(name: files[position - 1], size: Int(st.st_size)).cursor
            return page
        }
        let (bytes, oversized) = try DirectoryPageSource.read(path, limit: maxPageBytes)
        var page = Page(seq: position, source: path, bytes: bytes, resumeState: resumeState)
        page.oversized = oversized
        page.compression = Compression.of(path: path)
        return page
    }

    /// Reads `path` up to `limit` bytes. A bigger file (by its size, or by what it yields: a file
    /// that grows, a pipe) is not kept: its bytes are dropped and `oversized` says how many were
    /// seen, so a huge file never has to fit in memory to be refused.
    static func read(_ path: String, limit: Int) throws -> (bytes: [UInt8], oversized: Int?) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw SourceError(source: path, message: "cannot read the file: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var st = stat()
        if fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, Int(st.st_size) > limit {
            return ([], Int(st.st_size))
        }
        var bytes: [UInt8] = []
        if (st.st_mode & S_IFMT) == S_IFREG { bytes.reserveCapacity(Int(st.st_size)) }
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw SourceError(source: path, message: "cannot read the file: \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            if bytes.count + n > limit { return ([], bytes.count + n) }
            bytes.append(contentsOf: chunk[0..<n])
        }
        return (bytes, nil)
    }

    /// Reads every file once and digests it (a refresh's listing; the files are read again, and
    /// digested again, as the run goes).
    package func pageDigests() throws -> [[UInt8]] {
        try files.map { name in
            let (bytes, oversized) = try DirectoryPageSource.read((directory as NSString).appendingPathComponent(name), limit: maxPageBytes)
            return oversized == nil ? SHA256.digest(bytes) : []
        }
    }

    /// Where a job of a shared run reads the files the units of this source name.
    package var shared: SharedFiles { SharedFiles(directory: directory, glob: glob, maxPageBytes: maxPageBytes) }

    /// Continues with the first file named after `after:NAME`.
    package func resume(from state: String) throws {
        guard state.hasPrefix("after:") else { throw SourceError(source: directory, message: "cannot resume from '\(state)'") }
        let last = String(state.dropFirst(6))
        position = files.firstIndex { $0 > last } ?? files.count
    }
}

/// A file of a directory source as a shared run's unit names it (``Page/cursor``): `file:SIZE:NAME`,
/// its path below the directory and its size when the fetcher listed it.
package struct FileUnit: Equatable, Sendable {
    package var name: String
    package var size: Int

    package var cursor: String { "file:\(size):\(name)" }

    /// The unit a cursor names; `nil` for any other cursor (a numbered page's, text that is not one).
    package init?(cursor: String) {
        guard cursor.hasPrefix("file:") else { return nil }
        let rest = cursor.dropFirst(5)
        guard let colon = rest.firstIndex(of: ":"), let size = Int(rest[..<colon]), size >= 0 else { return nil }
        self.init(name: String(rest[rest.index(after: colon)...]), size: size)
    }

    package init(name: String, size: Int) {
        self.name = name
        self.size = size
    }
}

/// The files a job of a shared run reads for the units it claims (``FileUnit``): a directory
/// source's, from this job's own directory — every job of the run sees the same files (a volume
/// they share, or pages in the image; docs/deploy.md). A unit row is input: a name outside the
/// source's glob (`..`, an absolute path, another pattern) is a rejected page and nothing is read;
/// a file this job does not find, or finds at another size than the fetcher listed, fails the
/// job (its units go back to the queue, for a job that sees the run's files).
package struct SharedFiles: Sendable {
    package let directory: String
    package let glob: String
    package let maxPageBytes: Int

    /// `page`, a unit naming a file, with the file's bytes (or its oversize), source and compression.
    package func read(_ page: Page, unit: FileUnit) throws -> Page {
        var page = page
        let parts = unit.name.split(separator: "/", omittingEmptySubsequences: false)
        let pattern = glob.split(separator: "/", omittingEmptySubsequences: true)
        guard !unit.name.isEmpty, !parts.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }),
            DirectoryPageSource.matches(pattern[...], parts[...])
        else {
            page.unreadable = "unit \(page.unitSeq) names '\(unit.name)', not a file of \(directory)/\(glob)"
            return page
        }
        let path = (directory as NSString).appendingPathComponent(unit.name)
        var st = stat()
        guard stat(path, &st) == 0 else {
            throw SourceError(
                source: path,
                message:
                    "unit \(page.unitSeq) names this file, which this job cannot read (\(String(cString: strerror(errno)))): every job of a joined run must see the same files"
            )
        }
        guard Int(st.st_size) == unit.size else {
            throw SourceError(
                source: path,
                message:
                    "the file is \(st.st_size) bytes here and was \(unit.size) bytes where the run listed it: every job of a joined run must see the same files"
            )
        }
        let (bytes, oversized) = try DirectoryPageSource.read(path, limit: maxPageBytes)
        page.bytes = bytes
        page.oversized = oversized
        page.source = path
        page.compression = Compression.of(path: path)
        return page
    }
}
