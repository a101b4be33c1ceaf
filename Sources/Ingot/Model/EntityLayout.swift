/// The column slots of an entity's rows, shared by the record mapper (which fills them) and the
/// store (which writes them): the attributes in declaration order, then each to-one
/// relationship's foreign-key columns.
///
/// ```
/// person: id, first_name, …, country  (attributes)  · homeworld_id  (to-one)
/// slots:  0   1               7                        8
/// ```
public struct EntityLayout: Sendable, Equatable {
    public struct Column: Sendable, Equatable {
        public var name: String
        /// What it holds: the attribute's type, or for a to-one key column the type of the
        /// target's identity attribute. Each backend maps it to a column type.
        public var type: AttributeType
    }

    public struct ToOne: Sendable, Equatable {
        public var relationship: Int
        public var target: Int
        /// The foreign-key slots, one per key of the target's identity.
        public var slots: Range<Int>
    }

    public struct ToMany: Sendable, Equatable {
        public var relationship: Int
        public var target: Int
        public var joinTable: String
        /// This entity's side of the join table.
        public var sourceColumns: [String]
        /// The target's side.
        public var targetColumns: [String]
        public var isOrdered: Bool
    }

    public var entity: Int
    public var table: String
    public var columns: [Column]
    /// The slots of the identity attributes, in identity order. Empty: no identity.
    public var identitySlots: [Int]
    public var toOne: [ToOne]
    public var toMany: [ToMany]

    /// The layouts of every entity of `model`, in the model's order.
    public static func layouts(of model: EntityModel) -> [EntityLayout] {
        model.entities.enumerated().map { index, entity in
            var columns = entity.attributes.map { Column(name: $0.name, type: $0.type) }
            var toOne: [ToOne] = []
            var toMany: [ToMany] = []
            for (r, relationship) in entity.relationships.enumerated() {
                guard let t = model.index(of: relationship.target) else { continue }
                let target = model.entities[t]
                if relationship.isToMany {
                    let selfReference = t == index
                    toMany.append(
                        ToMany(
                            relationship: r, target: t, joinTable: "\(entity.table)_\(relationship.name)",
                            sourceColumns: entity.joinColumns(),
                            targetColumns: target.joinColumns(prefix: selfReference ? relationship.name : nil),
                            isOrdered: relationship.isOrdered))
                } else {
                    let start = columns.count
                    for (k, name) in relationship.foreignKeyColumns(target: target).enumerated() {
                        let keyType = target.identityAttributes[safe: k]?.type ?? .string
                        columns.append(Column(name: name, type: keyType))
                    }
                    toOne.append(ToOne(relationship: r, target: t, slots: start..<columns.count))
                }
            }
            let identitySlots = entity.identity.compactMap { name in entity.attributes.firstIndex { $0.name == name } }
            return EntityLayout(
                entity: index, table: entity.table, columns: columns, identitySlots: identitySlots, toOne: toOne,
                toMany: toMany)
        }
    }
}

extension Array {
    subscript(safe index: Int) -> Element? {
        indices.contains(index) ? self[index] : nil
    }
}
