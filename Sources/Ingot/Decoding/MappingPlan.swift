import Foundation

/// The model compiled for decoding: for each entity, the record keys it reads as UTF-8 bytes,
/// each leading to the attribute slots and relationships it feeds. Built once per run, shared
/// (immutable) by every decode lane.
struct MappingPlan: Sendable {
    struct Target: Sendable {
        enum Kind: Sendable {
            case attribute(slot: Int)
            case toOne(Int)
            case toMany(Int)
            /// One attribute (its slot in the target's layout) of to-one `toOne`'s target, read from
            /// the record's own keys (`fields:`).
            case field(toOne: Int, slot: Int)
        }
        /// One step of a key path after its first key.
        enum Step: Sendable {
            /// The member of an object, as UTF-8.
            case key([UInt8])
            /// The element of an array; negative counts from the end.
            case index(Int)
            /// The first element of an array that is an object whose `key` is `value`.
            case match(key: [UInt8], value: [UInt8])
        }
        var kind: Kind
        /// The key path's steps after its first key.
        var rest: [Step]
        /// The same steps as coding path components (for messages).
        var restTrail: [MappingFailure.Component]
    }

    /// A relationship's `operations:` without `insert` or `update`.
    struct Guard: Sendable, Equatable {
        var inserts: Bool
        var updates: Bool
    }

    struct RootKey: Sendable {
        var bytes: [UInt8]
        var name: String
        var targets: [Target]
    }

    /// A class, immutable: the mapper reads it for every object, and a struct of arrays would be
    /// copied (and its arrays retained) each time.
    final class EntityPlan: Sendable {
        let name: String
        let attributes: [Attribute]
        /// Per attribute slot, what its values go through (``AttributeRules``): what mapping reads
        /// per value, without copying the whole ``Attribute``.
        let rules: [AttributeRules]
        /// Per attribute slot, its rules' ``AttributeRules/storesTextAsIs``: the plain-text path
        /// asks it without copying the rules (a copy retains them, for every value).
        let storesTextAsIs: [Bool]
        let layout: EntityLayout
        let rootKeys: [RootKey]
        /// For each to-one of the layout: the relationship's policy.
        let toOnePolicies: [MissingTargetPolicy]
        let toManyPolicies: [MissingTargetPolicy]
        /// For each to-one and to-many: the relationship's own rules for a bare identity
        /// (`pattern`, `values`), converting to the target's identity type; `nil`: the target's.
        let toOneRules: [AttributeRules?]
        let toManyRules: [AttributeRules?]
        /// `parent:`: the parent entity (index) whose row each record of this one fills too.
        let parent: Int?
        /// An owned entity: how many leading slots its owner fills (the owner's identity and the
        /// position); 0 otherwise.
        let ownerSlots: Int
        /// Per to-many of the layout: whether it is owned (its elements are rows of their own,
        /// mapped once the owner's identity is known).
        let ownedToMany: [Bool]
        /// Per to-one and to-many: `operations:` without `insert` or `update` — what a nested
        /// object through it may do, decided by the resolver once it knows what is stored; `nil`: all.
        let toOneGuards: [Guard?]
        let toManyGuards: [Guard?]
        /// Per to-one and to-many: `partial: true` — a nested object through it leaves a column
        /// whose key path it lacks as stored (``Relationship/partial``).
        let toOnePartial: [Bool]
        let toManyPartial: [Bool]
        /// Per to-one and to-many with `on_invalid: null`: the name its unreadable identities are
        /// counted under (`entity.relationship`); `nil`: such an identity rejects the record.
        let toOneInvalidCounts: [String?]
        let toManyInvalidCounts: [String?]
        /// Declared in Swift (``IngotEntity/prepare``): the hook each object goes through before
        /// it is mapped, and the delimiter of the record's key paths.
        let prepare: RecordRewrite?
        let keyDelimiter: String

        // The same keys and targets, flat, for the mapper's inner loop (no struct of arrays
        // copied, and so retained, per key it compares or target it follows).
        /// Every root key's UTF-8 bytes, one after the other; `keyStarts[k]..<keyStarts[k + 1]`.
        let keyBytes: [UInt8]
        let keyStarts: [Int]
        /// Every root key's targets, in order; root key `k`'s are `targetStarts[k]..<targetStarts[k + 1]`.
        let targets: [Target]
        let targetStarts: [Int]
        let targetKinds: [Target.Kind]
        /// The target's key path has no further component: the root key's value is the leaf.
        let targetIsDirect: [Bool]
        /// Each target's whole key path as coding path components, innermost first (what a
        /// failure below it prepends).
        let targetPaths: [[MappingFailure.Component]]
        /// The layout's sizes and its single identity slot, read for every object mapped (read
        /// through `layout`, each read copied the layout and retained its arrays).
        let columnCount: Int
        let linkCount: Int
        let singleIdentitySlot: Int?

