// swift-format-ignore-file
// `ingot init --swift` of each API of InitTests.apis, from its fixture pages, each in an enum of its own:
// made by InitTests.everyAPIsSwiftDraftCompiles (the build compiles what the drafter writes).
import Foundation
import Ingot

enum SwapiPeopleDraft {
    struct Person: IngotEntity, Codable {
        var edited: Date?  // ISO 8601 times with their offset
        var name: String?
        var created: Date?  // ISO 8601 times with their offset
        var gender: String?
        var skinColor: String?
        var hairColor: String?
        var height: Int?  // numbers as text, and unknown for none
        var eyeColor: String?
        var mass: String?
        var birthYear: String?
        var url: String
        var homeworld: Ref<Planet>?  // a URL (http://127.0.0.1:PORT/api/planets/ID) of one planet, by the collection it names: a to-one, a stub until it loads
        var films: [Ref<Film>]?  // URLs (http://127.0.0.1:PORT/api/films/ID) of film, by the collection they name: an ordered to-many, stubs until they load
        var species: [Ref<Species>]?  // URLs (http://127.0.0.1:PORT/api/species/ID) of species, by the collection they name: an ordered to-many, stubs until they load
        enum CodingKeys: String, CodingKey {
            case edited, name, created, gender, skinColor = "skin_color", hairColor = "hair_color", height, eyeColor = "eye_color", mass,
                birthYear = "birth_year", url, homeworld, films, species
        }
        static let identity: [CodingKeys] = [.url]
        static func rule(for key: CodingKeys) -> IngotRule? {
            switch key {
            case .edited: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            case .created: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            case .height: IngotRule(coerce: true, values: ["unknown": nil])
            default: nil
            }
        }
    }

    struct Planet: IngotEntity, Codable {
        var url: String
        enum CodingKeys: String, CodingKey {
            case url
        }
        static let identity: [CodingKeys] = [.url]
    }

    struct Film: IngotEntity, Codable {
        var url: String
        enum CodingKeys: String, CodingKey {
            case url
        }
        static let identity: [CodingKeys] = [.url]
    }

    struct Species: IngotEntity, Codable {
        var url: String
        enum CodingKeys: String, CodingKey {
            case url
        }
        static let identity: [CodingKeys] = [.url]
    }
}

enum StripeCustomersDraft {
    struct Customer: IngotEntity, Codable {
        var id: String
        var object: String?
        var email: String?
        var created: Date?  // Unix seconds, by its name and values
        var metadataTier: String?
        enum CodingKeys: String, CodingKey {
            case id, object, email, created, metadataTier = "metadata.tier"
        }
        static let identity: [CodingKeys] = [.id]
        static func rule(for key: CodingKeys) -> IngotRule? {
            switch key {
            case .created: IngotRule(dateFormat: .unixSeconds)
            default: nil
            }
        }
    }
}

enum JiraIssuesDraft {
    struct Issue: IngotEntity, Codable {
        var id: String  // integers written as text: kept as text (say integer with coerce: true to store numbers)
        var key: String?
        var fieldsSummary: String?
        var fieldsCreated: Date?  // ISO 8601 times with their offset
        // "fields.labels": JSON (kept as JSON): declare a Codable type for it
        var fieldsStatus: Status?  // an object with an identity: a to-one
        var fieldsAssignee: Assignee?  // an object with an identity: a to-one
        var fieldsParent: Ref<Issue>?  // objects with the records' own identity and only keys they have: a partial copy of issue, erasing nothing it lacks
        enum CodingKeys: String, CodingKey {
            case id, key, fieldsSummary = "fields.summary", fieldsCreated = "fields.created", fieldsStatus = "fields.status",
                fieldsAssignee = "fields.assignee", fieldsParent = "fields.parent"
        }
        static let identity: [CodingKeys] = [.id]
        static func rule(for key: CodingKeys) -> IngotRule? {
            switch key {
            case .fieldsCreated: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            default: nil
            }
        }
    }

    struct Status: IngotEntity, Codable {
        var name: String
        enum CodingKeys: String, CodingKey {
            case name
        }
        static let identity: [CodingKeys] = [.name]
    }

    struct Assignee: IngotEntity, Codable {
        var accountId: String
        var displayName: String?
        enum CodingKeys: String, CodingKey {
            case accountId, displayName
        }
        static let identity: [CodingKeys] = [.accountId]
    }
}

