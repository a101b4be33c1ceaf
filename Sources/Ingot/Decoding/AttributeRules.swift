/// What a value of one attribute goes through before it is stored: today its conversion to the
/// attribute's type (strict, or with `coerce: true` from text), the home of the value rules to
/// come (`pattern`, `values`, `grouping`, `on_invalid`, `default`: docs/pipelines.md). One per
/// attribute slot of a ``MappingPlan/EntityPlan``; the record mapper asks it for every value, and
/// takes the plain-text fast path (a JSON string's bytes stored as they are) only when it says no
/// rule would change the text.
struct AttributeRules: Sendable {
    /// The stored type.
    var type: AttributeType
    /// `coerce: true`: text is converted to the type (`"42"` → 42).
    var coerce: Bool

    init(_ attribute: Attribute) {
        type = attribute.type
        coerce = attribute.coerce
    }

    /// Whether a JSON string is stored exactly as the page spells it: a string attribute that no
    /// rule rewrites. A rule added here must make this `false` when it applies.
    var storesTextAsIs: Bool {
        if case .string = type { true } else { false }
    }
}
