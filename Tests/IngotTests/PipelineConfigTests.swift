import Foundation
import Testing

@testable import Ingot

/// Pipeline files are validated before anything runs; errors point at `file:line:column`.
struct PipelineConfigTests {
    private func error(_ yaml: String) -> String? {
        do {
            _ = try PipelineConfig.parse(text: yaml, path: "p.yml")
            return nil
        } catch {
            return error.description
        }
    }

    private let base = """
        version: 1
        name: t
        root: a
        entities:
          a:
            identity: id
            attributes: {id: integer}

        """

    @Test func readsTheBundledPeoplePipeline() throws {
        let config = try PipelineConfig.load(path: packageRoot.appendingPathComponent("pipelines/people.yml").path)
        #expect(config.root == "person")
        #expect(config.recordsPath == ["results"])
        #expect(config.model["person"]?.attribute(named: "country")?.key == "origin.country.name")
        #expect(config.model["person"]?.relationships == [Relationship(name: "dogs", target: "dog", isToMany: true)])
    }

    @Test func unknownKey() {
        #expect(error(base + "    colour: red\n") == "p.yml:8:5: unknown key 'colour'; expected one of table, identity, key_delimiter, attributes, relationships")
    }

    @Test func wrongType() {
        #expect(error(base.replacingOccurrences(of: "{id: integer}", with: "{id: int}"))
            == "p.yml:7:22: unknown attribute type 'int'; expected integer, double, string, bool, date or json")
        #expect(error(base.replacingOccurrences(of: "version: 1", with: "version: one")) == "p.yml:1:10: expected an integer")
    }

    @Test func identityNamingNoAttribute() {
        #expect(error(base.replacingOccurrences(of: "identity: id", with: "identity: uid")) == "p.yml:6:15: identity 'uid' names no attribute of entity 'a'")
    }

    @Test func relationshipToAMissingEntity() {
        #expect(error(base + "    relationships:\n      b: {to: nowhere}\n")
            == "p.yml:9:7: relationship 'b' points to entity 'nowhere', which is not declared")
    }

    @Test func invalidSQLIdentifier() {
        #expect(error(base.replacingOccurrences(of: "{id: integer}", with: "{id: integer, \"first name\": string}"))
            == "p.yml:7:31: attribute name 'first name' is not a valid SQL identifier ([A-Za-z_][A-Za-z0-9_]*)")
        #expect(error(base + "    table: \"a; DROP TABLE x\"\n")
            == "p.yml:8:12: table name 'a; DROP TABLE x' is not a valid SQL identifier ([A-Za-z_][A-Za-z0-9_]*)")
    }

    @Test func tooManyColumnsAreRefused() {
        let attributes = (0..<128).map { "c\($0): string" }.joined(separator: ", ")
        let wide = base.replacingOccurrences(of: "{id: integer}", with: "{id: integer, \(attributes)}")
        #expect(error(wide) == "p.yml:5:3: entity 'a' has 129 columns (attributes and to-one keys); at most 128 are supported")
        let fits = base.replacingOccurrences(of: "{id: integer}", with: "{id: integer, \((0..<127).map { "c\($0): string" }.joined(separator: ", "))}")
        #expect(error(fits) == nil)
    }

    @Test func rootMustBeDeclared() {
        #expect(error(base.replacingOccurrences(of: "root: a", with: "root: b")) == "p.yml:3:7: root entity 'b' is not declared under entities")
    }

    @Test func invalidYAML() {
        #expect(error("version: 1\nname: [unclosed\n")?.hasPrefix("p.yml:3:1: invalid YAML") == true)
    }

    @Test func schemaFollowsTheNamingRules() throws {
        let config = try PipelineConfig.load(path: packageRoot.appendingPathComponent("pipelines/people.yml").path)
        let ddl = Store.schema(of: config.model)
        #expect(ddl.contains(#"CREATE UNIQUE INDEX IF NOT EXISTS "person_identity" ON "person"("id")"#))
        #expect(ddl.contains(#"CREATE TABLE IF NOT EXISTS "person_dogs" ("person_id" INTEGER NOT NULL, "dog_id" INTEGER NOT NULL, PRIMARY KEY ("person_id", "dog_id")) WITHOUT ROWID"#))
    }

    @Test func httpSourcesAreValidated() throws {
        let http = base.replacingOccurrences(of: "root: a", with: """
            root: a
            source:
              http:
                url: https://api.example.org/items
                paginate: {offset: {param: offset, limit_param: limit, limit: 50, total: meta.count}}
                concurrency: 4
                auth: {api_key: {query: key, env: ITEMS_KEY}}
            """)
        let config = try PipelineConfig.parse(text: http, path: "p.yml")
        guard case .http(let source) = config.source else {
            Issue.record("expected an http source")
            return
        }
        #expect(source.paginate == .offset(param: "offset", limitParam: "limit", limit: 50, total: ["meta", "count"]))
        #expect(source.auth == .apiKeyQuery(param: "key", env: "ITEMS_KEY"))
        #expect(source.concurrency == 4)

        #expect(error(http.replacingOccurrences(of: "https://api.example.org/items", with: "ftp://x")) == "p.yml:6:10: url must be an absolute http(s) URL")
        #expect(error(http.replacingOccurrences(of: "    concurrency: 4", with: "    headers: {Authorization: Bearer abc}"))
            == "p.yml:8:15: put credentials under auth (read from the environment), not in headers")
        #expect(error(http.replacingOccurrences(of: "{offset: {param", with: "{pages: {param"))?.hasPrefix("p.yml:7:16: unknown key 'pages'") == true)
    }
}
