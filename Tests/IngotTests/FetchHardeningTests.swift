import Foundation
import Testing

@testable import Ingot

/// URLs and secrets on the fetch side.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct FetchHardeningTests {
    /// A redirect or next URL is used as the server sent it: escapes kept, only what a URL
    /// cannot hold encoded (once).
    @Test(arguments: [
        ("/a%2Fb c?q=%20x y", "http://h.test/a%2Fb%20c?q=%20x%20y"),
        ("/files/100%?p=%2", "http://h.test/files/100%25?p=%252"),
        ("/caf\u{E9}%2F", "http://h.test/caf%C3%A9%2F"),
        ("https://h.test/plain?a=1&b=%7E", "https://h.test/plain?a=1&b=%7E"),
    ])
    func aURLFromAResponseIsEscapedOnce(target: String, expected: String) throws {
        let escaped = URLText.escapingInvalid(target)
        let absolute = URLText.resolve(escaped, against: "http://h.test/start")
        #expect(absolute == expected)
    }
}

/// Secrets stay secret whatever their shape.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct SecretShapeTests {
    @Test(arguments: [
        ("postgresql://ingot:s3cretpw@db:5432/people", ["s3cretpw"]),
        ("POSTGRESQL://ingot:s3cret%40pw@db1:5432,db2:5433/people", ["s3cret%40pw", "s3cret@pw"]),
        ("postgres://db/people?user=ingot&password=s3cretpw&sslmode=disable", ["s3cretpw"]),
        ("postgresql://db/people?PassWord=s3cretpw", ["s3cretpw"]),
        ("host=db user=ingot password='s3cret pw' dbname=people", ["s3cret pw"]),
        ("host=db password = s3cretpw dbname=people", ["s3cretpw"]),
    ])
    func everyFormOfADatabasePasswordIsRedacted(url: String, secrets: [String]) {
        #expect(Set(Redactor.databaseSecrets(url)).isSuperset(of: secrets), "\(Redactor.databaseSecrets(url))")
        let shown = StoreLocation(postgresURL: url)
        for secret in secrets { #expect(!shown.contains(secret), "\(shown)") }
        #expect(shown.contains("REDACTED"))
    }

    @Test func aShortSecretIsRedactedAsATokenNeverLetterByLetter() {
        let redactor = Redactor(["h"])
        #expect(redactor.scrub("http://host/x?t=h&u=2") == "http://host/x?t=REDACTED&u=2")
        let long = Redactor(["abcd1234"])
        #expect(long.scrub("tokenabcd1234x") == "tokenREDACTEDx")
    }

    @Test func aMalformedDatabaseURLIsAConfigurationErrorWithoutItsPassword() throws {
        do {
            _ = try PGConnection(url: "postgresql://ingot:hunter2pw@db:notaport/people")
            Issue.record("connected")
        } catch {
            #expect(RunSummary.FailureKind(error) == .configuration)
            #expect(!"\(error)".contains("hunter2pw"), "\(error)")
        }
        let cli = try runIngot(["run", "pipelines/people.yml", "--db", "postgresql://ingot:hunter2pw@db:notaport/people", "--no-archive"])
        #expect(cli.status == 2, "\(cli.stderr)")
        #expect(!(cli.stderr + cli.stdout).contains("hunter2pw"))
    }

    @Test func libpqsOwnMessagesAreScrubbed() throws {
        // Nothing listens on port 1: libpq's message names the target; the password never shows.
        do {
            _ = try PGConnection(url: "postgresql://ingot:hunter2pw@127.0.0.1:1/people?connect_timeout=2&password=hunter2pw")
            Issue.record("connected")
        } catch {
            #expect(RunSummary.FailureKind(error) == .temporary)
            #expect(!"\(error)".contains("hunter2pw"), "\(error)")
        }
    }

    @Test(arguments: [
        ("tok\r\nX-Evil: 1", false), ("tok\u{0}", false), ("t\tok", false), ("tok3n-value\n", true), ("tok3n-value\r\n", true),
    ])
    func controlCharactersInASecretAreRefusedNamingTheVariable(value: String, accepted: Bool) throws {
        let config = HTTPSourceConfig(url: "https://api.example.org/x", auth: .bearer(env: "API_TOKEN"))
        do {
            let credentials = try Credentials(config: config, environment: ["API_TOKEN": value])
            #expect(accepted)
            #expect(credentials.headers.contains { $0.0 == "Authorization" && $0.1 == "Bearer tok3n-value" })
        } catch {
            #expect(!accepted)
            #expect(error.isConfiguration && RunSummary.FailureKind(error) == .configuration)
            #expect(error.message.contains("API_TOKEN") && !error.description.contains("tok"), "\(error)")
        }
    }
}

