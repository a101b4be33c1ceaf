import Foundation
import Logging
import Synchronization
import Testing

@testable import Ingot

/// Log lines, exactly as an operator reads them.
struct LogfmtLogHandlerTests {
    private func capture(_ format: LogfmtLogHandler.Format, _ body: (Logger) -> Void) -> [String] {
        let lines = Mutex<[String]>([])
        let output = LogfmtLogHandler.Output { line in lines.withLock { $0.append(line) } }
        var logger = Logger(label: "t") { _ in LogfmtLogHandler(format: format, output: output, timestamps: false) }
        logger[metadataKey: LogKey.pipeline] = "people"
        body(logger)
        return lines.withLock { $0 }
    }

    @Test func logfmtNeverBreaksALine() {
        let lines = capture(.logfmt) { logger in
            logger.info("page.rejected", metadata: [LogKey.reason: "bad\nline\r\u{01}end", LogKey.source: "a=b c"])
        }
        #expect(lines == [#"level=info msg=page.rejected pipeline=people reason="bad\nline\r\u0001end" source="a=b c""# + "\n"])
    }

    @Test func logfmtQuotesOnlyWhatNeedsIt() {
        let lines = capture(.logfmt) { logger in
            logger.warning(
                "record.rejected",
                metadata: [
                    LogKey.reason: #"expected integer, got string "x""#, LogKey.codingPath: "results[3].id", "empty": "",
                ])
        }
        #expect(
            lines == [
                #"level=warning msg=record.rejected pipeline=people coding_path=results[3].id empty="" reason="expected integer, got string \"x\""\#n"#
            ])
    }

    @Test func jsonIsOneObjectPerLine() throws {
        let lines = capture(.json) { logger in
            logger.info("run.summary", metadata: [LogKey.pages: "240", LogKey.reason: "line\nbreak"])
        }
        #expect(lines == [#"{"level":"info","msg":"run.summary","pipeline":"people","pages":"240","reason":"line\nbreak"}\#n"#])
        let object = try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: String]
        #expect(object?["reason"] == "line\nbreak")
    }
}
