import Foundation
import Testing

/// The library's folders flow one way (docs/architecture.md): a folder uses only the folders
/// listed below it there. Read from the sources, as a reviewer would: folder A uses folder B when
/// a type declared in B appears as a whole word in A's code, comments and string literals left out.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct ArchitectureTests {
    /// The layers as docs/architecture.md numbers them, bottom first: the document is the order.
    static func declaredLayers() throws -> [String] {
        let text = try String(contentsOf: packageRoot.appendingPathComponent("docs/architecture.md"), encoding: .utf8)
        let item = try NSRegularExpression(pattern: #"^\d+\. `([A-Za-z/]+)`"#, options: .anchorsMatchLines)
        return item.matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap { match in
            Range(match.range(at: 1), in: text).map { String(text[$0]) }
        }
    }

    /// Every Swift file of the library, by folder (relative to Sources/Ingot), comments and
    /// string literals stripped.
    static func sources() throws -> [String: [(file: String, code: String)]] {
        let root = packageRoot.appendingPathComponent("Sources/Ingot")
        var byFolder: [String: [(String, String)]] = [:]
        let files = FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil)
        while let url = files?.nextObject() as? URL {
            guard url.pathExtension == "swift" else { continue }
            let relative = url.deletingLastPathComponent().path.dropFirst(root.path.count).drop { $0 == "/" }
            byFolder[String(relative), default: []].append((url.lastPathComponent, strip(try String(contentsOf: url, encoding: .utf8))))
        }
        return byFolder
    }

    /// `code` without comments and string literals (multi-line ones included), so that a type
    /// named in a message or a doc comment is no dependency.
    static func strip(_ code: String) -> String {
        var out = code
        let patterns = [
            "\"\"\"[\\s\\S]*?\"\"\"",  // multi-line string literals
            "/\\*[\\s\\S]*?\\*/",  // block comments
            "//[^\\n]*",  // line comments
            "#?\"(?:\\\\.|[^\"\\\\\\n])*\"#?",  // string literals
        ]
        for pattern in patterns {
            let regex = try? NSRegularExpression(pattern: pattern)
            out = regex?.stringByReplacingMatches(in: out, range: NSRange(out.startIndex..., in: out), withTemplate: " ") ?? out
        }
        return out
    }

    @Test func everyFolderIsALayerAndUsesOnlyTheLayersBelowIt() throws {
        let layers = try Self.declaredLayers()
        #expect(layers.count >= 10, "docs/architecture.md lists the layers: \(layers)")
        let sources = try Self.sources()
        #expect(
            Set(sources.keys).subtracting(layers).isEmpty,
            "folders missing from docs/architecture.md: \(Set(sources.keys).subtracting(layers).sorted())")

        let owner = try Self.owners(sources)
        var violations: [String] = []
        for (folder, files) in sources {
            guard let rank = layers.firstIndex(of: folder) else { continue }
            for (name, home) in owner where home != folder {
                guard let homeRank = layers.firstIndex(of: home), homeRank > rank else { continue }
                let word = try NSRegularExpression(pattern: "\\b\(name)\\b")
                for (file, code) in files where word.firstMatch(in: code, range: NSRange(code.startIndex..., in: code)) != nil {
                    violations.append("\(folder)/\(file) uses \(name) from \(home), a layer above it")
                }
            }
        }
        #expect(violations.isEmpty, "\(violations.sorted().joined(separator: "\n"))")
    }

    /// The folder that declares each type.
    static func owners(_ sources: [String: [(file: String, code: String)]]) throws -> [String: String] {
        let declaration = try NSRegularExpression(
            pattern:
                #"^(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|open|package|internal|fileprivate|private|final|indirect|nonisolated)\s+)*(?:struct|class|enum|protocol|actor|typealias)\s+([A-Z]\w*)"#,
            options: .anchorsMatchLines)
        var owner: [String: String] = [:]
        for (folder, files) in sources {
            for (_, code) in files {
                for match in declaration.matches(in: code, range: NSRange(code.startIndex..., in: code)) {
                    if let range = Range(match.range(at: 1), in: code), owner[String(code[range])] == nil {
                        owner[String(code[range])] = folder
                    }
                }
            }
        }
        return owner
    }

    /// The two backends are siblings (docs/architecture.md, `Store/Staging`): what both use — the
    /// stage file, its folds, the SQLite statements it is built on — sits below them, and
    /// neither names a type of the other's folder (the layer order alone would let PostgreSQL's,
    /// listed above SQLite's, use it: its staged load once held a `SQLiteStore`).
    @Test func theBackendsUseNothingOfEachOther() throws {
        let sources = try Self.sources()
        let owner = try Self.owners(sources)
        var violations: [String] = []
        for (folder, other) in [("Store/PostgreSQL", "Store/SQLite"), ("Store/SQLite", "Store/PostgreSQL")] {
            #expect(sources[folder] != nil && sources[other] != nil, "\(folder) and \(other) are folders")
            for (name, home) in owner where home == other {
                let word = try NSRegularExpression(pattern: "\\b\(name)\\b")
                for (file, code) in sources[folder] ?? []
                where word.firstMatch(in: code, range: NSRange(code.startIndex..., in: code)) != nil {
                    violations.append("\(folder)/\(file) uses \(name) from \(other)")
                }
            }
        }
        #expect(violations.isEmpty, "\(violations.sorted().joined(separator: "\n"))")
    }

    /// The public surface stays small (the pipeline's types, and the Swift library's:
    /// `IngotDatabase`, `IngestReport`, `IngestError`, `IngotQueryError`, `IngotJSONEncoder`,
    /// `IngotDatabase.Write`, `IngotRule`, `Ref`, `Many`), and every public declaration — type, property, function, initializer, case — has a `///`
    /// comment. A ratchet: `maximum` is today's count; a new public type raises it knowingly
    /// (`Loading` replaced three options, `WriteResult` three properties of the store port,
    /// `LoadState`, `StagingMoment` and `RunBeginning` nine of its requirements, `SharedRunEnd`
    /// the tuple a shared run's end returned, `RowsToDelete` a second delete requirement: the
    /// library's delete by identity beside `write: replace`'s, `IngotTransaction` the handle of
    /// `IngotDatabase.write { tx in … }`, `IngotDatabase.Pagination` the `paginate:` of an ingest
    /// from a URL, `IdentityNotDeclared` the compiler's message for an entity without `identity`,
    /// `SourceEndSettlement` what an empty numbered page a joined job found settles).
    @Test func thePublicSurfaceIsSmallAndDocumented() throws {
        let maximum = 66
        let root = packageRoot.appendingPathComponent("Sources/Ingot")
        let declaration = try NSRegularExpression(
            pattern: #"^\s*public (?:final )?(?:struct|class|enum|protocol|actor|typealias) ([A-Z]\w*)"#, options: .anchorsMatchLines)
        let member = try NSRegularExpression(
            pattern:
                #"^\s*(?:@[\w.]+(?:\([^)]*\))?\s+)*public\s+(?:(?:final|static|class|override|mutating|nonisolated|indirect|convenience|required|lazy)\s+)*(?:private\(set\)\s+)?(?:func|var|let|init|subscript|case)\b"#
        )
        var types: [String] = []
        var undocumented: [String] = []
        let files = FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil)
        while let url = files?.nextObject() as? URL {
            guard url.pathExtension == "swift" else { continue }
            let lines = try String(contentsOf: url, encoding: .utf8).components(separatedBy: "\n")
            for (k, line) in lines.enumerated() {
                let whole = NSRange(line.startIndex..., in: line)
                let type = declaration.firstMatch(in: line, range: whole).flatMap { Range($0.range(at: 1), in: line) }
                guard type != nil || member.firstMatch(in: line, range: whole) != nil else { continue }
                if let type { types.append(String(line[type])) }
                var above = k - 1
                while above >= 0 && lines[above].trimmingCharacters(in: .whitespaces).hasPrefix("@") { above -= 1 }
                let comment = above >= 0 ? lines[above].trimmingCharacters(in: .whitespaces) : ""
                if !comment.hasPrefix("///") && !comment.hasSuffix("*/") {
                    undocumented.append("\(url.lastPathComponent):\(k + 1): \(line.trimmingCharacters(in: .whitespaces))")
                }
            }
        }
        #expect(types.count <= maximum, "\(types.count) public types: \(types.sorted().joined(separator: ", "))")
        #expect(undocumented.isEmpty, "public declarations without ///:\n\(undocumented.sorted().joined(separator: "\n"))")
    }

    /// The store port stays small (docs/stores.md, "Adding a backend"): `IngestStore` and the
    /// `IdentityLookups` it refines have at most 20 requirements together, and no default a
    /// conformer outside the package could not see (a `package` member in an extension of a
    /// public protocol is one such backend silently inherits).
    @Test func theStorePortHasAtMostTwentyRequirements() throws {
        let maximum = 20
        var requirements: [String] = []
        var hiddenDefaults: [String] = []
        for (file, name) in [("Store/IngestStore.swift", "IngestStore"), ("Resolve/BatchResolver.swift", "IdentityLookups")] {
            let text = try String(contentsOf: packageRoot.appendingPathComponent("Sources/Ingot/" + file), encoding: .utf8)
            let lines = text.components(separatedBy: "\n")
            var inside: String?
            for line in lines {
                if line.hasPrefix("public protocol \(name)") {
                    inside = "protocol"
                } else if line.hasPrefix("extension \(name) {") {
                    inside = "extension"
                } else if line == "}" {
                    inside = nil
                } else if inside == "protocol", line.hasPrefix("    "), !line.hasPrefix("     ") {
                    let code = line.trimmingCharacters(in: .whitespaces)
                    if code.hasPrefix("func ") || code.hasPrefix("var ") || code.hasPrefix("@discardableResult func ") {
                        requirements.append("\(name): \(code.prefix(60))")
                    }
                } else if inside == "extension", line.hasPrefix("    package ") {
                    hiddenDefaults.append("\(name): \(line.trimmingCharacters(in: .whitespaces).prefix(60))")
                }
            }
        }
        #expect(requirements.count >= 15, "the checker reads the protocols: \(requirements)")
        #expect(requirements.count <= maximum, "\(requirements.count) requirements:\n\(requirements.joined(separator: "\n"))")
        #expect(hiddenDefaults.isEmpty, "package-only defaults on a public protocol:\n\(hiddenDefaults.joined(separator: "\n"))")
    }

    /// The whole contract a complete backend implements (docs/stores.md, "Adding a backend"): the
    /// store port and every protocol beside it that a backend conforms to — the backend itself,
    /// its reader, shared runs, held transactions, kept prints and answers. A ratchet: lower it
    /// when a requirement becomes a fact of a type, never raise it.
    @Test func theWholeBackendContractIsHeld() throws {
        let maximum = 61
        let protocols = [
            ("Store/IngestStore.swift", "IngestStore"), ("Resolve/BatchResolver.swift", "IdentityLookups"),
            ("Store/StoreBackend.swift", "StoreBackend"), ("Store/StoreBackend.swift", "RowReader"),
            ("Store/SharedRun.swift", "SharedRunStore"), ("Store/SharedRun.swift", "SharedRun"),
            ("Store/HeldTransaction.swift", "HeldTransaction"), ("Store/PrintKeeping.swift", "PrintKeeping"),
            ("Store/AnswerKeeping.swift", "AnswerKeeping"),
        ]
        var requirements: [String] = []
        for (file, name) in protocols {
            let text = try String(contentsOf: packageRoot.appendingPathComponent("Sources/Ingot/" + file), encoding: .utf8)
            var inside = false
            var found = false
            for line in text.components(separatedBy: "\n") {
                if let declared = line.firstMatch(of: /^(?:public |package )?protocol (\w+)/), declared.1 == name {
                    inside = true
                    found = true
                } else if line == "}" {
                    inside = false
                } else if inside, line.hasPrefix("    "), !line.hasPrefix("     ") {
                    let code = line.trimmingCharacters(in: .whitespaces)
                    let kinds = ["func ", "var ", "static func ", "static var ", "associatedtype ", "@discardableResult func "]
                    if kinds.contains(where: { code.hasPrefix($0) }) { requirements.append("\(name): \(code.prefix(60))") }
                }
            }
            #expect(found, "protocol \(name) is declared in \(file)")
        }
        #expect(requirements.count <= maximum, "\(requirements.count) requirements:\n\(requirements.joined(separator: "\n"))")
        #expect(requirements.count >= maximum - 10, "the checker reads the protocols: \(requirements.count)")
    }

    /// No suite runs its tests one at a time: each test makes its own database, files and
    /// servers, and one that waits on jobs or processes is bounded by `.hangGuard`, not by a time
    /// limit the suite's other tests could make it miss (docs/reliability.md, "Test levels"). A
    /// suite that must share something is a design to write down there first.
    @Test func noSuiteRunsItsTestsOneAtATime() throws {
        let tests = packageRoot.appendingPathComponent("Tests/IngotTests")
        let files = try FileManager.default.subpathsOfDirectory(atPath: tests.path).filter { $0.hasSuffix(".swift") }
        var bare: [String] = []
        var suites = 0
        for file in files {
            let text = try String(contentsOf: tests.appendingPathComponent(file), encoding: .utf8)
            for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let code = line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
                guard code.contains("@Suite") || code.contains("@Test(") else { continue }
                if code.contains("@Suite") { suites += 1 }
                if code.contains(".serialized") { bare.append("\(file):\(n + 1)") }
            }
        }
        #expect(bare.isEmpty, "serialized: \(bare)")
        #expect(suites > 50, "the check reads the suites")
    }

    /// Every ``symbol`` link of the sources' doc comments names a declaration (scripts/doclinks.py,
    /// also run by `make lint`): a renamed or removed member leaves no stale link behind.
    @Test func theDocCommentsLinksNameDeclarations() throws {
        let process = Process()
        process.executableURL = python3
        process.arguments = [packageRoot.appendingPathComponent("scripts/doclinks.py").path]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        let stale = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "stale symbol links:\n\(stale)")
    }

    /// The checker sees an edge where there is one: a lower layer naming an upper one's type is
    /// caught, a name in a comment or a string is not.
    /// The functions of `text` (and initializers) longer than `limit` lines, from their
    /// declaration to their closing brace, with their first line: braces in comments and string
    /// literals (multi-line ones too) are not counted.
    static func longFunctions(in text: String, over limit: Int) -> [(line: Int, lines: Int)] {
        let declaration = try? NSRegularExpression(
            pattern:
                #"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|package|private|fileprivate|internal|static|class|mutating|nonmutating|override|final|nonisolated|convenience|required)\s+)*(?:func\s|init[(<?])"#
        )
        let literal = try? NSRegularExpression(pattern: #""(?:\\.|[^"\\])*""#)
        var found: [(line: Int, lines: Int)] = []
        var open: (line: Int, depth: Int)?
        var depth = 0
        var inMultiline = false
        for (index, raw) in text.components(separatedBy: "\n").enumerated() {
            if raw.components(separatedBy: "\"\"\"").count % 2 == 0 {
                inMultiline.toggle()
                continue
            }
            if inMultiline { continue }
            var line = raw
            if let literal {
                line = literal.stringByReplacingMatches(in: line, range: NSRange(line.startIndex..., in: line), withTemplate: "")
            }
            if let comment = line.range(of: "//") { line = String(line[..<comment.lowerBound]) }
            let declares = declaration.map { $0.firstMatch(in: line, range: NSRange(line.startIndex..., in: line)) != nil } ?? false
            // A declaration whose body never opened was a protocol's requirement.
            if let started = open, depth == started.depth, declares { open = nil }
            if open == nil, declares, line.contains("{") || !line.contains("}") {
                open = (index, depth)
            }
            for character in line {
                if character == "{" { depth += 1 }
                if character == "}" {
                    depth -= 1
                    if let started = open, depth < started.depth { open = nil }
                    if let started = open, depth == started.depth {
                        if index - started.line + 1 > limit { found.append((started.line + 1, index - started.line + 1)) }
                        open = nil
                    }
                }
            }
        }
        return found
    }

    /// Files a reader can hold (docs/architecture.md, "The contracts between layers"): none in
    /// Sources/ over 600 lines; a file that grows past it is split by role (an extension per
    /// concern, a value of its own), not by line count.
    @Test func noSourceFileIsOverSixHundredLines() throws {
        let root = packageRoot.appendingPathComponent("Sources")
        var long: [String] = []
        var read = 0
        let files = FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil)
        while let url = files?.nextObject() as? URL {
            guard url.pathExtension == "swift" else { continue }
            read += 1
            let lines = try String(contentsOf: url, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false).count
            if lines > 600 { long.append("\(url.path.dropFirst(root.path.count + 1)) (\(lines) lines)") }
        }
        #expect(long.isEmpty, "\(long)")
        #expect(read > 100, "the check reads the sources")
    }

    /// The writer stage is a coordinator of small values (docs/architecture.md, "The writer
    /// stage"): one file under 300 lines, no extension elsewhere reading its state, and every
    /// stored variable of it private (set).
    @Test func theWriterStageKeepsItsStateToItself() throws {
        let sources = packageRoot.appendingPathComponent("Sources/Ingot")
        let file = sources.appendingPathComponent("Pipeline/WriterStage.swift")
        let text = try String(contentsOf: file, encoding: .utf8)
        #expect(text.filter { $0 == "\n" }.count < 300)
        let variables = text.split(separator: "\n").filter { $0.hasPrefix("    var ") || $0.hasPrefix("    let ") }
        // Computed properties (`var x: T { … }`) read state; stored ones are private, but the
        // three the other queues read (the queue, the exchange flag, the prints' stop flag).
        let stored = variables.filter { !$0.hasSuffix("}") && !$0.hasSuffix("{") }
        #expect(
            stored.map { $0.split(separator: " ")[1].trimmingCharacters(in: [":"]) }.sorted()
                == ["defersBatches", "printsOff", "queue"], "\(stored)")
        var extensions: [String] = []
        let files = FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)
        while let url = files?.nextObject() as? URL {
            if url.pathExtension == "swift", try String(contentsOf: url, encoding: .utf8).contains("extension WriterStage") {
                extensions.append(url.lastPathComponent)
            }
        }
        #expect(extensions.isEmpty, "\(extensions)")
    }

    /// Short functions (docs/architecture.md, "The contracts between layers"): at most 9 in
    /// Sources/ longer than 60 lines, none in Pipeline/ longer than 100. A ratchet: lower it when
    /// a long function is split, never raise it.
    @Test func longFunctionsAreFewAndNoneInThePipelineIsVeryLong() throws {
        let root = packageRoot.appendingPathComponent("Sources")
        var long: [String] = []
        var veryLongInPipeline: [String] = []
        let files = FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil)
        while let url = files?.nextObject() as? URL {
            guard url.pathExtension == "swift" else { continue }
            let text = try String(contentsOf: url, encoding: .utf8)
            for function in Self.longFunctions(in: text, over: 60) {
                long.append("\(url.path.dropFirst(root.path.count + 1)):\(function.line) (\(function.lines) lines)")
                if url.path.contains("/Pipeline/") && function.lines > 100 { veryLongInPipeline.append(long[long.count - 1]) }
            }
        }
        #expect(long.count <= 9, "functions over 60 lines: \(long.count)\n\(long.sorted().joined(separator: "\n"))")
        #expect(veryLongInPipeline.isEmpty, "\(veryLongInPipeline)")
        // The counter counts: a function of 61 lines is long, one of 60 is not.
        let body = Array(repeating: "        x += 1", count: 58).joined(separator: "\n")
        #expect(Self.longFunctions(in: "    func f() {\n\(body)\n    }", over: 60).isEmpty)
        #expect(Self.longFunctions(in: "    func f() {\n\(body)\n        x += 1\n    }", over: 60).map(\.lines) == [61])
        // A protocol's requirements have no body: the next type's function is not counted from them.
        let requirements = "protocol P {\n    func a()\n    func b() throws -> Int\n}\n"
        #expect(Self.longFunctions(in: requirements + "struct S {\n\(body)\n    func g() {\n        x += 1\n    }\n}", over: 60).isEmpty)
    }

    @Test func theCheckerSeesCodeNotCommentsOrStrings() {
        let code = Self.strip(
            """
            // PipelineRunner in a comment
            let message = "PipelineRunner in a string"
            /* PipelineRunner */ let runner: PipelineRunner
            """)
        #expect(code.components(separatedBy: "PipelineRunner").count == 2, "only the declaration's type is left: \(code)")
    }
}
