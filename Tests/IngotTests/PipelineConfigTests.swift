import Foundation
import Testing

@testable import Ingot

/// Pipeline files are validated before anything runs; errors point at `file:line:column`.
struct PipelineConfigTests {
    /// pipelines/people-http.yml (the image's HTTP example) maps exactly like pipelines/people.yml:
    /// the container test checks it against the same expected state, so the two must not drift.
    @Test func httpPeoplePipelineMatchesTheFileOne() throws {
        let files = try PipelineConfig.load(path: packageRoot.appendingPathComponent("pipelines/people.yml").path)
        let http = try PipelineConfig.load(
            path: packageRoot.appendingPathComponent("pipelines/people-http.yml").path,
            environment: ["PEOPLE_API": "http://127.0.0.1:9"])
        #expect(http.model == files.model)
        #expect(http.recordsPath == files.recordsPath)
        #expect(http.write == files.write)
        guard case .http(let source) = http.source else {
            Issue.record("people-http.yml has no http source")
            return
        }
        #expect(source.url == "http://127.0.0.1:9/people/next")
    }

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

    /// `base` with an HTTP source whose `http:` mapping holds `fields`.
    private func http(_ fields: String) -> String {
        base.replacingOccurrences(of: "root: a\n", with: "root: a\nsource:\n  http:\n    url: https://api.example.org/x\n" + fields)
    }

    /// A newcomer's slips get a "did you mean": a misspelt key, a type or date format another
    /// tool would write (`int`, `iso`), `next:` for `next_url`; every attribute problem of the
    /// model in one pass. A word near nothing expected gets no guess.
    @Test func nearMissesSayWhatWasMeant() {
        let model = modelProblems(
            "  a:\n    identity: id\n    atributes: {id: integer}\n")
        #expect(model.contains("unknown key 'atributes' (did you mean 'attributes'?)"), "\(model)")
        let types = modelProblems(
            "  a:\n    identity: id\n    attributes: {id: int, name: strng, seen: {type: date, format: iso}, x: {type: zzz}}\n")
        #expect(types.contains("unknown attribute type 'int' (did you mean 'integer'?)"), "\(types)")
        #expect(types.contains("unknown attribute type 'strng' (did you mean 'string'?)"), "\(types)")
        #expect(types.contains("date format 'iso' (did you mean 'iso8601'?)"), "\(types)")
        #expect(types.contains("unknown attribute type 'zzz'; expected"), "no guess for a word near nothing: \(types)")
        let paging =
            configProblems(
                """
                version: 1
                name: n
                source: {http: {url: "https://api.example.com/items", paginate: {next: next}}}
                root: a
                entities: {a: {identity: id, attributes: {id: integer}}}
                """) ?? ""
        #expect(paging.contains("unknown key 'next' (did you mean 'next_url'?)"), "\(paging)")
        #expect(NearMiss.distance("identitiy", "identity") == 1 && NearMiss.distance("atributes", "attributes") == 1)
        #expect(NearMiss.suggestion(for: "name", among: ["table", "identity"]) == nil)
    }

