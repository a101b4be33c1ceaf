import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Ingot

private struct Dog: IngotEntity, Hashable {
    var id: Int
    var name: String?
    var breed: String?
    enum CodingKeys: String, CodingKey { case id, name, breed }
    static let identity: [CodingKeys] = [.id]
}

private struct Person: IngotEntity {
    var id: Int
    var firstName: String?
    var country: String?
    var score: Double?
    var dogs: Set<Dog>?

    enum CodingKeys: String, CodingKey {
        case id, firstName = "first_name", country = "origin.country.name", score, dogs
    }
    static let identity: [CodingKeys] = [.id]
}

private struct Place: IngotEntity {
    var id: Int
    var country: String?
    enum CodingKeys: String, CodingKey { case id, country = "origin/country.name" }
    static let identity: [CodingKeys] = [.id]
    static let keyDelimiter = "/"
}

private struct Species: IngotEntity {
    var id: Int
    var firstName: String?
    var lastName: String?
    var genus: String?
    enum CodingKeys: String, CodingKey { case id, firstName = "names[0].name", lastName = "names[-1].name", genus = "genera[2].genus" }
    static let identity: [CodingKeys] = [.id]
}

/// Entities declared as Swift `Codable` types, Coredatable-style.
struct SwiftEntityTests {
    @Test func swiftTypesProduceTheSameModelAsYAML() throws {
        let yaml = try PipelineConfig.parse(
            text: """
                version: 1
                name: people
                root: person
                entities:
                  person:
                    identity: id
                    attributes:
                      id: integer
                      first_name: string
                      country: {type: string, key: origin.country.name}
                      score: double
                    relationships:
                      dogs: {to: dog, many: true}
                  dog:
                    identity: id
                    attributes: {id: integer, name: string, breed: string}
                """, path: "p.yml")
        var derived = try EntityModel(root: Person.self)
        // What only a Swift type says: which properties are non-optional (its rows must hold
        // them, LibraryCountTests) and an enum's cases; the YAML declares neither.
        #expect(derived.entities[0].attributes.filter(\.required).map(\.name) == ["id"], "firstName, country and score are optional")
        for e in derived.entities.indices {
            for a in derived.entities[e].attributes.indices {
                (derived.entities[e].attributes[a].required, derived.entities[e].attributes[a].cases) = (false, nil)
            }
        }
        #expect(derived.entities.map(\.name) == yaml.model.entities.map(\.name))
        for (d, y) in zip(derived.entities, yaml.model.entities) {
            #expect(d.attributes == y.attributes)
            #expect(d.relationships == y.relationships)
            #expect(d.identity == y.identity)
        }
        #expect(derived == yaml.model)
    }

    @Test func decodingWithoutAContextThrowsMissingContext() {
        let bytes = Array(#"{"id": 1}"#.utf8)
        #expect {
            _ = try IngotJSONDecoder().decode(Person.self, from: bytes)
        } throws: { error in
            guard case IngotDecodingError.missingContext(let path) = error else { return false }
            return path.isEmpty
        }
        // Nested: the path names where the entity was met.
        let nested = Array(#"{"pets": [{"id": 1}]}"#.utf8)
        struct Owner: Decodable { var pets: [Dog] }
        #expect {
            _ = try IngotJSONDecoder().decode(Owner.self, from: nested)
        } throws: { error in
            guard case IngotDecodingError.missingContext(let path) = error else { return false }
            return path.map(\.stringValue) == ["pets", "0"]
        }
    }

    /// A context is bound once, to one queue, and a queue has one context.
    @Test func aContextIsBoundOnceToOneQueue() throws {
        let context = DecodingContext(name: "lane")
        let queue = DispatchQueue(label: "lane.1")
        try DecodingContext.bind(context, to: queue)
        try DecodingContext.bind(context, to: queue)  // the same binding again is harmless
        #expect(throws: IngotDecodingError.self) { try DecodingContext.bind(context, to: DispatchQueue(label: "lane.2")) }
        #expect(throws: IngotDecodingError.self) { try DecodingContext.bind(DecodingContext(name: "other"), to: queue) }
        #expect(queue.sync { DecodingContext.current } === context)
    }

