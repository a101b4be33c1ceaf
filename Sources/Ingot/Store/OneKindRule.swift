/// One identity, one kind: a parent entity's row is of one child entity (its `kind`), so an
/// identity lives in one child table only. A record of another kind for an identity a sibling
/// child table holds (a vehicle numbered as a stored starship) is refused by the database — a
/// trigger on each child table — and the refusal is the safety net's (docs/reliability.md): the
/// record is rejected, `wrong_kind`, with its coding path and source, and the run goes on. The
/// first kind written wins; `transport JOIN starship` never returns a vehicle.
///
/// Each backend renders the rule in its own DDL (SQLite: a `BEFORE INSERT` trigger raising
/// `ABORT`; PostgreSQL: a PL/pgSQL trigger raising `check_violation`); the message starts with
/// ``reasonPrefix``, which the writer reads as the rejection's reason code.
package struct OneKindRule: Sendable, Equatable {
    /// The child table the trigger guards, its identity columns, and the sibling child tables.
    package var table: String
    package var identity: [String]
    package var siblings: [String]
    /// The parent entity's table and this child entity's name (for the message).
    package var parent: String
    package var kind: String

    /// The start of the database's message: what the writer maps to `wrong_kind`.
    package static let reasonPrefix = "wrong_kind:"

    /// The trigger's (and PostgreSQL's function's) name.
    package var name: String { "\(table)_one_kind" }

    /// The rules of `model`: one per child entity that has a sibling.
    package static func of(_ model: EntityModel) -> [OneKindRule] {
        model.entities.compactMap { entity in
            guard let parent = entity.parent else { return nil }
            let siblings = model.entities.filter { $0.parent == parent && $0.name != entity.name }.map(\.table)
            guard !siblings.isEmpty, let parentEntity = model.entities.first(where: { $0.name == parent }) else { return nil }
            return OneKindRule(
                table: entity.table, identity: entity.identity, siblings: siblings, parent: parentEntity.table, kind: entity.name)
        }
    }

    /// The message when `kind` meets an identity another child table holds.
    package var message: String {
        "\(OneKindRule.reasonPrefix) a row of \(parent) with this identity is of another kind than \(kind) (\(siblings.joined(separator: ", ")))"
    }
}