    /// A tab in a line's indentation is named as a tab (the parser said "found character that
    /// cannot start any token"); an entity's key dedented to the entities' level is named as
    /// that, not as the entity above it missing the key.
    @Test func tabsAndDedentedKeysAreNamed() {
        let tab =
            configProblems(
                "version: 1\nname: t\nrecords: results\nroot: a\nentities:\n  a:\n\tidentity: id\n    attributes: {id: integer}\n") ?? ""
        #expect(tab.hasPrefix("test.yml:7:1: a tab indents this line: YAML indents with spaces only"), "\(tab)")
        let dedented =
            configProblems(
                "version: 1\nname: t\nrecords: results\nroot: a\nentities:\n  a:\n    identity: id\n  attributes: {id: integer}\n") ?? ""
        #expect(dedented == "test.yml:8:3: 'attributes' is indented as an entity of its own: indent it under entity 'a'", "\(dedented)")
        // An entity that happens to be named like a key is an entity when it has attributes.
        #expect(
            configProblems(
                "version: 1\nname: t\nrecords: results\nroot: a\nentities:\n  a: {identity: id, attributes: {id: integer}}\n  table: {attributes: {n: integer}}\n"
            ) == nil)
    }

    @Test func numbersThatWouldOverflowAreRefusedWithTheirPlace() {
        #expect(
            error(http("    paginate: {page: {param: p, start: 9223372036854775807}}\n"))
                == "p.yml:7:40: start must be between 0 and 1000000000")
        #expect(
            error(http("    paginate: {offset: {param: o, limit_param: l, limit: 9223372036854775807}}\n"))?
                .hasSuffix("limit must be between 1 and 1000000") == true)
        #expect(error(http("    timeout_s: 1e300\n")) == "p.yml:7:16: timeout_s must be a number of seconds above 0 and at most 86400")
        #expect(error(http("    retry: {attempts: 100000000}\n"))?.hasSuffix("attempts must be between 1 and 100") == true)
        #expect(error(http("    retry: {max_delay_ms: -5}\n"))?.hasSuffix("max_delay_ms must be between 0 and 3600000") == true)
        #expect(error(base + "max_page_bytes: 99999999999\n")?.hasSuffix("max_page_bytes must be between 1024 and 1073741824") == true)
    }

    @Test func allowedHostsAreHostsOnly() {
        #expect(error(http("    allowed_hosts: [cdn.example.org, \"files.example.org:8443\"]\n")) == nil)
        #expect(
            error(http("    allowed_hosts: [\"https://cdn.example.org/x\"]\n"))
                == "p.yml:7:21: allowed_hosts entry 'https://cdn.example.org/x' must be a host name or host:port, without scheme or path")
    }

    @Test func aPipelineFileOverOneMebibyteIsRefused() {
        let padded = base + "# " + String(repeating: "x", count: 1 << 20) + "\n"
        #expect(error(padded)?.hasPrefix("p.yml:1:1: the pipeline file is") == true)
    }

    @Test func environmentVariablesExpandInValuesWithDefaultsAndPlaces() throws {
        let text = """
            version: 1
            name: fallback
            source:
              http:
                url: https://${HOST}/v1/items?x=$${literal}
                headers: {X-Tenant: "${TENANT}", Accept: application/json}
                max_pages: ${PAGES:-7}
            root: a
            entities:
              a:
                identity: id
                attributes: {id: integer}
            """
        let config = try PipelineConfig.parse(text: text, path: "e.yml", environment: ["HOST": "api.example.org", "TENANT": "t-42"])
        #expect(config.name == "fallback")
        let http = try #require(config.source.http)
        #expect(http.url == "https://api.example.org/v1/items?x=${literal}")
        #expect(http.maxPages == 7)
        #expect(http.headers.first { $0.name == "X-Tenant" } == .init(name: "X-Tenant", value: "t-42", isSecret: true))
        #expect(http.headers.first { $0.name == "Accept" }?.isSecret == false)
        #expect(config.text == text, "the text kept (and archived) is the unexpanded one")
        do {
            _ = try PipelineConfig.parse(text: text, path: "e.yml", environment: ["TENANT": "x"])
            Issue.record("a missing variable must be refused")
        } catch {
            #expect(error.description == "e.yml:5:10: the environment variable HOST is not set (and ${HOST} has no :-default)")
        }
    }

    /// A replay has no environment: `${VAR}` outside `source:` would map it differently from its
    /// run, so it is refused there. `$${` stays a literal anywhere.
    @Test(arguments: ["name: ${NAME:-x}", "records: ${RECORDS}", "    attributes: {id: integer, n: {type: string, key: \"${K}\"}}"])
    func aVariableOutsideTheSourceIsRefused(line: String) throws {
        var text = """
            version: 1
            name: v
            source:
              http:
                url: https://${HOST}/items
            root: a
            entities:
              a:
                identity: id
                attributes: {id: integer}
            """
        if line.hasPrefix("name") {
            text = text.replacingOccurrences(of: "name: v", with: line)
        } else if line.hasPrefix("records") {
            text = text.replacingOccurrences(of: "root: a", with: "root: a\n" + line)
        } else {
            text = text.replacingOccurrences(of: "    attributes: {id: integer}", with: line)
        }
        do {
            _ = try PipelineConfig.parse(text: text, path: "v.yml", environment: ["HOST": "h.test", "NAME": "n", "RECORDS": "r", "K": "k"])
            Issue.record("${…} outside source: must be refused")
        } catch {
            #expect(error.description.contains("is read inside source: only"), "\(error)")
        }
        guard !line.hasPrefix("name") else { return }  // a literal '${' is no valid name
        let literal = text.replacingOccurrences(of: "${RECORDS", with: "$${RECORDS").replacingOccurrences(of: "\"${K}", with: "\"$${K}")
        #expect(throws: Never.self) { try PipelineConfig.parse(text: literal, path: "v.yml", environment: ["HOST": "h.test"]) }
    }

    /// A replay reads no source, so the variables of `source:` need not be set.
    @Test func aReplayReadsNoSourceAndNeedsNoVariable() throws {
        let text = """
            version: 1
            name: v
            source: {http: {url: "https://${HOST}/items", headers: {X-Tenant: "${TENANT}"}}}
            root: a
            entities: {a: {identity: id, attributes: {id: integer}}}
            """
        let config = try PipelineConfig.parse(text: text, path: "v.yml", environment: [:], readsSource: false)
        #expect(config.source == .none)
        #expect(config.model["a"] != nil)
    }

    /// What `${VAR}` puts in a URL's user info, path, query or fragment is a secret; a variable
    /// giving the scheme, host or port is not.
    @Test(arguments: [
        ("https://${HOST}/v1/items", [String]()),
        ("${API:-https://x.test}/v1/items", []),
        ("${API}/v1/items", []),
        ("https://${HOST}/t/${TENANT}/items?key=${KEY}#${FRAG}", ["tenant-42", "k-9", "frag"]),
        ("https://${USER}:${PASS}@${HOST}:8443/x", ["bob", "pa55word"]),
        ("${BASE}/items", ["/t/tenant-42?x=1"]),
    ])
    func theURLsPartsFromTheEnvironmentAreSecrets(url: String, secrets: [String]) throws {
        let environment = [
            "HOST": "h.test", "TENANT": "tenant-42", "KEY": "k-9", "FRAG": "frag", "USER": "bob", "PASS": "pa55word",
            "API": "https://api.test:8080", "BASE": "https://h.test/t/tenant-42?x=1",
        ]
        let config = try PipelineConfig.parse(
            text: """
                version: 1
                name: u
                source: {http: {url: "\(url)"}}
                root: a
                entities: {a: {identity: id, attributes: {id: integer}}}
                """, path: "u.yml", environment: environment)
        let http = try #require(config.source.http)
        #expect(http.urlSecrets == secrets)
        for secret in secrets { #expect(!http.shownURL.contains(secret), "\(http.shownURL)") }
        #expect(["h.test", "x.test", "api.test"].contains { http.shownURL.contains($0) }, "the host stays visible: \(http.shownURL)")
    }

    @Test func aSecretHeaderFromTheEnvironmentIsScrubbedFromWhatIsShown() throws {
        var config = HTTPSourceConfig(url: "https://api.example.org/x")
        config.headers = [.init(name: "X-Token", value: "tok-123456", isSecret: true)]
        let credentials = try Credentials(config: config, environment: [:])
        #expect(credentials.scrub("server said: bad token tok-123456") == "server said: bad token REDACTED")
    }

    @Test func unknownKey() {
        #expect(
            error(base + "    colour: red\n")
                == "p.yml:8:5: unknown key 'colour'; expected one of table, identity, key_delimiter, attributes, relationships, parent")
    }

    @Test func wrongType() {
        #expect(
            error(base.replacingOccurrences(of: "{id: integer}", with: "{id: int}"))
                == "p.yml:7:22: unknown attribute type 'int' (did you mean 'integer'?); expected integer, double, string, bool, date or json"
        )
        #expect(error(base.replacingOccurrences(of: "version: 1", with: "version: one")) == "p.yml:1:10: expected an integer")
    }

    @Test func identityNamingNoAttribute() {
        #expect(
            error(base.replacingOccurrences(of: "identity: id", with: "identity: uid"))
                == "p.yml:6:15: identity 'uid' names no attribute of entity 'a'")
    }

    @Test func relationshipToAMissingEntity() {
        #expect(
            error(base + "    relationships:\n      b: {to: nowhere}\n")
                == "p.yml:9:7: relationship 'b' points to entity 'nowhere', which is not declared")
    }

    @Test func invalidSQLIdentifier() {
        #expect(
            error(base.replacingOccurrences(of: "{id: integer}", with: "{id: integer, \"first name\": string}"))
                == "p.yml:7:31: attribute name 'first name' is not a valid SQL identifier ([A-Za-z_][A-Za-z0-9_]*)")
        #expect(
            error(base + "    table: \"a; DROP TABLE x\"\n")
                == "p.yml:8:12: table name 'a; DROP TABLE x' is not a valid SQL identifier ([A-Za-z_][A-Za-z0-9_]*)")
    }

    @Test func tooManyColumnsAreRefused() {
        let attributes = (0..<128).map { "c\($0): string" }.joined(separator: ", ")
        let wide = base.replacingOccurrences(of: "{id: integer}", with: "{id: integer, \(attributes)}")
        #expect(error(wide) == "p.yml:5:3: entity 'a' has 129 columns (attributes and to-one keys); at most 128 are supported")
        let fits = base.replacingOccurrences(
            of: "{id: integer}", with: "{id: integer, \((0..<127).map { "c\($0): string" }.joined(separator: ", "))}")
        #expect(error(fits) == nil)
    }

    @Test func rootMustBeDeclared() {
        #expect(
            error(base.replacingOccurrences(of: "root: a", with: "root: b")) == "p.yml:3:7: root entity 'b' is not declared under entities")
    }

    @Test func invalidYAML() {
        #expect(error("version: 1\nname: [unclosed\n")?.hasPrefix("p.yml:3:1: invalid YAML") == true)
    }

    @Test func schemaFollowsTheNamingRules() throws {
        let config = try PipelineConfig.load(path: packageRoot.appendingPathComponent("pipelines/people.yml").path)
        let ddl = SQLiteStore.schema(of: config.model)
        #expect(ddl.contains(#"CREATE UNIQUE INDEX IF NOT EXISTS "person_identity" ON "person"("id")"#))
        #expect(
            ddl.contains(
                #"CREATE TABLE IF NOT EXISTS "person_dogs" ("person_id" INTEGER NOT NULL, "dog_id" INTEGER NOT NULL, "#
                    + #"FOREIGN KEY ("person_id") REFERENCES "person" ("id") DEFERRABLE INITIALLY DEFERRED, "#
                    + #"FOREIGN KEY ("dog_id") REFERENCES "dog" ("id") DEFERRABLE INITIALLY DEFERRED, PRIMARY KEY ("person_id", "dog_id")) WITHOUT ROWID"#
            ))
    }

    @Test func httpSourcesAreValidated() throws {
        let http = base.replacingOccurrences(
            of: "root: a",
            with: """
                root: a
                source:
                  http:
                    url: https://api.example.org/items
                    paginate: {offset: {param: offset, limit_param: limit, limit: 50, total: meta.count}}
                    concurrency: 4
                    auth: {api_key: {query: key, env: ITEMS_KEY}}
                """)
        let config = try PipelineConfig.parse(text: http, path: "p.yml")
        let source = try #require(config.source.http)
        #expect(
            source.paginate == .offset(param: "offset", limitParam: "limit", limit: 50, total: .body(JSONKeyPath(keys: ["meta", "count"]))))
        #expect(source.auth == .apiKeyQuery(param: "key", env: "ITEMS_KEY"))
        #expect(source.concurrency == 4)

        #expect(
            error(http.replacingOccurrences(of: "https://api.example.org/items", with: "ftp://x"))
                == "p.yml:6:10: url must be an absolute http(s) URL")
        #expect(
            error(http.replacingOccurrences(of: "    concurrency: 4", with: "    headers: {Authorization: Bearer abc}"))
                == "p.yml:8:15: put credentials under auth (read from the environment), not in headers")
        #expect(
            error(http.replacingOccurrences(of: "{offset: {param", with: "{pages: {param"))?.contains("p.yml:7:16: unknown key 'pages'")
                == true)
    }
}

