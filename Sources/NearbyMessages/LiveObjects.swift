import DBus
import NearbyBusContract
import Synchronization

/// An object the daemon made for this client under a manager: it holds the
/// manager and ends the daemon's object (with `endMethod`) when the last Swift
/// reference to it goes. When nearbyd restarts, its manager makes it again
/// (``revive()``) on the new nearbyd, under a new path.
final class DaemonObject: Sendable {
    let manager: MessageManager
    let interface: String
    let endMethod: String
    /// The app's permission dialog given for it, exported while it lives.
    let dialog: DaemonCallee<[String]>?
    /// Makes the object on nearbyd with its strategy (the TTL left, after a
    /// restart), routes its signals to its handler (through ``Shared/track(_:)``)
    /// and returns its path.
    private let create: @Sendable (Strategy?) async throws -> ObjectPath
    private let strategy: Strategy?
    private let madeAt = ContinuousClock.now
    private let shared: Shared
    private let handler: @Sendable (ObjectEvent) -> Void
    private var bus: NearbyBus { manager.bus }

    /// What the object's route and the object share: the route tracks what
    /// it carries from the reply on, before the object exists.
    private final class Shared: Sendable {
        let state = Mutex(State(path: ObjectPath(stringLiteral: NearbyBusContract.rootPath)))

        func track(_ event: ObjectEvent) {
            state.withLock { state in
                switch event {
                case .found(let message, let info): state.found.append((message, info))
                case .lost(let message, let info):
                    if let index = state.found.firstIndex(where: { $0.message == message && $0.info.beacon?.id == info.beacon?.id }) {
                        state.found.remove(at: index)
                    }
                case .expired: state.ended = true
                case .propertiesChanged(let properties) where properties[DaemonObject.statusProperty] != nil:
                    state.statusUnsaid = false
                default: break
                }
            }
        }
    }

    private struct State {
        var path: ObjectPath
        /// Whether ``path`` is the object on the nearbyd that owns the name
        /// now. Until it is made again a stale path is never used: the new
        /// nearbyd may have given it to another object.
        var current = true
        /// Unpublished, unsubscribed or expired: not made again.
        var ended = false
        /// The messages found and not lost since, reported lost when nearbyd goes.
        var found: [(message: Message, info: MessageInfo)] = []
        /// The library said `starting` when nearbyd went, and the new nearbyd
        /// has not said the status since: made again, the object reads it.
        var statusUnsaid = false
    }

    /// The daemon's object for it now (the last one while it is being made again).
    var path: ObjectPath { shared.state.withLock { $0.path } }

    /// ``path`` while it is current; else nearbyd restarted and the object is
    /// not made again yet.
    private var currentPath: ObjectPath {
        get throws(NearbyMessagesError) {
            guard let path = shared.state.withLock({ $0.current ? $0.path : nil }) else {
                throw NearbyMessagesError(kind: .daemonUnavailable, message: Self.waitingReason)
            }
            return path
        }
    }

    /// Makes the object with `create` (given the strategy, and the route for
    /// its signals) and registers it with `manager` to be made again after a
    /// restart; `handler` gets its signals.
    static func make(manager: MessageManager, interface: String, endMethod: String, dialog: DaemonCallee<[String]>?,
                     strategy: Strategy?, handler: @escaping @Sendable (ObjectEvent) -> Void,
                     create: @escaping @Sendable (Strategy?, _ route: @escaping @Sendable (ObjectEvent) -> Void) async throws -> ObjectPath)
        async throws -> DaemonObject {
        // The route keeps what it shares with the object, not the object:
        // the bus keeps the route.
        let shared = Shared()
        let route: @Sendable (ObjectEvent) -> Void = { event in
            shared.track(event)
            handler(event)
        }
        let path = try await create(strategy, route)
        shared.state.withLock { $0.path = path }
        let object = DaemonObject(shared: shared, manager: manager, interface: interface, endMethod: endMethod, dialog: dialog,
                                  strategy: strategy, handler: handler) { strategy in try await create(strategy, route) }
        await manager.adopt(object)
        return object
    }

    private init(shared: Shared, manager: MessageManager, interface: String, endMethod: String, dialog: DaemonCallee<[String]>?,
                 strategy: Strategy?, handler: @escaping @Sendable (ObjectEvent) -> Void,
                 create: @escaping @Sendable (Strategy?) async throws -> ObjectPath) {
        self.shared = shared
        self.manager = manager
        self.interface = interface
        self.endMethod = endMethod
        self.dialog = dialog
        self.strategy = strategy
        self.handler = handler
        self.create = create
    }

    deinit {
        if let path = try? currentPath {
            bus.unroute(path)
            bus.sendAndForget(path, interface, endMethod)
        }
        if let dialog { Task { @BusActor in dialog.unexport() } }
    }

    /// nearbyd went: what was found is lost, and the status says why nothing
    /// runs. Returns the path its signals came to.
    func daemonLeft() -> ObjectPath {
        let (path, found, ended) = shared.state.withLock { state in
            defer {
                state.found = []
                state.current = false
                state.statusUnsaid = !state.ended
            }
            return (state.path, state.found, state.ended)
        }
        guard !ended else { return path }
        for (message, info) in found { handler(.lost(message, info)) }
        handler(.propertiesChanged([Self.statusProperty: .string("starting"), Self.statusReasonProperty: .string(Self.waitingReason)]))
        return path
    }

