import Foundation
import Testing

@testable import Ingot

/// URLs and secrets on the fetch side (hardening round 2, items 6 and 11).
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
        let escaped = FetchRules.escapingInvalid(target)
        let absolute = URL(string: escaped, relativeTo: URL(string: "http://h.test/start"))?.absoluteString
        #expect(absolute == expected)
    }
}

/// Secrets stay secret whatever their shape (hardening round 2, item 6).
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

    @Test(arguments: [("tok\r\nX-Evil: 1", false), ("tok\u{0}", false), ("t\tok", false), ("tok3n-value\n", true), ("tok3n-value\r\n", true)])
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