/// `--db` picks the backend: a path or `sqlite:` → SQLite, `postgresql://` → PostgreSQL.
struct StoreLocationTests {
    @Test func dbValuesNameTheirBackend() throws {
        #expect(try StoreLocation("people.db") == .sqlite(path: "people.db"))
        #expect(try StoreLocation("/data/a:b.db") == .sqlite(path: "/data/a:b.db"))
        #expect(try StoreLocation("sqlite:out/x.db") == .sqlite(path: "out/x.db"))
        #expect(try StoreLocation("sqlite:///data/x.db") == .sqlite(path: "/data/x.db"))
        #expect(try StoreLocation(":memory:") == .sqlite(path: ":memory:"))
        #expect(try StoreLocation("postgresql://ingot@127.0.0.1:5432/people") == .postgres(url: "postgresql://ingot@127.0.0.1:5432/people"))
        #expect(try StoreLocation("POSTGRES://h/db") == .postgres(url: "POSTGRES://h/db"))
        #expect(throws: StoreError.self) { try StoreLocation("mysql://h/db") }
        #expect(throws: StoreError.self) { try StoreLocation("sqlite:") }
        // Shown without the password.
        let shown = try StoreLocation("postgresql://ingot:s3cret@db:5432/people").description
        #expect(!shown.contains("s3cret") && shown.contains("db:5432/people"))
    }
}