    static let waitingReason = "nearbyd stopped; waiting for it to start again"

    /// Makes the object again on a nearbyd that started anew, with the TTL
    /// left; one whose TTL ran out meanwhile expires instead. A failure is
    /// reported through the status (`inactive` and why).
    func revive() async {
        guard !shared.state.withLock({ $0.ended }) else { return }
        var strategy = self.strategy
        if let ttl = strategy?.ttlSeconds {
            let left = Double(ttl) - (ContinuousClock.now - madeAt) / .seconds(1)
            guard left > 0 else {
                shared.state.withLock { $0.ended = true }
                handler(.expired)
                return
            }
            strategy?.ttlSeconds = UInt32(left.rounded(.up))
        }
        do {
            let path = try await create(strategy)
            shared.state.withLock { state in
                state.path = path
                state.current = true
            }
        } catch {
            return couldNotRevive(error)
        }
        // The new object says its status only when it changes: one made as it
        // stays (`inactive` in the background, say) would leave the app at `starting`.
        // Asked only while the gap is unsaid, and reported only if it still is once read.
        guard shared.state.withLock({ $0.statusUnsaid }), let status = try? await status, let reason = try? await statusReason,
              shared.state.withLock({ state in defer { state.statusUnsaid = false }; return state.statusUnsaid }) else { return }
        handler(.propertiesChanged([Self.statusProperty: .string(status), Self.statusReasonProperty: .string(reason)]))
    }

    /// The object, or its manager, could not be made again: the status says why.
    func couldNotRevive(_ error: any Error) {
        handler(.propertiesChanged([
            Self.statusProperty: .string("inactive"),
            Self.statusReasonProperty: .string("nearbyd restarted and could not make it again: \(error)"),
        ]))
    }

    /// The properties the status is in: the library's own changes of it
    /// (nearbyd gone) reach the handler under the same names as nearbyd's.
    fileprivate static let statusProperty = NearbyBusContract.PublicationOrSubscription.status.name
    private static let statusReasonProperty = NearbyBusContract.PublicationOrSubscription.statusReason.name

    var status: String {
        get async throws { try await bus.property(currentPath, interface, Self.statusProperty).string ?? "" }
    }

    var statusReason: String {
        get async throws { try await bus.property(currentPath, interface, Self.statusReasonProperty).string ?? "" }
    }

    /// Ends the object; while nearbyd restarts, that is not to make it again.
    func end() async throws {
        guard let path = try? currentPath else {
            shared.state.withLock { $0.ended = true }
            return
        }
        try await bus.call(path, interface, endMethod)
        shared.state.withLock { $0.ended = true }
    }
}

/// A live publication; unpublished when released or deallocated
/// (GNSPublication). It keeps its manager alive. When nearbyd restarts it is
/// published again (see ``MessageManager``).
public final class Publication: Sendable {
    let object: DaemonObject
    /// The daemon's object for it now (a new one after nearbyd restarted).
    public var path: ObjectPath { object.path }
    /// The manager it was made from, kept alive by it.
    public var manager: MessageManager { object.manager }

    init(object: DaemonObject) {
        self.object = object
    }

    /// `starting` (waiting for the server, a medium, or a nearbyd that
    /// stopped to start again), `active`, or `inactive` (the app's permission
    /// was revoked, or its manager is in the background and it may not run
    /// there).
    public var status: String {
        get async throws { try await object.status }
    }

    /// Why it is not `active`, in a sentence for people (the server cannot
    /// be reached, refuses the API key or this publication, no medium works,
    /// no permission, the background); empty when it is.
    public var statusReason: String {
        get async throws { try await object.statusReason }
    }

    /// Ends the publication now rather than at deallocation; subscribers nearby lose it.
    public func unpublish() async throws {
        try await object.end()
    }
}

/// A live subscription; its handlers are called until it is released or
/// deallocated (GNSSubscription). It keeps its manager alive. When nearbyd
/// restarts, what it had found is reported lost and it subscribes again
/// (see ``MessageManager``).
public final class Subscription: Sendable {
    let object: DaemonObject
    /// The daemon's object for it now (a new one after nearbyd restarted).
    public var path: ObjectPath { object.path }
    /// The manager it was made from, kept alive by it.
    public var manager: MessageManager { object.manager }

    init(object: DaemonObject) {
        self.object = object
    }

    /// `starting` (waiting for the server, a medium, or a nearbyd that
    /// stopped to start again), `active`, or `inactive` (the app's permission
    /// was revoked, or its manager is in the background and it may not run
    /// there).
    public var status: String {
        get async throws { try await object.status }
    }

    /// Why it is not `active`, in a sentence for people; empty when it is.
    public var statusReason: String {
        get async throws { try await object.statusReason }
    }

    /// Ends the subscription now rather than at deallocation; its handlers are not called again.
    public func unsubscribe() async throws {
        try await object.end()
    }
}
