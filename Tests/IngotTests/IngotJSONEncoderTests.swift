import Dispatch
import Foundation
import Testing

@testable import Ingot

/// A shop's product with every scalar type Swift's `Codable` has that the library maps.
struct EncodedProduct: IngotEntity, Codable, Equatable {
    var id: Int
    var small: Int8
    var medium: Int16
    var stock: Int32?
    var big: Int64
    var flags: UInt8
    var port: UInt16
    var views: UInt32
    var huge: UInt64
    var count: UInt
    var weight: Float
    var rating: Double
    var price: Decimal
    var link: URL
    var key: UUID
    var added: Date
    var name: String
    var active: Bool
    enum CodingKeys: String, CodingKey {
        case id, small, medium, stock, big, flags, port, views, huge, count, weight, rating, price, link, key, added, name, active
    }
    static let identity: [CodingKeys] = [.id]
}

/// `IngotJSONEncoder` writes every scalar as JSON holds it — and never recurses into a scalar's
/// own `encode(to:)`: an `Int32?` or a `Decimal` crashed the process so (endless recursion).
@Suite struct IngotJSONEncoderTests {
    @Test func everyScalarEncodes() throws {
        let key = try #require(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F"))
        let product = EncodedProduct(
            id: 1, small: -8, medium: 16, stock: -32, big: 1 << 40, flags: 255, port: 8080, views: 4_000_000_000,
            huge: UInt64.max, count: 7, weight: 1.5, rating: 4.25, price: try #require(Decimal(string: "12.50")),
            link: try #require(URL(string: "https://shop.example/p/1?x=y")), key: key, added: Date(timeIntervalSince1970: 0),
            name: "Lamp", active: true)
        let text = String(decoding: try IngotJSONEncoder().encode(product), as: UTF8.self)
        for field in [
            #""small":-8"#, #""medium":16"#, #""stock":-32"#, #""big":1099511627776"#, #""flags":255"#, #""port":8080"#,
            #""views":4000000000"#, #""huge":18446744073709551615"#, #""count":7"#, #""weight":1.5"#, #""rating":4.25"#,
            #""price":12.5"#, #""link":"https://shop.example/p/1?x=y""#, #""key":"e621e1f8-c36c-495a-93fc-0c247a3e6e5f""#,
            #""name":"Lamp""#, #""active":true"#,
        ] {
            #expect(text.contains(field), "\(field) in \(text)")
        }
        var without = product
        without.stock = nil
        #expect(!String(decoding: try IngotJSONEncoder().encode(without), as: UTF8.self).contains("\"stock\":-32"))
    }

    /// What the encoder writes, `IngotJSONDecoder` reads back equal: every scalar, a URL from its
    /// text (not Foundation's `{"relative": …}`), a UUID in either case, a Decimal from its number.
    @Test func everyScalarRoundTrips() throws {
        let product = EncodedProduct(
            id: 2, small: 1, medium: -2, stock: 3, big: -4, flags: 5, port: 6, views: 7, huge: 8, count: 9, weight: 0.25,
            rating: -1.5, price: try #require(Decimal(string: "19.99")), link: try #require(URL(string: "https://shop.example/p/2")),
            key: UUID(), added: Date(timeIntervalSince1970: 1_700_000_000), name: "Chair", active: false)
        let json = try IngotJSONEncoder().encode([product])
        let queue = DispatchQueue(label: "products")
        try DecodingContext.bind(DecodingContext(name: "products"), to: queue)
        let decoded = try queue.sync { try IngotJSONDecoder().decode([EncodedProduct].self, from: json) }
        #expect(decoded == [product], "\(String(decoding: json, as: UTF8.self))")
        let upper = Data(
            String(decoding: json, as: UTF8.self).replacingOccurrences(
                of: product.key.uuidString.lowercased(), with: product.key.uuidString
            ).utf8)
        #expect(try queue.sync { try IngotJSONDecoder().decode([EncodedProduct].self, from: upper) } == [product])
    }

    /// What the encoder writes ingests as it came and fetches back equal (a URL was written as
    /// `{"relative": …}`, and every record of such an export was rejected).
    @Test func anExportIngestsAndFetchesBackEqual() async throws {
        let product = EncodedProduct(
            id: 3, small: 1, medium: 2, stock: nil, big: 4, flags: 5, port: 6, views: 7, huge: 8, count: 9, weight: 0.5, rating: 2,
            price: try #require(Decimal(string: "0.10")), link: try #require(URL(string: "https://shop.example/p/3#top")), key: UUID(),
            added: Date(timeIntervalSince1970: 1_600_000_000), name: "Desk", active: true)
        let db = try IngotDatabase.sqlite(temporaryDirectory().appendingPathComponent("shop.db").path, entities: [EncodedProduct.self])
        let report = try await db.ingest([EncodedProduct].self, from: Array(try IngotJSONEncoder().encode([product])))
        #expect(report.rejections.isEmpty && report.entities["encoded_product"]?.inserted == 1, "\(report.entities) \(report.rejections)")
        let fetched = try await db.fetch(EncodedProduct.self)
        let counted = try await db.count(EncodedProduct.self)
        #expect(fetched == [product] && counted == 1, "\(counted) \(fetched)")
    }

    /// A value that encodes itself through a single-value container as itself is refused with
    /// an error naming it, never followed around forever.
    @Test func aValueThatEncodesAsItselfIsRefused() throws {
        struct Loop: Codable {
            init() {}
            init(from decoder: any Decoder) throws { _ = try decoder.singleValueContainer().decode(String.self) }
            func encode(to encoder: any Encoder) throws {
                var container = encoder.singleValueContainer()
                try container.encode(self)
            }
        }
        struct Holder: IngotEntity, Codable {
            var id: Int
            var loop: Loop
            static let identity: [CodingKeys] = [.id]
            enum CodingKeys: String, CodingKey { case id, loop }
        }
        #expect(throws: EncodingError.self) { try IngotJSONEncoder().encode(Holder(id: 1, loop: Loop())) }
    }
}