/// YAML merge keys (`<<: *anchor`) in pipeline files.
struct MergeKeyTests {
    /// Shared attributes and source settings written once: the merged keys apply where the mapping
    /// does not set them itself; `x-` keys at the top hold anchors and are otherwise ignored.
    @Test func mergeKeysApplyAndOwnKeysWin() throws {
        let yaml = """
            version: 1
            name: swapi-transport
            x-http: &http {timeout_s: 10, max_pages: 5, concurrency: 2}
            source:
              http:
                <<: *http
                url: https://swapi.dev/api/starships/
                max_pages: 7
            records: results
            root: starship
            entities:
              starship:
                identity: url
                attributes: &transport {url: string, name: string, model: string}
              vehicle:
                identity: url
                attributes:
                  <<: [*transport, {vehicle_class: integer}]
                  vehicle_class: string
            """
        let config = try PipelineConfig.parse(text: yaml, path: "m.yml")
        let http = try #require(config.source.http)
        #expect(http.timeout == 10 && http.maxPages == 7 && http.concurrency == 2)
        let vehicle = try #require(config.model["vehicle"])
        #expect(vehicle.attributes.map(\.name).sorted() == ["model", "name", "url", "vehicle_class"])
        #expect(vehicle.attribute(named: "vehicle_class")?.type == .string, "the mapping's own key wins over a merged one")
    }