        init(
            name: String, attributes: [Attribute], layout: EntityLayout, rootKeys: [RootKey],
            toOnePolicies: [MissingTargetPolicy], toManyPolicies: [MissingTargetPolicy], toOneRules: [AttributeRules?],
            toManyRules: [AttributeRules?], parent: Int? = nil, ownerSlots: Int = 0, toOneGuards: [Guard?] = [],
            toManyGuards: [Guard?] = [], toOnePartial: [Bool] = [], toManyPartial: [Bool] = [],
            toOneInvalidCounts: [String?] = [], toManyInvalidCounts: [String?] = [], prepare: RecordRewrite? = nil,
            keyDelimiter: String = "."
        ) {
            self.toOneInvalidCounts = toOneInvalidCounts.isEmpty ? Array(repeating: nil, count: layout.toOne.count) : toOneInvalidCounts
            self.toManyInvalidCounts =
                toManyInvalidCounts.isEmpty ? Array(repeating: nil, count: layout.toMany.count) : toManyInvalidCounts
            self.toOnePartial = toOnePartial.isEmpty ? Array(repeating: false, count: layout.toOne.count) : toOnePartial
            self.toManyPartial = toManyPartial.isEmpty ? Array(repeating: false, count: layout.toMany.count) : toManyPartial
            self.prepare = prepare
            self.keyDelimiter = keyDelimiter
            self.toOneGuards = toOneGuards.isEmpty ? Array(repeating: nil, count: layout.toOne.count) : toOneGuards
            self.toManyGuards = toManyGuards.isEmpty ? Array(repeating: nil, count: layout.toMany.count) : toManyGuards
            self.parent = parent
            self.ownerSlots = ownerSlots
            self.ownedToMany = layout.toMany.map(\.isOwned)
            self.toOneRules = toOneRules
            self.toManyRules = toManyRules
            self.name = name
            self.attributes = attributes
            let rules = attributes.map(AttributeRules.init)
            self.rules = rules
            storesTextAsIs = rules.map(\.storesTextAsIs)
            self.layout = layout
            self.rootKeys = rootKeys
            self.toOnePolicies = toOnePolicies
            self.toManyPolicies = toManyPolicies
            keyBytes = rootKeys.flatMap(\.bytes)
            keyStarts = rootKeys.reduce(into: [0]) { starts, key in starts.append((starts.last ?? 0) + key.bytes.count) }
            targets = rootKeys.flatMap(\.targets)
            targetStarts = rootKeys.reduce(into: [0]) { starts, key in starts.append((starts.last ?? 0) + key.targets.count) }
            targetKinds = targets.map(\.kind)
            targetIsDirect = targets.map(\.rest.isEmpty)
            targetPaths = rootKeys.flatMap { key in key.targets.map { $0.restTrail.reversed() + [.key(key.name)] } }
            columnCount = layout.columns.count
            linkCount = layout.toMany.count
            singleIdentitySlot = layout.identitySlots.count == 1 ? layout.identitySlots[0] : nil
        }
    }

    var entities: [EntityPlan]
    var root: Int
    /// Where a page's records sit (``RecordFraming``).
    var framing: RecordFraming
    /// `incremental.cursor_path`: the key path whose highest value a page reports.
    var incrementalPath: [String]?
    /// `false` for a resource without a root (`resources:`): its pages only drive a for_each;
    /// their records are not mapped (the page is counted, nothing of it is stored).
    var storesRecords = true
    /// A root rule may reject a whole record after mapping (`write: {mode: update_only, unknown:
    /// reject}`): each record keeps its coding path and text for that rejection.
    var keepsRecords = false
    /// Rows and links one record may make (``RunOptions/maxRecordRows``).
    var maxRecordRows = MappingPlan.defaultMaxRecordRows
    static let defaultMaxRecordRows = 100_000
    /// Rows and links per record a batch (and a page's part) is sized for: either ends at its
    /// records or at this many times as many rows and links, whichever comes first.
    static let rowsPerRecord = 8
    /// Records of several kinds (`root: {by: KEY, entities: {VALUE: ENTITY}}`): the discriminator's
    /// key path, the entity (index) of each value, and whether other values are skipped (else
    /// rejected).
    var rootChoice: (path: JSONKeyPath, entities: [String: Int], skipsOthers: Bool)?
    /// `delete_when:`: the records that are tombstones (``DeleteWhen``).
    var deleteWhen: DeleteWhen?