    /// Four queues decode at once, each with its own context: exact counts in each, nothing of
    /// one queue's objects in another's context.
    @Test func eachQueueDecodesWithItsOwnContext() throws {
        let countries = ["Chile", "Japan", "Kenya", "Norway"]
        let queues = countries.indices.map { DispatchQueue(label: "lane.\($0)") }
        let contexts = countries.map { DecodingContext(name: $0) }
        for (queue, context) in zip(queues, contexts) { try DecodingContext.bind(context, to: queue) }
        #expect(DecodingContext.current == nil)

        // Every queue decodes at the same time: each waits until all have started.
        let arrived = Mutex(0)
        let go = DispatchSemaphore(value: 0)
        let group = DispatchGroup()
        func page(_ base: Int, _ country: String) -> [UInt8] {
            Array(
                ("["
                    + (0..<200).map {
                        #"{"id": \#(base + $0), "first_name": "p", "origin": {"country": {"name": "\#(country)"}}, "dogs": [{"id": \#($0 % 7)}]}"#
                    }.joined(separator: ",") + "]").utf8)
        }
        let decoded = Mutex([Int](repeating: -1, count: countries.count))
        for (k, queue) in queues.enumerated() {
            let bytes = page(k * 1000, countries[k])
            let context = contexts[k]
            queue.async(group: group) {
                // The last queue to arrive lets every queue go.
                if arrived.withLock({
                    $0 += 1; return $0
                }) == countries.count {
                    for _ in countries.indices { go.signal() }
                }
                go.wait()
                let people = DecodingContext.current === context ? try? IngotJSONDecoder().decode([Person].self, from: bytes) : nil
                decoded.withLock { $0[k] = people?.count ?? 0 }
            }
        }
        group.wait()
        #expect(decoded.withLock { $0 } == [200, 200, 200, 200])
        // Each context holds only what its queue decoded: 200 persons and 7 shared dogs.
        for (k, context) in contexts.enumerated() {
            #expect(context.registeredObjects["person"]?.count == 200 && context.registeredObjects["dog"]?.count == 7)
            #expect(context.registeredObject(Person.self, identity: .single(.integer(Int64(k * 1000 + 5))))?.country == countries[k])
            #expect(context.registeredObject(Person.self, identity: .single(.integer(Int64((k + 1) % 4 * 1000 + 5)))) == nil)
        }
    }

    /// A one-off decode carries its context in `userInfo`, on any queue, nested objects too; it
    /// comes before the queue's bound context.
    @Test func aContextInUserInfoServesOneDecode() throws {
        let page = Array(#"[{"id": 1, "dogs": [{"id": 7}]}, {"id": 2, "dogs": [{"id": 7}, {"id": 8}]}]"#.utf8)
        #expect(throws: IngotDecodingError.self) { try IngotJSONDecoder().decode([Person].self, from: page) }
        let oneOff = DecodingContext(name: "import")
        var decoder = IngotJSONDecoder()
        decoder.userInfo[.ingotContext] = oneOff
        #expect(try decoder.decode([Person].self, from: page).count == 2)
        #expect(oneOff.registeredObjects["person"]?.count == 2 && oneOff.registeredObjects["dog"]?.count == 2)
        // On a bound queue, the decoder's own context still wins.
        let lane = DispatchQueue(label: "lane.userinfo")
        let bound = DecodingContext(name: "lane")
        try DecodingContext.bind(bound, to: lane)
        let again = DecodingContext(name: "again")
        decoder.userInfo[.ingotContext] = again
        _ = try lane.sync { try decoder.decode([Person].self, from: page) }
        #expect(again.decodedCount == 5 && bound.decodedCount == 0)
    }

    @Test func keyPathCodingKeysFollowNestedObjects() throws {
        let queue = DispatchQueue(label: "lane")
        try DecodingContext.bind(DecodingContext(name: "lane"), to: queue)
        let person = try queue.sync {
            try IngotJSONDecoder().decode(
                Person.self, from: Array(#"{"id": 3, "origin": {"country": {"name": "Kenya"}}, "score": 1.25}"#.utf8))
        }
        #expect(person.country == "Kenya")
        #expect(person.score == 1.25)
        let noLeaf = try queue.sync {
            try IngotJSONDecoder().decode(Person.self, from: Array(#"{"id": 3, "origin": {}}"#.utf8))
        }
        #expect(noLeaf.country == nil)
    }

    @Test func aTypesKeyDelimiterSplitsItsKeyPaths() throws {
        let queue = DispatchQueue(label: "lane")
        try DecodingContext.bind(DecodingContext(name: "lane"), to: queue)
        let place = try queue.sync {
            try IngotJSONDecoder().decode(Place.self, from: Array(#"{"id": 1, "origin": {"country.name": "Chile"}}"#.utf8))
        }
        #expect(place.country == "Chile")
        let model = try EntityModel(root: Place.self)
        #expect(model["place"]?.keyDelimiter == "/")
        #expect(model["place"]?.attribute(named: "country")?.key == "origin/country.name")
    }

    @Test func codingKeysIndexArraysAsPipelineKeysDo() throws {
        let queue = DispatchQueue(label: "lane")
        try DecodingContext.bind(DecodingContext(name: "lane"), to: queue)
        let species = try queue.sync {
            try IngotJSONDecoder().decode(
                Species.self, from: Array(#"{"id": 1, "names": [{"name": "Fushigidane"}, {"name": "Bulbasaur"}], "genera": [{}]}"#.utf8))
        }
        #expect(species.firstName == "Fushigidane" && species.lastName == "Bulbasaur")
        #expect(species.genus == nil, "an index past the end is absent")
        try EntityModel(root: Species.self).validate()
    }
}