extension StoreLocation {
    /// How `url` is shown (logs, `--dry-run`).
    init(postgresURL url: String) { self = .postgres(url: url) }
    func contains(_ text: String) -> Bool { description.contains(text) }
}

/// A `${VAR}` in a URL's path or query is a secret wherever the URL goes: logs, the run's error,
/// the archive's sources, `_ingot_rejects.source`, the resume state in `_ingot_runs`.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct URLSecretTests {
    static let tenant = "tenant-7f3a9c01"

    @Test func aVariableInTheURLReachesNoLogRowArchiveOrState() throws {
        let server = try FixtureServer()
        let tenant = URLSecretTests.tenant
        // Page 1 (one item) points at page 2, which carries the tenant too and is not JSON: a
        // rejected page, then a failure (its next URL is unknown), each naming a URL.
        let next = "\(server.base)/hostile/items?page=2&tenant=\(tenant)"
        let to = next.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? next
        let config = try PipelineConfig.parse(
            text: """
                version: 1
                name: tenant
                source:
                  http:
                    url: "\(server.base)/hostile/next?tenant=${TENANT}&to=\(to)"
                    paginate: {next_url: next}
                    retry: {attempts: 1}
                records: results
                root: item
                entities: {item: {identity: id, attributes: {id: integer, name: string}}}
                """, path: "tenant.yml", environment: ["TENANT": tenant])
        let http = try #require(config.source.http)
        #expect(http.urlSecrets == [tenant])
        let dir = temporaryDirectory()
        var options = RunOptions()
        options.databasePath = dir.appendingPathComponent("t.db").path
        options.archiveDirectory = dir.appendingPathComponent("archives").path
        options.progressInterval = 0
        let logs = LogCapture()
        let source = try HTTPPageSource(config: http, framing: config.framing, environment: [:], logger: logs.logger)
        let summary = PipelineRunner(config: config, options: options, logger: logs.logger).run(source: source)

        #expect(summary.status == .failed)
        #expect(summary.counters.rejectedPages == 1)
        #expect(try rows(options.databasePath, "SELECT count(*) FROM item") == [["1"]])
        #expect(summary.error?.contains("REDACTED") == true && summary.error?.contains(tenant) == false, "\(summary.error ?? "")")
        #expect(!logs.all.joined().contains(tenant) && logs.all.joined().contains("REDACTED"))
        let sources = try rows(options.databasePath, "SELECT source FROM _ingot_rejects").joined().joined()
        #expect(sources.contains("REDACTED") && !sources.contains(tenant), "\(sources)")
        let archive = try ArchiveReader(path: try #require(summary.archive))
        #expect(archive.entries.count == 2)
        for entry in archive.entries { #expect(!entry.metadata.source.contains(tenant), "\(entry.metadata.source)") }
        for suffix in ["", "-wal"] {
            let bytes = FileManager.default.contents(atPath: options.databasePath + suffix) ?? Data()
            #expect(bytes.range(of: Data(tenant.utf8)) == nil, "no byte of the tenant in \(options.databasePath + suffix)")
        }
    }

    /// A `${VAR}` in the path of `defaults.http.url` stays secret in the URLs of resources with a
    /// relative `url:` — ASCII, and a non-ASCII value that a URL holds percent-encoded — in
    /// `--dry-run`, the logs, the error, the resume state, the rejects and the archive.
    @Test(arguments: [URLSecretTests.tenant, URLSecretTests.tenant + "-m\u{FC}ller"])
    func aBaseURLsVariableStaysSecretInRelativeResources(tenant: String) throws {
        let server = try FixtureServer()
        let inURL = URLText.percentEncoded(tenant, keeping: URLText.isUnreserved)
        let next = URLText.formEncoded("\(server.base)/t/\(inURL)/hostile/items?page=2")
        let dir = temporaryDirectory()
        let yml = dir.appendingPathComponent("t.yml").path
        try """
        version: 1
        name: tenant
        defaults: {http: {url: "\(server.base)/t/${TENANT}/", retry: {attempts: 1}}}
        resources:
          - name: items
            source: {http: {url: "hostile/next?to=\(next)", paginate: {next_url: next}}}
            records: results
            root: item
        entities: {item: {identity: id, attributes: {id: integer, name: string}}}
        """.write(toFile: yml, atomically: false, encoding: .utf8)
        let db = dir.appendingPathComponent("t.db").path
        let archives = dir.appendingPathComponent("archives").path
        let environment = ["TENANT": tenant]
        let dry = try runIngot(["run", yml, "--dry-run", "--db", db], environment: environment)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("/t/REDACTED/hostile/next"), "\(dry.stdout)")
        let run = try runIngot(["run", yml, "--db", db, "--archive-dir", archives], environment: environment)
        #expect(run.status == 1, "\(run.stderr)")
        let shown = dry.stdout + dry.stderr + run.stdout + run.stderr
        #expect(shown.contains("/t/REDACTED/hostile/items"), "\(shown)")
        for form in [tenant, inURL, inURL.lowercased()] { #expect(!shown.contains(form), "\(form) in \(shown)") }
        #expect(try rows(db, "SELECT count(*) FROM item") == [["1"]])
        let stored = try rows(db, "SELECT coalesce(group_concat(source), '') FROM _ingot_rejects").joined().joined()
        #expect(stored.contains("/t/REDACTED/"), "\(stored)")
        let files = try FileManager.default.contentsOfDirectory(atPath: archives)
        #expect(!files.isEmpty)
        for file in files {
            for entry in try ArchiveReader(path: archives + "/" + file).entries {
                #expect(!entry.metadata.source.contains(inURL) && !entry.metadata.source.contains(tenant), "\(entry.metadata.source)")
            }
        }
        for suffix in ["", "-wal"] {
            let bytes = FileManager.default.contents(atPath: db + suffix) ?? Data()
            for form in [tenant, inURL] { #expect(bytes.range(of: Data(form.utf8)) == nil, "\(form) in \(db + suffix)") }
        }
    }

    /// A secret is hidden in the forms a URL holds it in: RFC 3986's percent-encoding with upper-
    /// and lower-case hex, as a server that echoes a token URL-encoded writes it.
    @Test(arguments: ["echo-encoded", "echo-encoded-lower"])
    func aTokenEchoedURLEncodedIsRedacted(route: String) throws {
        let token = "tok+en/val=ue~x"
        let redactor = Redactor([token])
        #expect(redactor.scrub("a tok%2Ben%2Fval%3Due~x b tok%2ben%2fval%3due~x") == "a REDACTED b REDACTED")
        #expect(Redactor(["m\u{FC}ller-x"]).scrub("/t/m%C3%BCller-x/ /t/m%c3%bcller-x/") == "/t/REDACTED/ /t/REDACTED/")
        let server = try FixtureServer()
        let config = try PipelineConfig.parse(
            text: """
                version: 1
                name: echo
                source: {http: {url: "\(server.base)/hostile/\(route)", auth: {bearer_env: TOKEN}, retry: {attempts: 1}}}
                records: results
                root: item
                entities: {item: {identity: id, attributes: {id: integer}}}
                """, path: "echo.yml")
        let http = try #require(config.source.http)
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("e.db").path
        options.progressInterval = 0
        let logs = LogCapture()
        let source = try HTTPPageSource(config: http, framing: config.framing, environment: ["TOKEN": token], logger: logs.logger)
        let summary = PipelineRunner(config: config, options: options, logger: logs.logger).run(source: source)
        #expect(summary.status == .failed)
        let everything = logs.all.joined(separator: "\n") + (summary.error ?? "")
        #expect(everything.contains("given=REDACTED") || everything.contains("Bearer%20REDACTED"), "\(everything)")
        for form in ["tok%2Ben", "tok%2ben", token] { #expect(!everything.contains(form), "\(form) in \(everything)") }
    }

    @Test func dryRunShowsTheURLWithoutIt() throws {
        let yml = temporaryDirectory().appendingPathComponent("t.yml").path
        try """
        version: 1
        name: t
        source: {http: {url: "https://api.test/t/${TENANT}/items"}}
        root: a
        entities: {a: {identity: id, attributes: {id: integer}}}
        """.write(toFile: yml, atomically: false, encoding: .utf8)
        let (status, out, err) = try runIngot(
            ["run", yml, "--dry-run", "--db", yml + ".db"], environment: ["TENANT": URLSecretTests.tenant])
        #expect(status == 0, "\(err)")
        #expect(out.contains("source: http https://api.test/t/REDACTED/items"), "\(out)")
        #expect(!(out + err).contains(URLSecretTests.tenant))
    }

    /// The resume state stores `⟨secret N⟩` for each secret, and a resume puts the value of its
    /// own environment back: the URL fetched is the real one.
    @Test func aResumeStateHoldsAMarkerAndResumesWithTheRealValue() throws {
        var config = HTTPSourceConfig(url: "https://h.test/t/\(URLSecretTests.tenant)/items")
        config.urlSecrets = [URLSecretTests.tenant]
        config.paginate = .nextURL(path: JSONKeyPath(keys: ["next"]))
        let cursor = HTTPPageSource.Cursor.url("https://h.test/t/\(URLSecretTests.tenant)/items?page=2")
        let state = cursor.state(hiding: config.urlSecrets)
        #expect(state == "url:https://h.test/t/⟨secret 0⟩/items?page=2")
        #expect(HTTPPageSource.Cursor(state: state, secrets: config.urlSecrets) == cursor)
    }
}
