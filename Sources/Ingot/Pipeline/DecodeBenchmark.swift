import Foundation

/// Measures the decode stages alone on one thread (for `make bench`): JSON parsing, then
/// parsing plus mapping to rows. Pages are read into memory first; only CPU work is timed.
package enum DecodeBenchmark {
    package struct Result: Sendable {
        package var bytes: Int
        package var records: Int
        package var parseSeconds: Double
        package var mapSeconds: Double
    }

    package static func measure(config: PipelineConfig, source: any PageSource) throws -> Result {
        var pages: [Page] = []
        while let page = try source.next() { pages.append(page) }
        let bytes = pages.reduce(0) { $0 + $1.bytes.count }
        var clock = ContinuousClock.now
        for page in pages { _ = try? JSONDocument(bytes: page.bytes) }
        let parse = ContinuousClock.now - clock
        var mapper = RecordMapper(plan: MappingPlan(model: config.model, root: config.root, framing: config.framing))
        var records = 0
        clock = ContinuousClock.now
        for page in pages { records += mapper.map(bytes: page.bytes, seq: page.seq, source: page.source).records.count }
        let map = ContinuousClock.now - clock
        return Result(bytes: bytes, records: records, parseSeconds: parse.inSeconds, mapSeconds: map.inSeconds)
    }
}
