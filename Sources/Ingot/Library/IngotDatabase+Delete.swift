import Foundation

extension IngotDatabase {
    /// Deletes the stored `T`s `predicate` selects (`#Predicate { _ in true }`: every one), in one
    /// transaction, with the model's delete rules, as `write: .replace` deletes: what pointed at a
    /// deleted row is nullified, the join rows naming it go, and a relationship with
    /// `delete: cascade` (``IngotRule/deleteCascade``) takes its targets with it. Returns how many
    /// rows were deleted, the cascade's included. The predicate translates as
    /// ``fetch(_:where:sortBy:limit:offset:including:nested:)``'s does, relationships included:
    ///
    /// ```swift
    /// try await db.delete(Issue.self, where: #Predicate { $0.user?.login == "spammer" })
    /// ```
    @discardableResult
    public func delete<T: IngotEntity>(_ type: T.Type, where predicate: Predicate<T>) async throws -> Int {
        let turn = try await writersTurn("delete")
        defer { turn.give() }
        return try await delete(type, predicate: predicate, identity: nil, held: nil)
    }

    /// Deletes the stored `T` whose identity is `id` (as ``delete(_:where:)`` deletes); 0 when
    /// none is stored. For a type with a single identity property.
    @discardableResult
    public func delete<T: IngotEntity>(_ type: T.Type, id: some Sendable) async throws -> Int {
        let turn = try await writersTurn("delete")
        defer { turn.give() }
        return try await delete(type, predicate: nil, identity: id, held: nil)
    }

    /// A delete: in a transaction of its own, or (`held`) inside a transaction's.
    func delete<T: IngotEntity>(_ type: T.Type, predicate: Predicate<T>?, identity: (any Sendable)?, held: HeldStore?) async throws
        -> Int
    {
        try checkOpen()
        guard let index = model.index(of: T.entityName) else {
            throw StoreError.conflict("\(T.self) (entity '\(T.entityName)') is not among this database's entities")
        }
        let entity = model.entities[index]
        if let parent = entity.parent {
            throw IngotQueryError(message: "\(T.self) is a kind of \(parent): its rows are deleted with their \(parent) rows")
        }
        let layouts = EntityLayout.layouts(of: model)
        let layout = layouts[index]
        guard !layout.identitySlots.isEmpty else {
            throw IngotQueryError(message: "\(T.self) has no identity: its rows cannot be named to delete")
        }
        var columns = QueryColumns(typeName: "\(T.self)", entity: entity, layout: layout)
        columns.world = (model, layouts)
        var query = try IngotDatabase.rowQuery(predicate: predicate, sortBy: [], columns: columns, levels: [index], layouts: layouts)
        query.columns = layout.identitySlots.map { layout.columns[$0] }
        if let identity {
            guard layout.identitySlots.count == 1 else {
                throw IngotQueryError(message: "\(T.self) has a composite identity: delete it with a predicate on its identity properties")
            }
            query.filter = .compare(.column(layout.columns[layout.identitySlots[0]].name), .equal, try RowExpression.constant(identity))
        }
        let selecting = query
        return try await onQueue { try self.deleteRows(selecting, of: index, held: held) }
    }

    /// The rows `query` selects deleted, on the database's queue: in a transaction of their own,
    /// or in a savepoint of the held transaction (undone alone when it fails).
    private func deleteRows(_ query: RowQuery, of index: Int, held: HeldStore?) throws -> Int {
        let rows = try reading(in: held) { reader in try reader.select(query) }
        guard !rows.isEmpty else { return 0 }
        let keys = Set(rows.map { $0.count == 1 ? IdentityKey.single($0[0]) : .composite($0) })
        let store = try held?.store ?? self.store.open(model: model, options: StoreOpening())
        do {
            let deleted = try store.delete(.listed(keys), of: index, sparing: [:])
            try store.commit()
            if held == nil {
                try store.close()
                observers.committed()
            }
            return deleted
        } catch {
            try? store.rollback()
            if held == nil { try? store.close() }
            throw error
        }
    }
}