    /// A problem in a merged value is reported where the value is written (inside the anchor);
    /// a merge of something that is not a mapping is refused where it is.
    @Test func problemsInMergedValuesPointAtTheirText() {
        func error(_ yaml: String) -> String? {
            configProblems(yaml, path: "m.yml")
        }
        let bad = """
            version: 1
            name: m
            root: a
            entities:
              a:
                identity: id
                attributes: &shared {id: integer, when: {type: date, format: nonsense}}
              b:
                identity: id
                attributes: {<<: *shared}
            """
        #expect(error(bad)?.hasPrefix("m.yml:7:") == true, "\(error(bad) ?? "")")
        #expect(
            error("version: 1\nname: m\nroot: a\nentities:\n  a:\n    <<: 3\n    identity: id\n    attributes: {id: integer}")?
                .contains("a merge key (<<) takes a mapping") == true)
    }
}

/// `ingot validate` reports every problem it finds, not only the first.
struct EveryProblemTests {
    @Test func eachSectionsProblemAndTheModelsAreReportedInFileOrder() {
        let yaml = """
            version: 2
            name: many
            write: sometimes
            batch_records: 0
            root: item
            entities:
              item:
                identity: code
                attributes: {id: integer, when: {type: date, format: nonsense}}
            """
        do {
            _ = try PipelineConfig.parse(text: yaml, path: "v.yml")
            Issue.record("the file must be refused")
        } catch {
            let lines = "\(error)".components(separatedBy: "\n")
            #expect(lines.count >= 4, "\(error)")
            #expect(lines.first?.hasPrefix("v.yml:1:") == true)
            #expect(lines.contains { $0.hasPrefix("v.yml:3:") && $0.contains("write must be one of") })
            #expect(lines.contains { $0.hasPrefix("v.yml:4:") && $0.contains("batch_records") })
            #expect(lines.contains { $0.contains("code") }, "the model's problem: an identity that is no attribute")
            let order = lines.compactMap { Int($0.split(separator: ":")[1]) }
            #expect(order == order.sorted(), "in file order")
        }
    }

