import Dispatch
import Synchronization

/// The per-lane state decoding needs, bound to a decode lane's serial queue the way Core Data's
/// decoders reach their managed object context.
///
/// A context belongs to the **queue** it is bound to (through `DispatchSpecificKey`), not to a
/// thread: code running on that queue finds it with ``DecodingContext/current``, code running
/// anywhere else finds none. Each lane owns its context and its mutable state (the record mapper,
/// date caches, the objects decoded so far), so lanes never share anything mutable.
///
/// ```swift
/// let lane = DispatchQueue(label: "decode.1")
/// try DecodingContext.bind(DecodingContext(name: "decode.1"), to: lane)
/// lane.async { let context = DecodingContext.current }   // this lane's context
/// ```
///
/// For a one-off decode, a context can also travel in the decoder itself, on any queue:
///
/// ```swift
/// var decoder = IngotJSONDecoder()
/// decoder.userInfo[.ingotContext] = DecodingContext(name: "import")
/// let people = try decoder.decode([Person].self, from: bytes)
/// ```
///
/// A context serves one decode at a time: the queue it is bound to, or the decode whose
/// `userInfo` carries it (handing it to two decodes at once is the caller's bug, as using a
/// managed object context from two threads is).
public final class DecodingContext: @unchecked Sendable {  // mutable state confined to one decode at a time (above)
    private static let key = DispatchSpecificKey<DecodingContext>()

    /// A name for logs and tests (the lane's label).
    public let name: String
    /// Maps pipeline records, one mapper per resource of the pipeline (by index); empty for a
    /// context that only decodes Swift types.
    var mappers: [RecordMapper] = []
    /// The ``IngotEntity`` objects decoded on this context, by entity name and identity; a second
    /// object with the same identity replaces the first (later wins), as in a managed object context.
    public private(set) var registeredObjects: [String: [IdentityKey: any IngotEntity]] = [:]
    /// How many entity objects this context decoded.
    public private(set) var decodedCount = 0

    /// A context named `name` (for messages), bound to no queue yet.
    public init(name: String) {
        self.name = name
    }

    init(name: String, plans: [MappingPlan]) {
        self.name = name
        self.mappers = plans.map(RecordMapper.init(plan:))
    }

    /// The queue this context is bound to, once bound: its mutable state is confined there.
    private let boundQueue = Mutex<DispatchQueue?>(nil)

    /// Binds `context` to `queue`: code running on `queue` finds it as ``current``. Once only: a
    /// context is confined to one serial queue, and a queue has one context; binding either a
    /// second time (to another) throws ``IngotDecodingError/alreadyBound(context:queue:)``.
    public static func bind(_ context: DecodingContext, to queue: DispatchQueue) throws(IngotDecodingError) {
        if let other = queue.getSpecific(key: key), other !== context {
            throw .alreadyBound(context: other.name, queue: queue.label)
        }
        let bound = context.boundQueue.withLock { bound -> DispatchQueue? in
            if bound == nil { bound = queue }
            return bound
        }
        guard bound === queue else { throw .alreadyBound(context: context.name, queue: bound?.label ?? "?") }
        queue.setSpecific(key: key, value: context)
    }

    /// The context of the queue the caller runs on, or `nil` off any decode lane.
    public static var current: DecodingContext? {
        DispatchQueue.getSpecific(key: key)
    }

    /// The current context; throws ``IngotDecodingError/missingContext(codingPath:)`` when there is none.
    public static func current(codingPath: [any CodingKey]) throws -> DecodingContext {
        guard let context = current else { throw IngotDecodingError.missingContext(codingPath: codingPath) }
        return context
    }

    /// Records a decoded entity object under its identity.
    func register(_ object: any IngotEntity, identity: IdentityKey?) {
        decodedCount += 1
        guard let identity else { return }
        registeredObjects[type(of: object).entityName, default: [:]][identity] = object
    }

    /// The registered object of type `T` with `identity`, if this context decoded one.
    public func registeredObject<T: IngotEntity>(_ type: T.Type, identity: IdentityKey) -> T? {
        registeredObjects[T.entityName]?[identity] as? T
    }

    /// Forgets the registered objects (after they were saved).
    public func reset() {
        registeredObjects = [:]
        decodedCount = 0
    }
}

/// Errors of decoding Swift ``IngotEntity`` types.
public enum IngotDecodingError: Error, CustomStringConvertible {
    /// An ``IngotEntity`` was decoded outside of a decode lane: no ``DecodingContext`` is bound to
    /// the current queue.
    case missingContext(codingPath: [any CodingKey])
    /// A context already bound to a queue was bound to another, or a queue that has a context was
    /// given another: each lane has its own context, confined to it.
    case alreadyBound(context: String, queue: String)

    /// The error, with the coding path where it happened.
    public var description: String {
        switch self {
        case .missingContext(let path):
            let where_ = path.isEmpty ? "at the top level" : "at " + path.map(\.stringValue).joined(separator: ".")
            return
                "no DecodingContext on this queue (\(where_)): decode IngotEntity types on a queue bound with DecodingContext.bind(_:to:)"
        case .alreadyBound(let context, let queue):
            return
                "DecodingContext '\(context)' is bound to queue '\(queue)': a context belongs to one serial queue, and a queue has one context"
        }
    }
}
