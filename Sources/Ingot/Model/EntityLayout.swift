/// The column slots of an entity's rows, shared by the record mapper (which fills them) and the
/// store (which writes them): the attributes in declaration order, then each to-one
/// relationship's foreign-key columns.
///
/// ```
/// person: id, first_name, …, country  (attributes)  · homeworld_id  (to-one)
/// slots:  0   1               7                        8
/// ```
public struct EntityLayout: Sendable, Equatable {
    /// One column of the entity's table: an attribute, or a key column of a to-one relationship.
    public struct Column: Sendable, Equatable {
        /// The column's name in the table.
        public var name: String
        /// What it holds: the attribute's type, or for a to-one key column the type of the
        /// target's identity attribute. Each backend maps it to a column type.
        public var type: AttributeType
    }

    /// A to-one relationship, stored as foreign-key columns in this entity's table.
    public struct ToOne: Sendable, Equatable {
        /// The relationship's index in the entity's relationships.
        public var relationship: Int
        /// The target entity's index in the model.
        public var target: Int
        /// The foreign-key slots, one per key of the target's identity.
        public var slots: Range<Int>
    }

    /// A to-many relationship, stored in a join table (ordered ones with a position column).
    public struct ToMany: Sendable, Equatable {
        /// The relationship's index in the entity's relationships.
        public var relationship: Int
        /// The target entity's index in the model.
        public var target: Int
        /// The join table's name.
        public var joinTable: String
        /// This entity's side of the join table.
        public var sourceColumns: [String]
        /// The target's side.
        public var targetColumns: [String]
        /// Whether the links keep the order the records gave (a `position` column).
        public var isOrdered: Bool
        /// The other side of an inverse pair (`inverse:`): the links live in the join table of
        /// the relationship it inverts (declared first), its columns read the other way round.
        public var isInverse = false
        /// `owned: true`: no join table — the targets are rows of their own table keyed by this
        /// entity's identity (``sourceColumns``, there) and their position; ``joinTable`` names
        /// that table and ``targetColumns`` is empty.
        public var isOwned = false
        /// The to-many side of a to-one's inverse (`planet.residents` ↔ `person.homeworld`): no
        /// join table — the links are the target table's key columns of that to-one
        /// (``sourceColumns``, in ``joinTable``, the target's table), ``targetColumns`` its identity.
        public var isForeignKey = false

        /// `operations:` without `delete`: a present set adds its links and keeps the stored ones.
        public var keepsLinks = false

        /// Whether the links live in a join table of their own (not owned, not a to-one's inverse).
        public var hasJoinTable: Bool { !isOwned && !isForeignKey }
    }

    /// The entity's index in the model.
    public var entity: Int
    /// Its table.
    public var table: String
    /// Its columns, in slot order: attributes, then to-one foreign keys.
    public var columns: [Column]
    /// The slots of the identity attributes, in identity order. Empty: no identity.
    public var identitySlots: [Int]
    /// For an owned entity (its rows keyed by their owner and position): the column holding the
    /// position, the last of its identity — `position`, or `_position` when the entity declares a
    /// `position` attribute of its own (``EntityModel/completed()``).
    package var ownedPositionColumn: String { identitySlots.last.map { columns[$0].name } ?? "position" }
    /// Its to-one relationships (foreign key columns).
    public var toOne: [ToOne]
    /// Its to-many relationships (join tables).
    public var toMany: [ToMany]
    /// A parent entity's `kind` column (the last slot): the concrete entity of each row.
    public var kindSlot: Int?

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
                    if relationship.owned {
                        toMany.append(
                            ToMany(
                                relationship: r, target: t, joinTable: target.table, sourceColumns: entity.joinColumns(), targetColumns: [],
                                isOrdered: false, isOwned: true))
                        continue
                    }
                    let selfReference = t == index
                    if let name = relationship.inverse, let inverse = target.relationships.first(where: { $0.name == name }),
                        !inverse.isToMany
                    {
                        // A to-one's inverse: its key columns, in the target's table, are the links.
                        toMany.append(
                            ToMany(
                                relationship: r, target: t, joinTable: target.table,
                                sourceColumns: inverse.foreignKeyColumns(target: entity),
                                targetColumns: target.identity, isOrdered: false, isForeignKey: true))
                        continue
                    }
                    if let name = relationship.inverse, let s = target.relationships.firstIndex(where: { $0.name == name }),
                        (t, s) < (index, r)
                    {
                        // The inverse was declared first: its join table, read the other way.
                        let owner = target.relationships[s]
                        toMany.append(
                            ToMany(
                                relationship: r, target: t, joinTable: "\(target.table)_\(owner.name)",
                                sourceColumns: entity.joinColumns(prefix: selfReference ? owner.name : nil),
                                targetColumns: target.joinColumns(), isOrdered: false, isInverse: true))
                        continue
                    }
                    toMany.append(
                        ToMany(
                            relationship: r, target: t, joinTable: "\(entity.table)_\(relationship.name)",
                            sourceColumns: entity.joinColumns(),
                            targetColumns: target.joinColumns(prefix: selfReference ? relationship.name : nil),
                            isOrdered: relationship.isOrdered, keepsLinks: !relationship.deletesLinks))
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
            var kindSlot: Int?
            if model.hasChildren(entity.name) {
                kindSlot = columns.count
                columns.append(Column(name: "kind", type: .string))
            }
            return EntityLayout(
                entity: index, table: entity.table, columns: columns, identitySlots: identitySlots, toOne: toOne,
                toMany: toMany, kindSlot: kindSlot)
        }
    }
}

extension Array {
    subscript(safe index: Int) -> Element? {
        indices.contains(index) ? self[index] : nil
    }
}

/// An index that makes a foreign key a lookup (``EntityLayout/foreignKeyIndexes(of:)``): its
/// name, its table and its columns; each backend's DDL for it is `createStatement` (Store/ForeignKeys.swift).
package struct ForeignKeyIndex: Sendable, Equatable {
    package let name: String
    package let table: String
    package let columns: [String]
}

extension EntityLayout {
    /// The indexes that make every foreign key of this entity a lookup, in every backend: its to-one columns (unless a
    /// to-one's inverse indexes them already), and the target side of each join table it owns
    /// (whose primary key leads with the owner's side; an inverse indexes it from the other side).
    package func foreignKeyIndexes(of layouts: [EntityLayout]) -> [ForeignKeyIndex] {
        var indexes: [ForeignKeyIndex] = []
        for toOne in self.toOne where !layouts[toOne.target].identitySlots.isEmpty {
            let columns = toOne.slots.map { self.columns[$0].name }
            guard !columns.isEmpty, columns != Array(identitySlots.prefix(columns.count).map { self.columns[$0].name }) else {
                continue
            }
            indexes.append(ForeignKeyIndex(name: table + "_" + columns.joined(separator: "_"), table: table, columns: columns))
        }
        for toMany in self.toMany where toMany.hasJoinTable && !toMany.isInverse {
            let inverse =
                layouts.indices.contains(toMany.target)
                && layouts[toMany.target].toMany.contains { $0.isInverse && $0.joinTable == toMany.joinTable }
            guard !inverse, !toMany.targetColumns.isEmpty else { continue }
            indexes.append(
                ForeignKeyIndex(
                    name: toMany.joinTable + "_" + toMany.targetColumns.joined(separator: "_"), table: toMany.joinTable,
                    columns: toMany.targetColumns))
        }
        return indexes
    }
}