enum GithubDraft {
    struct Issue: IngotEntity, Codable {
        var id: Int
        var number: Int?
        var title: String?
        var state: String?
        var createdAt: Date?  // ISO 8601 times with their offset
        var user: User?  // an object with an identity: a to-one
        enum CodingKeys: String, CodingKey {
            case id, number, title, state, createdAt = "created_at", user
        }
        static let identity: [CodingKeys] = [.id]
        static func rule(for key: CodingKeys) -> IngotRule? {
            switch key {
            case .createdAt: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            default: nil
            }
        }
    }

    struct User: IngotEntity, Codable {
        var login: String?
        var id: Int
        var typeValue: String?
        enum CodingKeys: String, CodingKey {
            case login, id, typeValue = "type"
        }
        static let identity: [CodingKeys] = [.id]
    }
}

enum ShopifyProductsDraft {
    struct Product: IngotEntity, Codable {
        var id: Int
        var title: String?
        var vendor: String?
        var updatedAt: Date?  // ISO 8601 times with their offset
        var variants: [Variant]?  // arrays of objects with an identity: a to-many, linked by identity
        var options: [Option]?  // arrays of objects with an identity: a to-many, linked by identity
        enum CodingKeys: String, CodingKey {
            case id, title, vendor, updatedAt = "updated_at", variants, options
        }
        static let identity: [CodingKeys] = [.id]
        static func rule(for key: CodingKeys) -> IngotRule? {
            switch key {
            case .updatedAt: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            default: nil
            }
        }
    }

    struct Variant: IngotEntity, Codable {
        var id: Int
        var title: String?
        var price: Decimal?  // numbers written as text with two decimals: exact as decimal
        var compareAtPrice: Decimal?  // numbers written as text with two decimals: exact as decimal
        var sku: String?
        var position: Int?
        enum CodingKeys: String, CodingKey {
            case id, title, price, compareAtPrice = "compare_at_price", sku, position
        }
        static let identity: [CodingKeys] = [.id]
    }

    struct Option: IngotEntity, Codable {
        var id: Int
        var name: String?
        var position: Int?
        // "values": JSON (kept as JSON): declare a Codable type for it
        enum CodingKeys: String, CodingKey {
            case id, name, position
        }
        static let identity: [CodingKeys] = [.id]
    }
}

enum NotionUsersDraft {
    struct User: IngotEntity, Codable {
        var object: String?
        var id: String
        var typeValue: String?
        var name: String?
        var avatarUrl: String?  // null in every record of the sample: check its type
        var personEmail: String?
        enum CodingKeys: String, CodingKey {
            case object, id, typeValue = "type", name, avatarUrl = "avatar_url", personEmail = "person.email"
        }
        static let identity: [CodingKeys] = [.id]
    }
}

enum SlackHistoryDraft {
    struct Message: IngotEntity, Codable {
        var typeValue: String?
        var user: String?
        var text: String?
        var ts: String
        enum CodingKeys: String, CodingKey {
            case typeValue = "type", user, text, ts
        }
        static let identity: [CodingKeys] = [.ts]
    }
}

enum RedditOverviewDraft {
    struct Children: IngotEntity, Codable {
        var kind: String?
        var dataName: String
        var dataId: String?
        var dataTitle: String?
        var dataScore: Int?
        var dataSubredditId: String?
        var dataSubreddit: String?
        var dataBody: String?
        var dataDisplayName: String?
        var dataLinkId: Ref<Children>?  // the 4 ids the sample holds here are all ids of children records, though the key's name does not say so: check it; a to-one, a stub until it loads
        enum CodingKeys: String, CodingKey {
            case kind, dataName = "data.name", dataId = "data.id", dataTitle = "data.title", dataScore = "data.score",
                dataSubredditId = "data.subreddit_id", dataSubreddit = "data.subreddit", dataBody = "data.body",
                dataDisplayName = "data.display_name", dataLinkId = "data.link_id"
        }
        static let identity: [CodingKeys] = [.dataName]
    }
}

enum PokeapiDraft {
    struct Pokemon: IngotEntity, Codable {
        var id: Int
        var name: String?
        var height: Int?
        var weight: Int?
        var baseExperience: Int?
        var types: [TypeRecord]?  // arrays of objects with an identity: a to-many, linked by identity
        enum CodingKeys: String, CodingKey {
            case id, name, height, weight, baseExperience = "base_experience", types
        }
        static let identity: [CodingKeys] = [.id]
    }

    struct TypeRecord: IngotEntity, Codable {
        var slot: Int?
        var typeName: String?
        var typeUrl: String
        enum CodingKeys: String, CodingKey {
            case slot, typeName = "type.name", typeUrl = "type.url"
        }
        static let entityName = "type"
        static let identity: [CodingKeys] = [.typeUrl]
    }
}