    /// Unknown keys do not stop a section: a file with seven mistakes — unknown keys at the top,
    /// in the source, in one entity and another, in a relationship of an entity whose
    /// `attributes:` is misspelt, and a wrong type — has all seven said in one pass, in file order.
    @Test func sevenMistakesAreSaidInOnePass() throws {
        let yaml = """
            version: 1
            name: seven
            colour: red
            source:
              http:
                url: https://api.example.org/items
                paginate: {next_url: next}
                timeut_s: 5
            records: results
            root: item
            batch_recods: 10
            entities:
              item:
                identity: id
                atributes: {id: integer}
                relationships:
                  owner: {to: user, kee: owner_id}
              user:
                identity: id
                attributes: {id: integer, name: strin}
                extra: 1
            """
        let problems = try #require(configProblems(yaml, path: "seven.yml"))
        let lines = problems.components(separatedBy: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        for (at, says) in [
            ("seven.yml:3:1:", "'colour'"), ("seven.yml:8:5:", "'timeut_s' (did you mean 'timeout_s'?)"),
            ("seven.yml:11:1:", "'batch_recods'"), ("seven.yml:15:5:", "'atributes' (did you mean 'attributes'?)"),
            ("seven.yml:17:25:", "'kee' (did you mean 'key'?)"), ("seven.yml:20:37:", "'strin'"), ("seven.yml:21:5:", "'extra'"),
        ] {
            #expect(lines.contains { $0.hasPrefix(at) && $0.contains(says) }, "\(at) \(says) in \(problems)")
        }
        let order = lines.compactMap { $0.split(separator: ":").dropFirst().first.flatMap { Int($0) } }
        #expect(order == order.sorted(), "in file order: \(problems)")
    }

    /// A resource that cannot be read is one problem, not two: no extra "no resource has a root
    /// entity" under it.
    @Test func aBadResourceIsOneProblem() throws {
        let bad = """
            version: 1
            name: r
            resources:
              - {name: list, source: {http: {url: "http://127.0.0.1/items", paginate: {bogus: 1}}}, records: ".", root: item}
            entities: {item: {identity: id, attributes: {id: integer}}}
            """
        let problems = try #require(configProblems(bad))
        #expect(!problems.contains("no resource has a root entity"), "\(problems)")
        #expect(problems.contains("4:"), "\(problems)")
    }

    /// `${VAR}` reaches a for_each pipeline's base URL (`defaults.http` is source configuration):
    /// PokeAPI's list → detail pipeline can be pointed at a mirror.
    @Test func aVariableReachesAForEachsBaseURL() throws {
        let yaml = """
            version: 1
            name: poke
            defaults: {http: {url: "${POKE_API:-https://pokeapi.co}/api/v2/"}}
            resources:
              - {name: list, source: {http: {url: pokemon}}, records: results}
              - {name: pokemon, for_each: {resource: list, path: "pokemon/{name}"}, records: ".", root: pokemon}
            entities:
              pokemon: {identity: id, attributes: {id: integer, name: string}}
            """
        let mirror = try PipelineConfig.parse(text: yaml, path: "poke.yml", environment: ["POKE_API": "http://127.0.0.1:9"])
        #expect(mirror.resources[1].forEach?.http.url == "http://127.0.0.1:9/api/v2/")
        let plain = try PipelineConfig.parse(text: yaml, path: "poke.yml", environment: [:])
        #expect(plain.resources[1].forEach?.http.url == "https://pokeapi.co/api/v2/")
        #expect(
            configProblems(yaml.replacingOccurrences(of: "\nname: poke\n", with: "\nname: ${NAME}\n"))?.contains(
                "is read inside source: only") == true)
    }

    /// A relationship's `values:` adds to its target identity's rules instead of replacing them:
    /// SWAPI's `homeworld: {to: planet, values: {"none": null}}` with `planet.id` read from the URL
    /// by `pattern:` rejected 36 of 37 species.
    @Test func aRelationshipsValuesKeepTheTargetsPattern() throws {
        let yaml = """
            version: 1
            name: species
            records: results
            root: species
            entities:
              species:
                identity: id
                attributes: {id: integer}
                relationships:
                  homeworld: {to: planet, values: {"none": null}}
              planet:
                identity: id
                attributes:
                  id: {type: integer, key: url, pattern: "/(\\\\d+)/$"}
            """
        let page = #"{"results": [{"id": 1, "homeworld": "https://swapi.dev/api/planets/14/"}, {"id": 2, "homeworld": "none"}]}"#
        let (summary, db) = try ingest(yaml, [page])
        #expect(summary.status == .finished && summary.counters.rejectedRecords == 0, "\(summary.counters.rejectsByReason)")
        #expect(try rows(db, "SELECT id, homeworld_id FROM species ORDER BY id") == [["1", "14"], ["2", "NULL"]])
        #expect(try rows(db, "SELECT id FROM planet") == [["14"]])
    }
}