    init(model: EntityModel, root: String, framing: RecordFraming, incrementalPath: [String]? = nil) {
        self.incrementalPath = incrementalPath
        let layouts = EntityLayout.layouts(of: model)
        self.root = model.index(of: root) ?? 0
        self.framing = framing
        self.entities = model.entities.enumerated().map { index, entity in
            let layout = layouts[index]
            // An owned entity's leading attributes (its owner's identity, its position) are filled
            // by the mapper, never read from a key.
            let ownerSlots = entity.owner.flatMap { model[$0] }.map { $0.identity.count + 1 } ?? 0
            let relationships = layout.toOne.map { entity.relationships[$0.relationship] }
            let many = layout.toMany.map { entity.relationships[$0.relationship] }
            return EntityPlan(
                name: entity.name, attributes: entity.attributes, layout: layout,
                rootKeys: MappingPlan.rootKeys(of: entity, layout: layout, ownerSlots: ownerSlots, model: model),
                toOnePolicies: relationships.map(MappingPlan.policy), toManyPolicies: many.map(MappingPlan.policy),
                toOneRules: relationships.map { MappingPlan.rules($0, model: model) },
                toManyRules: many.map { MappingPlan.rules($0, model: model) },
                parent: entity.parent.flatMap { model.index(of: $0) }, ownerSlots: ownerSlots,
                toOneGuards: relationships.map(MappingPlan.guarding), toManyGuards: many.map(MappingPlan.guarding),
                toOnePartial: relationships.map(\.partial), toManyPartial: many.map(\.partial),
                toOneInvalidCounts: relationships.map { $0.nullOnInvalid ? "\(entity.name).\($0.name)" : nil },
                toManyInvalidCounts: many.map { $0.nullOnInvalid ? "\(entity.name).\($0.name)" : nil },
                prepare: entity.prepare, keyDelimiter: entity.keyDelimiter)
        }
    }

    /// The record keys `entity` reads, each with the targets (attributes, to-ones, `fields:`,
    /// to-manys) that read below it.
    private static func rootKeys(of entity: Entity, layout: EntityLayout, ownerSlots: Int, model: EntityModel) -> [RootKey] {
        var rootKeys: [RootKey] = []
        func add(_ key: String, _ kind: Target.Kind) {
            // Validation refuses a key outside the grammar or starting with an index; were one
            // to reach here, it is read as plain keys.
            var components =
                (try? JSONKeyPath(parsing: key, delimiter: entity.keyDelimiter).components)
                ?? key.components(separatedBy: entity.keyDelimiter).map(JSONKeyPath.Component.key)
            guard case .key(let first) = components.removeFirst() else { return }
            var target = Target(kind: kind, rest: [], restTrail: [])
            for component in components {
                switch component {
                case .key(let name):
                    target.rest.append(.key(Array(name.utf8)))
                    target.restTrail.append(.key(name))
                case .index(let n):
                    target.rest.append(.index(n))
                    target.restTrail.append(.index(n))
                case .match(let key, let value):
                    target.rest.append(.match(key: Array(key.utf8), value: Array(value.utf8)))
                    target.restTrail.append(.match(key, value))
                }
            }
            if let k = rootKeys.firstIndex(where: { $0.name == first }) {
                rootKeys[k].targets.append(target)
            } else {
                rootKeys.append(RootKey(bytes: Array(first.utf8), name: first, targets: [target]))
            }
        }
        for (slot, attribute) in entity.attributes.enumerated() where slot >= ownerSlots { add(attribute.key, .attribute(slot: slot)) }
        for (k, toOne) in layout.toOne.enumerated() {
            let relationship = entity.relationships[toOne.relationship]
            guard !relationship.fields.isEmpty else {
                add(relationship.key, .toOne(k))
                continue
            }
            let target = model.entities[toOne.target]
            for (attribute, key) in relationship.fields.sorted(by: { $0.key < $1.key }) {
                if let slot = target.attributes.firstIndex(where: { $0.name == attribute }) { add(key, .field(toOne: k, slot: slot)) }
            }
        }
        for (k, toMany) in layout.toMany.enumerated() { add(entity.relationships[toMany.relationship].key, .toMany(k)) }
        return rootKeys
    }

    /// `operations:` without `insert`: a bare identity no row has makes no stub, no link.
    private static func policy(_ relationship: Relationship) -> MissingTargetPolicy {
        !relationship.insertsTargets && relationship.missing == .stub ? .ignore : relationship.missing
    }

    private static func guarding(_ relationship: Relationship) -> Guard? {
        relationship.insertsTargets && relationship.updatesTargets
            ? nil : Guard(inserts: relationship.insertsTargets, updates: relationship.updatesTargets)
    }

    /// A relationship's own rules for a bare identity, or `nil` for the target identity's.
    private static func rules(_ relationship: Relationship, model: EntityModel) -> AttributeRules? {
        guard relationship.pattern != nil || !relationship.values.isEmpty,
            let identity = model[relationship.target]?.identityAttributes, identity.count == 1
        else { return nil }
        // The relationship's rules first, then the target identity's for what it does not
        // set: `values: {"none": null}` on a link keeps the target's `pattern` (an id read
        // from a URL).
        let target = identity[0]
        var attribute = Attribute(name: relationship.name, type: target.type, coerce: target.coerce)
        attribute.values = target.values.merging(relationship.values) { _, mine in mine }
        attribute.pattern = relationship.pattern ?? target.pattern
        (attribute.grouping, attribute.nullOnInvalid, attribute.foldsCase) = (target.grouping, target.nullOnInvalid, target.foldsCase)
        return AttributeRules(attribute)
    }
}