enum ZendeskTicketsDraft {
    struct Ticket: IngotEntity, Codable {
        var id: Int
        var subject: String?
        var status: String?
        var requesterId: Int?
        var createdAt: Date?  // ISO 8601 times with their offset
        // "custom_fields": JSON (kept as JSON): declare a Codable type for it
        // "tags": JSON (kept as JSON): declare a Codable type for it
        var groupId: Int?
        enum CodingKeys: String, CodingKey {
            case id, subject, status, requesterId = "requester_id", createdAt = "created_at", groupId = "group_id"
        }
        static let identity: [CodingKeys] = [.id]
        static func rule(for key: CodingKeys) -> IngotRule? {
            switch key {
            case .createdAt: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            default: nil
            }
        }
    }
}

enum ZendeskSideloadsDraft {
    struct User: IngotEntity, Codable {
        var id: Int
        var name: String?
        var email: String?
        var role: String?
        enum CodingKeys: String, CodingKey {
            case id, name, email, role
        }
        static let identity: [CodingKeys] = [.id]
    }

    struct Group: IngotEntity, Codable {
        var id: Int
        var name: String?
        enum CodingKeys: String, CodingKey {
            case id, name
        }
        static let identity: [CodingKeys] = [.id]
    }

    struct Ticket: IngotEntity, Codable {
        var id: Int
        var subject: String?
        var status: String?
        var createdAt: Date?  // ISO 8601 times with their offset
        // "custom_fields": JSON (kept as JSON): declare a Codable type for it
        // "tags": JSON (kept as JSON): declare a Codable type for it
        var requesterId: Ref<User>?  // the 2 integer ids the sample holds here are all ids of user records, though the key's name does not say so: check it; a to-one, a stub until it loads
        var groupId: Ref<Group>?  // an integer id of one group, by the key's name: a to-one, a stub until it loads
        enum CodingKeys: String, CodingKey {
            case id, subject, status, createdAt = "created_at", requesterId = "requester_id", groupId = "group_id"
        }
        static let identity: [CodingKeys] = [.id]
        static func rule(for key: CodingKeys) -> IngotRule? {
            switch key {
            case .createdAt: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            default: nil
            }
        }
    }
}

enum WordpressPostsDraft {
    struct Post: IngotEntity, Codable {
        var id: Int
        var date: Date?  // ISO 8601 times without offset: read as UTC (say timezone: for another)
        var dateGmt: Date?  // ISO 8601 times without offset: read as UTC (say timezone: for another)
        var modifiedGmt: Date?  // ISO 8601 times without offset: read as UTC (say timezone: for another)
        var slug: String?
        var status: String?
        var titleRendered: String?
        var author: Int?
        // "categories": JSON (kept as JSON): declare a Codable type for it
        enum CodingKeys: String, CodingKey {
            case id, date, dateGmt = "date_gmt", modifiedGmt = "modified_gmt", slug, status, titleRendered = "title.rendered", author
        }
        static let identity: [CodingKeys] = [.id]
        static func rule(for key: CodingKeys) -> IngotRule? {
            switch key {
            case .date: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            case .dateGmt: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            case .modifiedGmt: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            default: nil
            }
        }
    }
}

enum NpmLeftPadDraft {
    struct Version: IngotEntity, Codable {
        var name: String?
        var version: String?
        var id: String
        var description: String?
        var license: String?
        var distShasum: String?
        var distTarball: String?
        var deprecated: String?
        enum CodingKeys: String, CodingKey {
            case name, version, id = "_id", description, license, distShasum = "dist.shasum", distTarball = "dist.tarball", deprecated
        }
        static let identity: [CodingKeys] = [.id]
    }
}

enum OpenMeteoBerlinDraft {
    struct Hourly: IngotEntity, Codable {
        var time: Date  // ISO 8601 times without offset: read as UTC (say timezone: for another)
        var temperature2m: Double?
        var precipitation: Double?
        enum CodingKeys: String, CodingKey {
            case time, temperature2m = "temperature_2m", precipitation
        }
        static let identity: [CodingKeys] = [.time]
        static func rule(for key: CodingKeys) -> IngotRule? {
            switch key {
            case .time: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            default: nil
            }
        }
    }
}

