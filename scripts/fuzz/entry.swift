// libFuzzer's entry point for Ingot's fuzz harnesses (`make fuzz`, scripts/fuzz.sh): compiled
// with -sanitize=fuzzer,address against the Ingot module built the same way. The harness is
// chosen by INGOT_FUZZ_TARGET (page, archive, pipeline, pagination); see Ingot's FuzzTargets.
import Foundation
import Ingot

private let target: String = {
    let name = ProcessInfo.processInfo.environment["INGOT_FUZZ_TARGET"] ?? ""
    guard FuzzTargets.names.contains(name) else {
        FileHandle.standardError.write(Data("set INGOT_FUZZ_TARGET to one of \(FuzzTargets.names.joined(separator: ", "))\n".utf8))
        exit(2)
    }
    return name
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    FuzzTargets.run(target, bytes)
    return 0
}
