import Foundation
import Testing

@testable import Ingot

/// The mapping model's record shapes and write modes: root records
/// given as bare identities, to-ones assembled from sibling fields, insert-only and update-only
/// writes.
@Suite
struct MappingModelTests {
    static let people = """
        version: 1
        name: ids
        records: "."
        root: person
        entities:
          person:
            identity: id
            attributes: {id: integer, name: string}
        """

    /// The same on every backend.
    @Test(arguments: StoreConformanceTests.everyBackend)
    func bareIdentitiesOnEveryBackend(backend: StoreConformanceTests.Backend) throws {
        let harness = try StoreConformanceTests.harness(backend, yaml: Self.people)
        #expect(try harness.run([#"[{"id": 2, "name": "Bo"}]"#], 50).status == .finished)
        let summary = try harness.run([#"[1, 2, 3, "x"]"#], 50)
        #expect(summary.counters.entities["person"]?.stubs == 2 && summary.counters.rejectedRecords == 1)
        #expect(try harness.dump()["person"] == [["1", "NULL"], ["2", "Bo"], ["3", "NULL"]])
    }

    /// `[1, 2, 3]`: each a stub when no row has it, nothing when one does.
    @Test func rootRecordsGivenAsBareIdentitiesAreStubs() throws {
        let (first, db) = try ingest(Self.people, [#"[{"id": 2, "name": "Bo"}]"#])
        #expect(first.counters.inserted == 1)
        let (summary, _) = try ingest(Self.people, [#"[1, 2, 3, {"id": 4, "name": "Di"}, "x", null]"#], db: db)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(
            try rows(db, "SELECT id, coalesce(name, '-') FROM person ORDER BY id") == [
                ["1", "-"], ["2", "Bo"], ["3", "-"], ["4", "Di"],
            ])
        #expect(summary.counters.entities["person"]?.inserted == 3)
        #expect(summary.counters.entities["person"]?.stubs == 2, "1 and 3; 2 is kept as it was")
        #expect(summary.counters.updated == 0 && summary.counters.rejectedRecords == 2, "'x' is no integer; null no identity")
        let composite = Self.people.replacingOccurrences(of: "identity: id", with: "identity: [id, name]")
        let (refused, _) = try ingest(composite, [#"[1]"#])
        #expect(refused.counters.rejectedRecords == 1)
    }

    /// Reddit's links name their subreddit in sibling keys: the subreddit row is assembled from them.
    static let reddit = """
        version: 1
        name: reddit
        records: data.children
        root: link
        entities:
          link:
            identity: id
            attributes: {id: {type: string, key: data.name}, title: {type: string, key: data.title}}
            relationships:
              subreddit: {to: subreddit, fields: {id: data.subreddit_id, display_name: data.subreddit, subscribers: data.subreddit_subscribers}}
          subreddit:
            identity: id
            attributes: {id: string, display_name: string, subscribers: integer}
        """

    @Test(arguments: StoreConformanceTests.storedBackends)
    func aToOneIsAssembledFromSiblingFields(backend: StoreConformanceTests.Backend) throws {
        let harness = try StoreConformanceTests.harness(backend, yaml: Self.reddit)
        let first = try harness.run(
            [
                #"""
                {"data": {"children": [
                  {"kind": "t3", "data": {"name": "t3_a", "title": "A", "subreddit_id": "t5_1", "subreddit": "AskReddit", "subreddit_subscribers": 100}},
                  {"kind": "t3", "data": {"name": "t3_b", "title": "B", "subreddit_id": "t5_2", "subreddit": "swift"}},
                  {"kind": "t3", "data": {"name": "t3_c", "title": "C", "subreddit_id": "t5_1", "subreddit_subscribers": "many"}}
                ]}}
                """#
            ], 50)
        #expect(first.status == .finished, "\(first.error ?? "")")
        #expect(first.counters.rejectedRecords == 1, "'many' is not an integer: the record is rejected")
        let dump = try harness.dump()
        #expect(dump["subreddit"] == [["t5_1", "AskReddit", "100"], ["t5_2", "swift", "NULL"]], "\(dump["subreddit"] ?? [])")
        #expect(dump["link"] == [["t3_a", "A", "t5_1"], ["t3_b", "B", "t5_2"]], "\(dump["link"] ?? [])")
        // No subreddit_id: the link is left as it is; a null one clears it.
        let second = try harness.run(
            [
                #"{"data": {"children": [{"data": {"name": "t3_a", "title": "A", "subreddit": "x"}}, {"data": {"name": "t3_b", "title": "B", "subreddit_id": null}}]}}"#
            ], 50)
        #expect(second.status == .finished, "\(second.error ?? "")")
        #expect(try harness.dump()["link"] == [["t3_a", "A", "t5_1"], ["t3_b", "B", "NULL"]])
    }

    @Test func fieldsAreCheckedAtValidation() {
        func problem(_ relationship: String) -> String? {
            configProblems(
                Self.reddit.replacingOccurrences(
                    of:
                        "subreddit: {to: subreddit, fields: {id: data.subreddit_id, display_name: data.subreddit, subscribers: data.subreddit_subscribers}}",
                    with: "subreddit: \(relationship)"), path: "r.yml")
        }
        #expect(problem("{to: subreddit, fields: {id: data.subreddit_id}}") == nil)
        #expect(problem("{to: subreddit, fields: {display_name: data.subreddit}}")?.contains("'id' is missing") == true)
        #expect(problem("{to: subreddit, fields: {id: x, nope: y}}")?.contains("'nope' is no attribute") == true)
        #expect(problem("{to: subreddit, many: true, fields: {id: x}}")?.contains("to-one relationship only") == true)
        #expect(problem("{to: subreddit, key: s, fields: {id: x}}")?.contains("either key or fields") == true)
        #expect(problem("{to: subreddit, fields: {id: \"a[x]\"}}")?.hasPrefix("r.yml:10:") == true)
    }

    /// `insert_only` keeps what is stored; `update_only` touches only what is stored.
    @Test(arguments: StoreConformanceTests.everyBackend)
    func insertOnlyAndUpdateOnly(backend: StoreConformanceTests.Backend) throws {
        let base = Self.people + "\n    relationships: {best: {to: person}}"
        let seed = #"[{"id": 1, "name": "Ada"}, {"id": 2, "name": "Bo"}]"#
        let insertOnly = try StoreConformanceTests.harness(
            backend, yaml: base.replacingOccurrences(of: "root: person", with: "root: person\nwrite: insert_only"))
        #expect(try insertOnly.run([seed], 50).status == .finished)
        // Person 1 exists: its record is skipped whole (its best friend 9 is not made); 3 is new,
        // and the second record of 3 finds the row the first made.
        let inserted = try insertOnly.run(
            [#"[{"id": 1, "name": "Changed", "best": 9}, {"id": 3, "name": "Cy"}, {"id": 3, "name": "Again"}]"#], 1)
        #expect(inserted.status == .finished, "\(inserted.error ?? "")")
        #expect((inserted.counters.inserted, inserted.counters.updated, inserted.counters.skippedRecords) == (1, 0, 2))
        #expect(try insertOnly.dump()["person"]?.map { $0.prefix(2) } == [["1", "Ada"], ["2", "Bo"], ["3", "Cy"]])

        for rejects in [false, true] {
            let mode = rejects ? "{mode: update_only, unknown: reject}" : "update_only"
            let updateOnly = try StoreConformanceTests.harness(
                backend, yaml: base.replacingOccurrences(of: "root: person", with: "root: person\nwrite: \(mode)"))
            let counters = try updateOnly.run([seed], 50).counters
            // Nothing is stored: every record is unknown.
            #expect((rejects ? counters.rejectedRecords : counters.skippedRecords) == 2)
            #expect(try updateOnly.dump()["person"] == [])
        }
        let yaml = base.replacingOccurrences(of: "root: person", with: "root: person\nwrite: {mode: update_only, unknown: reject}")
        let config = try PipelineConfig.parse(text: yaml, path: "u.yml")
        #expect(config.rootWriteRules == [0: RootWriteRule(mode: .updateOnly, rejectsUnknown: true)])
    }

    @Test func updateOnlyRejectsOrSkipsUnknownIdentities() throws {
        let (_, db) = try ingest(Self.people, [#"[{"id": 1, "name": "Ada"}]"#])
        let skip = Self.people.replacingOccurrences(of: "root: person", with: "root: person\nwrite: update_only")
        let (skipped, _) = try ingest(skip, [#"[{"id": 1, "name": "Ada L."}, {"id": 2, "name": "Bo"}]"#], db: db)
        #expect((skipped.counters.updated, skipped.counters.inserted, skipped.counters.skippedRecords) == (1, 0, 1))
        let reject = Self.people.replacingOccurrences(of: "root: person", with: "root: person\nwrite: {mode: update_only, unknown: reject}")
        let (rejected, _) = try ingest(reject, [#"[{"id": 2, "name": "Bo"}]"#], db: db)
        #expect(rejected.counters.rejectedRecords == 1 && rejected.counters.rejectsByReason == ["unknown_identity": 1])
        #expect(
            try rows(db, "SELECT reason_code, record_index, coding_path, raw FROM _ingot_rejects") == [
                ["unknown_identity", "0", "[0]", #"{"id": 2, "name": "Bo"}"#]
            ])
        #expect(try rows(db, "SELECT id, name FROM person") == [["1", "Ada L."]])
    }

    @Test func writeModesAreCheckedAtValidation() {
        func problem(_ write: String) -> String? {
            configProblems(Self.people.replacingOccurrences(of: "root: person", with: "root: person\nwrite: \(write)"), path: "w.yml")
        }
        #expect(problem("insert_only") == nil && problem("{mode: update_only, unknown: skip}") == nil)
        #expect(problem("upsert")?.contains("write must be one of merge, replace, insert_only, update_only") == true)
        #expect(problem("{mode: merge, unknown: reject}")?.contains("unknown applies to write mode update_only") == true)
        #expect(problem("{mode: update_only, unknown: keep}")?.hasPrefix("w.yml:5:") == true)
    }

    /// Sync's "sync the notes of user 6": replace deletes the untouched rows of the scope the run saw.
    static let notes = """
        version: 1
        name: notes
        records: "."
        root: note
        write: {mode: replace, scope: user.id}
        entities:
          note:
            identity: id
            attributes: {id: integer, text: string, user_id: {type: integer, key: user.id}}
        """

    @Test(arguments: StoreConformanceTests.everyBackend)
    func replaceWithAScopeDeletesOnlyWithinIt(backend: StoreConformanceTests.Backend) throws {
        let seed =
            #"[{"id": 1, "text": "a", "user": {"id": 6}}, {"id": 2, "text": "b", "user": {"id": 6}}, {"id": 3, "text": "c", "user": {"id": 7}}]"#
        let harness = try StoreConformanceTests.harness(backend, yaml: Self.notes)
        #expect(try harness.run([seed], 50).status == .finished)
        // The notes of user 6, again: note 2 is gone from the API; user 7's note is out of scope.
        let sync = try harness.run([#"[{"id": 1, "text": "a!", "user": {"id": 6}}]"#], 50)
        #expect(sync.status == .finished, "\(sync.error ?? "")")
        #expect(sync.counters.deleted == 1)
        #expect(try harness.dump()["note"] == [["1", "a!", "6"], ["3", "c", "7"]])
        // Note 1 moved to user 7 and back within one batch: the run saw users 7 and 6, as it
        // would across batches, and user 7's untouched note goes.
        let moved = try harness.run([#"[{"id": 1, "user": {"id": 7}}, {"id": 1, "user": {"id": 6}}]"#], 50)
        #expect(moved.counters.deleted == 1)
        #expect(try harness.dump()["note"] == [["1", "a!", "6"]])
        // A run that saw no scope value deletes nothing.
        #expect(try harness.run([#"[]"#], 50).counters.deleted == 0)
    }

    @Test func aScopeMustNameAColumnOfTheRoot() {
        #expect(configProblems(Self.notes, path: "n.yml") == nil)
        #expect(
            configProblems(Self.notes.replacingOccurrences(of: "scope: user.id", with: "scope: owner.id"), path: "n.yml")?.contains(
                "scope 'owner.id' is the key of no attribute or to-one of root 'note'") == true)
        #expect(
            configProblems(Self.notes.replacingOccurrences(of: "mode: replace", with: "mode: merge"), path: "n.yml")?.contains(
                "scope applies to write mode replace") == true)
    }

    /// `delete: cascade`: the rows a deleted row links to go with it; nullify applies to what else pointed at them.
    static let cascade = """
        version: 1
        name: cascade
        records: "."
        root: person
        write: replace
        entities:
          person:
            identity: id
            attributes: {id: integer}
            relationships:
              dogs: {to: dog, many: true, delete: cascade}
              best: {to: dog, delete: cascade}
              friends: {to: person, many: true}
              walkers: {to: walker, many: true, delete: nullify}
          dog:
            identity: id
            attributes: {id: integer}
            relationships: {toy: {to: toy, delete: cascade}}
          toy:
            identity: id
            attributes: {id: integer}
          walker:
            identity: id
            attributes: {id: integer}
            relationships: {dog: {to: dog}}
        """

    /// Person 1 with dogs 7 (owning toy 70) and 8, best friend dog 9, a walker of dog 7; person 2
    /// with dog 8 too.
    static let cascadeSeed =
        #"[{"id": 1, "dogs": [{"id": 7, "toy": 70}, 8], "best": 9, "friends": [2], "walkers": [{"id": 50, "dog": 7}]}, {"id": 2, "dogs": [8]}]"#

    @Test(arguments: StoreConformanceTests.everyBackend)
    func cascadeDeletesWhatADeletedRowLinksTo(backend: StoreConformanceTests.Backend) throws {
        let harness = try StoreConformanceTests.harness(backend, yaml: Self.cascade)
        #expect(try harness.run([Self.cascadeSeed], 50).status == .finished)
        let replaced = try harness.run([#"[{"id": 2}]"#], 50)
        #expect(replaced.status == .finished, "\(replaced.error ?? "")")
        // Person 1, its dogs 7 and 8 and best friend 9, dog 7's toy 70 (dog 8 was person 2's too:
        // a cascade deletes it all the same, as Core Data's does).
        #expect(replaced.counters.deleted == 5)
        let tables = try harness.dump()
        #expect(tables["person"] == [["2", "NULL"]], "person 2 and its best_id")
        #expect(tables["dog"] == [] && tables["toy"] == [])
        #expect(tables["walker"] == [["50", "NULL"]], "nullified: the walker stays, its dog is gone")
        #expect(tables["person_dogs"] == [] && tables["person_friends"] == [] && tables["person_walkers"] == [])
        #expect(
            configProblems(Self.cascade.replacingOccurrences(of: "delete: nullify", with: "delete: restrict"), path: "c.yml")?.contains(
                "delete must be nullify or cascade") == true)
    }

    /// A cascade from an untouched row spares the rows this run wrote: dog 8 is person 1's (not
    /// in this run: deleted) and person 2's, whose record this run gives again with it — so the
    /// run stored dog 8, and it stays (the cascade deleted it, and the next run inserted it again).
    @Test(arguments: StoreConformanceTests.everyBackend)
    func aCascadeSparesTheRowsTheRunWrote(backend: StoreConformanceTests.Backend) throws {
        let harness = try StoreConformanceTests.harness(backend, yaml: Self.cascade)
        #expect(try harness.run([Self.cascadeSeed], 50).status == .finished)
        let replaced = try harness.run([#"[{"id": 2, "dogs": [8]}]"#], 50)
        #expect(replaced.status == .finished, "\(replaced.error ?? "")")
        #expect(replaced.counters.deleted == 4, "person 1, dogs 7 and 9, toy 70")
        let tables = try harness.dump()
        #expect(tables["dog"] == [["8", "NULL"]], "\(tables["dog"] ?? [])")
        #expect(tables["person_dogs"] == [["2", "8"]])
        let again = try harness.run([#"[{"id": 2, "dogs": [8]}]"#], 50)
        #expect(again.counters.inserted == 0 && again.counters.deleted == 0, "a rerun changes nothing")
    }

    /// Sync's operation filters: `operations: [update]` updates stored dogs but makes none and
    /// drops no link; `[insert]` makes a best friend but does not rewrite one.
    static let operations = """
        version: 1
        name: ops
        records: "."
        root: person
        entities:
          person:
            identity: id
            attributes: {id: integer}
            relationships:
              dogs: {to: dog, many: true, operations: [update]}
              best: {to: dog, operations: [insert]}
          dog:
            identity: id
            attributes: {id: integer, name: string}
        """

    /// (Not on the memory store: its database is bound to one model's layouts, and the two
    /// pipelines' layouts differ by `operations:`.)
    @Test(arguments: StoreConformanceTests.storedBackends)
    func operationsFilterWhatARelationshipDoesToItsTargets(backend: StoreConformanceTests.Backend) throws {
        let plain = Self.operations.replacingOccurrences(of: ", operations: [update]", with: "").replacingOccurrences(
            of: ", operations: [insert]", with: "")
        #expect(plain != Self.operations)
        let seed = try StoreConformanceTests.harness(backend, yaml: plain)
        #expect(try seed.run([#"[{"id": 1, "dogs": [{"id": 1, "name": "Rex"}, {"id": 2, "name": "Fido"}]}]"#], 50).status == .finished)
        // The same database through the pipeline with operations (the harness of one backend shares it).
        let summary = try seed.runWith(
            Self.operations,
            [
                #"[{"id": 1, "dogs": [{"id": 2, "name": "Fido II"}, {"id": 3, "name": "New"}, 4], "best": {"id": 1, "name": "Ignored"}}, {"id": 2, "best": {"id": 5, "name": "Max"}}]"#
            ],
            1)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        let tables = try seed.dump()
        // Dog 2 updated; dogs 3 (an object) and 4 (a bare id) not made, their links left out; the
        // stored link to dog 1 kept (no delete). Dog 1 not rewritten by best (no update); dog 5 made.
        #expect(tables["dog"] == [["1", "Rex"], ["2", "Fido II"], ["5", "Max"]], "\(tables["dog"] ?? [])")
        #expect(tables["person_dogs"] == [["1", "1"], ["1", "2"]], "\(tables["person_dogs"] ?? [])")
        #expect(tables["person"] == [["1", "1"], ["2", "5"]], "\(tables["person"] ?? [])")
        #expect(
            configProblems(Self.operations.replacingOccurrences(of: "[insert]", with: "[insert, upsert]"), path: "o.yml")?.contains(
                "insert, update or delete") == true)
    }
}
