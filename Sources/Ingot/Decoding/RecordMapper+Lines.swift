/// JSON Lines: a line that is not JSON is a rejected record; the other lines go on.
extension RecordMapper {
    /// Rejects the lines of `bytes` that are not JSON (`not_json`, coding path `line N`), into
    /// `page`, in parts of `partSize` rejections like records: a page of a million such lines is
    /// never held as a million rejections (it peaked at 670 MB). Hands each full part to `emit`
    /// and returns how many rejections the part left open holds.
    static func rejectLines(
        _ failures: [(line: Int, error: JSONSyntaxError)], of bytes: [UInt8], entity: String, partSize: Int, into page: inout DecodedPage,
        _ emit: (DecodedPage) -> Void
    ) -> Int {
        var rejected = 0
        for failure in failures {
            if rejected == partSize {
                var next = DecodedPage(
                    seq: page.seq, source: page.source, bytes: page.bytes, records: [], rejections: [], pageRejected: false,
                    recordCount: 0)
                next.part = page.part + 1
                next.pageBytes = page.pageBytes
                page.isLastPart = false
                page.pageBytes = 0
                page.bytes = 0
                page.recordCount = rejected
                swap(&page, &next)
                emit(next)
                rejected = 0
            }
            rejected += 1
            let start = min(max(0, failure.error.offset), bytes.count)
            var end = start
            while end < bytes.count && bytes[end] != 0x0A { end += 1 }
            var lineStart = start
            while lineStart > 0 && bytes[lineStart - 1] != 0x0A { lineStart -= 1 }
            page.rejections.append(
                RecordRejection(
                    entity: entity, codingPath: "line \(failure.line)", reason: failure.error.description, source: page.source,
                    recordIndex: failure.line - 1, raw: RecordRejection.prefix(bytes[lineStart..<end]), rawLength: end - lineStart,
                    code: .notJSON))
        }
        return rejected
    }
}