enum TwitterFollowersDraft {
    struct User: IngotEntity, Codable {
        var id: Int
        var idStr: String?  // integers written as text: kept as text (say integer with coerce: true to store numbers)
        var screenName: String?
        var followersCount: Int?
        enum CodingKeys: String, CodingKey {
            case id, idStr = "id_str", screenName = "screen_name", followersCount = "followers_count"
        }
        static let identity: [CodingKeys] = [.id]
    }
}

enum ContentfulSyncDraft {
    struct Sync: IngotEntity, Codable {
        var sysType: String?
        var sysId: String
        var sysRevision: Int?
        var sysCreatedAt: Date?  // ISO 8601 times with their offset
        var sysUpdatedAt: Date?  // ISO 8601 times with their offset
        var sysContentType: ContentType?  // an object with an identity: a to-one
        enum CodingKeys: String, CodingKey {
            case sysType = "sys.type", sysId = "sys.id", sysRevision = "sys.revision", sysCreatedAt = "sys.createdAt",
                sysUpdatedAt = "sys.updatedAt", sysContentType = "sys.contentType"
        }
        static let identity: [CodingKeys] = [.sysId]
        static func rule(for key: CodingKeys) -> IngotRule? {
            switch key {
            case .sysCreatedAt: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            case .sysUpdatedAt: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            default: nil
            }
        }
    }

    struct ContentType: IngotEntity, Codable {
        var sysType: String?
        var sysLinkType: String?
        var sysId: String
        enum CodingKeys: String, CodingKey {
            case sysType = "sys.type", sysLinkType = "sys.linkType", sysId = "sys.id"
        }
        static let identity: [CodingKeys] = [.sysId]
    }
}

enum GitlabIssuesDraft {
    struct Issue: IngotEntity, Codable {
        var id: Int
        var iid: Int?
        var projectId: Int?
        var title: String?
        var description: String?
        var state: String?
        var createdAt: Date?  // ISO 8601 times with their offset
        var updatedAt: Date?  // ISO 8601 times with their offset
        var closedAt: String?  // null in every record of the sample: check its type
        // "labels": JSON (kept as JSON): declare a Codable type for it
        var webUrl: String?
        var author: Author?  // an object with an identity: a to-one
        var assignees: [Author]?  // arrays of objects with an identity: a to-many, linked by identity (the keys and identity of author's: records of the one entity)
        var milestone: Milestone?  // an object with an identity: a to-one
        enum CodingKeys: String, CodingKey {
            case id, iid, projectId = "project_id", title, description, state, createdAt = "created_at", updatedAt = "updated_at",
                closedAt = "closed_at", webUrl = "web_url", author, assignees, milestone
        }
        static let identity: [CodingKeys] = [.id]
        static func rule(for key: CodingKeys) -> IngotRule? {
            switch key {
            case .createdAt: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            case .updatedAt: IngotRule(dateFormat: .iso8601(timeZone: "UTC"))
            default: nil
            }
        }
    }

    struct Author: IngotEntity, Codable {
        var id: Int
        var username: String?
        var name: String?
        var state: String?
        var webUrl: String?
        enum CodingKeys: String, CodingKey {
            case id, username, name, state, webUrl = "web_url"
        }
        static let identity: [CodingKeys] = [.id]
    }

    struct Milestone: IngotEntity, Codable {
        var id: Int
        var iid: Int?
        var projectId: Int?
        var title: String?
        var state: String?
        var dueDate: Date?  // dates without a time
        enum CodingKeys: String, CodingKey {
            case id, iid, projectId = "project_id", title, state, dueDate = "due_date"
        }
        static let identity: [CodingKeys] = [.id]
        static func rule(for key: CodingKeys) -> IngotRule? {
            switch key {
            case .dueDate: IngotRule(dateFormat: .pattern("yyyy-MM-dd", timeZone: "UTC"))
            default: nil
            }
        }
    }
}

enum HackerNewsDraft {
    struct Item: IngotEntity, Codable {
        var by: String?
        var id: Int
        var time: Date?  // Unix seconds, by its name and values
        var typeValue: String?
        var text: String?
        var kids: [Ref<Item>]?  // integer ids of item, by the key's name: an ordered to-many, stubs until they load
        var parent: Ref<Item>?  // an integer id of one item, by the key's name: a to-one, a stub until it loads
        enum CodingKeys: String, CodingKey {
            case by, id, time, typeValue = "type", text, kids, parent
        }
        static let identity: [CodingKeys] = [.id]
        static func rule(for key: CodingKeys) -> IngotRule? {
            switch key {
            case .time: IngotRule(dateFormat: .unixSeconds)
            default: nil
            }
        }
    }
}
