import ArgumentParser
import Foundation
import Ingot

/// `ingot init`: a pipeline drafted from an API's first pages, or from sample pages in a
/// directory (docs/pipelines.md, "A first draft").
struct Init: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Draft a pipeline from an API's first pages (or sample pages in a directory).",
        discussion:
            "Each guess is said in a comment beside it. The draft is validated before it is written; an existing file is never overwritten."
    )

    @Argument(help: "The API's URL (its first page).")
    var url: String?

    @Option(name: .customLong("pages"), help: "Pages to read from the URL (default 3), or a directory of sample pages (*.json).")
    var pages: String?

    @Option(name: .customLong("header"), help: "A header to send, 'Name: value' (repeatable).")
    var headers: [String] = []

    @Option(
        name: .customLong("for-each"),
        help: "For a list of bare ids: the path of each id's page, relative to the list's URL, with {.} for the id (item/{.}.json).")
    var forEach: String?

    @Option(name: .customLong("bearer-env"), help: "An environment variable holding a bearer token: sent, and named in the draft's auth.")
    var bearerEnv: String?

    @Option(help: "The pipeline's name (default: from the URL or the directory).")
    var name: String?

    @Option(name: .shortAndLong, help: "Where to write the draft (default: pipelines/NAME.yml).")
    var output: String?

    @Flag(help: "Print the draft; write nothing.")
    var dryRun = false

    @Flag(help: "Draft Swift types for the library (IngotEntity structs) instead of a pipeline file.")
    var swift = false

    func validate() throws {
        if url == nil && pages.map({ Int($0) != nil }) ?? true {
            throw ValidationError("give the API's URL, or --pages DIR (a directory of sample pages)")
        }
    }

    func run() throws {
        let draft: PipelineDraft
        do {
            draft = try makeDraft()
        } catch let failure as PipelineDraft.Failure {
            printError("ingot init: \(failure)")
            throw Exit.failed
        }
        // A draft that does not validate is a bug of the drafting, said as such.
        do {
            _ = try PipelineConfig.parse(text: draft.yaml, path: output ?? "draft.yml", environment: [:])
        } catch {
            printError("ingot init: the draft does not validate (please report it):\n\(error)\n\n\(draft.yaml)")
            throw Exit.failed
        }
        let text = swift ? draft.swift : draft.yaml
        if dryRun {
            print(text, terminator: "")
            return
        }
        let path = output ?? (swift ? "\(draft.name).swift" : "pipelines/\(draft.name).yml")
        guard !FileManager.default.fileExists(atPath: path) else {
            printError("ingot init: \(path) exists: it is never overwritten (give --output, or --dry-run to print the draft)")
            throw Exit.badConfig
        }
        let directory = (path as NSString).deletingLastPathComponent
        if !directory.isEmpty { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) }
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        let next = swift ? "add it to your target" : "ingot run \(path)"
        print("\(path): drafted (\(draft.entities.count) entities, root \(draft.root)); check the comments, then: \(next)")
    }

    private func makeDraft() throws -> PipelineDraft {
        if let url {
            var sent: [(String, String)] = []
            for header in headers {
                guard let colon = header.firstIndex(of: ":") else { throw ValidationError("--header '\(header)': write 'Name: value'") }
                sent.append(
                    (
                        String(header[..<colon]).trimmingCharacters(in: .whitespaces),
                        String(header[header.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
                    ))
            }
            if let bearerEnv {
                guard let token = ProcessInfo.processInfo.environment[bearerEnv], !token.isEmpty else {
                    throw ValidationError("--bearer-env \(bearerEnv): the variable is not set")
                }
                sent.append(("Authorization", "Bearer \(token)"))
            }
            let count = pages.flatMap { Int($0) } ?? 3
            let samples = try PipelineDraft.samples(url: url, headers: sent, pages: count)
            let details = try PipelineDraft.details(of: samples, headers: sent, forEach: forEach)
            let drafted = name ?? PipelineDraft.name(from: url)
            return try PipelineDraft.infer(name: drafted, origin: .url(url, bearerEnv: bearerEnv), samples: samples, details: details)
        }
        let directory = pages ?? "."
        let samples = try PipelineDraft.samples(directory: directory, pages: 3)
        let drafted = name ?? PipelineDraft.identifier(URL(fileURLWithPath: directory).standardized.lastPathComponent)
        return try PipelineDraft.infer(name: drafted, origin: .directory(directory), samples: samples)
    }
}
