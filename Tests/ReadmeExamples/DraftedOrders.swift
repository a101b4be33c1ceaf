// Drafted by `ingot init` from sample pages: check each guess (the comments say why it was made).
import Foundation
import Ingot

struct Order: IngotEntity, Codable {
    var id: Int
    var name: String?
    var email: String?
    var createdAt: Date?  // ISO 8601 times with their offset
    var totalPrice: Decimal?  // numbers written as text with two decimals: exact as decimal
    var currency: String?
    var financialStatus: String?
    var test: Bool?
    var customer: Customer?  // an object with an identity: a to-one
    var lineItems: [LineItem]?  // arrays of objects with an identity: a to-many, linked by identity
    enum CodingKeys: String, CodingKey {
        case id, name, email, createdAt = "created_at", totalPrice = "total_price", currency, financialStatus = "financial_status", test,
            customer, lineItems = "line_items"
    }
    static let identity: [CodingKeys] = [.id]
    static func rule(for key: CodingKeys) -> IngotRule? {
        switch key {
        case .createdAt: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
        default: nil
        }
    }
}

struct Customer: IngotEntity, Codable {
    var id: Int
    var email: String?
    var firstName: String?
    var lastName: String?
    enum CodingKeys: String, CodingKey {
        case id, email, firstName = "first_name", lastName = "last_name"
    }
    static let identity: [CodingKeys] = [.id]
}

struct LineItem: IngotEntity, Codable {
    var id: Int
    var title: String?
    var quantity: Int?
    var price: Decimal?  // numbers written as text with two decimals: exact as decimal
    var sku: String?
    enum CodingKeys: String, CodingKey {
        case id, title, quantity, price, sku
    }
    static let identity: [CodingKeys] = [.id]
}
