/// A service as its clients see it: a well-known name, the connection that
/// owns it now, and signals believed only when that connection sent them.
///
/// Why this is needed: dbus-daemon delivers a signal addressed to one
/// connection (a unicast signal) whatever that connection's match rules say,
/// and sd-bus compares a rule's `sender='well.known.Name'` with any unique
/// name it receives as a match (it cannot know which names a sender owns).
/// So any program on the bus can send a client a signal that looks as if the
/// service sent it, `NameOwnerChanged` included. Here the owner is asked once
/// (`GetNameOwner`) and followed through `NameOwnerChanged` sent by the bus
/// daemon itself: its messages carry the sender `org.freedesktop.DBus`, a
/// name no client can have, since the bus daemon sets every sender.
///
/// Every client in the project that listens to a service's signals does it
/// through one of these, so none keeps its own copy of the checks.
@BusActor
public final class BusService {
    /// The service's well-known name, such as `org.bluez`.
    public let name: String
    /// The unique name of the connection that owns ``name`` now; nil while nobody does.
    public private(set) var owner: String?

    private let connection: BusConnection
    private var ownerChanges: SignalSubscription?
    /// Set once GetNameOwner has been answered: `NameOwnerChanged` received
    /// before its answer is older than the answer, and already in it.
    private var answered = false
    private var observers: [UInt64: @BusActor (String?) -> Void] = [:]
    private var lastObserver: UInt64 = 0

    static let bus = "org.freedesktop.DBus"
    static let busPath: ObjectPath = "/org/freedesktop/DBus"

    /// Follows who owns `name` on `connection`; returns once the owner is known.
    /// Throws when the bus refuses the match or the question.
    public init(_ name: String, on connection: BusConnection) async throws(DBusError) {
        self.name = name
        self.connection = connection
        // The match is in place before the question is asked, so no change
        // after the answer is missed; changes before it are in the answer.
        ownerChanges = try await connection.addMatch(
            "type='signal',sender='\(Self.bus)',path='\(Self.busPath)',interface='\(Self.bus)',"
                + "member='NameOwnerChanged',arg0='\(name)'"
        ) { [weak self] signal in self?.nameOwnerChanged(signal) }
        // Applied as sd-bus dispatches the answer, in order with the signals:
        // a change right behind it is applied after it, never before.
        try await connection.callInOrder(destination: Self.bus, path: Self.busPath, interface: Self.bus, member: "GetNameOwner",
                                         arguments: { writer throws(DBusError) in try writer.append(name) }
        ) { [weak self] answer throws(DBusError) in
            switch answer {
            case .success(let reader): self?.owner = try reader.read(String.self)
            case .failure(let error) where error.name == "org.freedesktop.DBus.Error.NameHasNoOwner": self?.owner = nil
            case .failure(let error): throw error
            }
            self?.answered = true
        }
    }

    /// Whether `sender` (a message's unique sender name) is the service's owner now.
    public func isOwner(_ sender: String) -> Bool {
        owner != nil && sender == owner
    }

    /// Runs `handler` with the new owner (nil: none) each time the name changes
    /// hands, until the returned observation is cancelled or dropped.
    public func onOwnerChange(_ handler: @escaping @BusActor (String?) -> Void) -> OwnerObservation {
        lastObserver += 1
        observers[lastObserver] = handler
        return OwnerObservation(service: self, id: lastObserver)
    }

    fileprivate func removeObserver(_ id: UInt64) {
        observers[id] = nil
    }

    /// Subscribes to the service's signals that match `rule` (match rule keys
    /// other than `type` and `sender`, such as `interface='org.bluez.Device1'`;
    /// empty for all). `handler` runs only for signals the owner sent; others
    /// are dropped unseen. Returns once the bus has installed the match.
    public func addMatch(
        _ rule: String, handler: @escaping @BusActor (ReceivedSignal) -> Void
    ) async throws(DBusError) -> SignalSubscription {
        let full = "type='signal',sender='\(name)'" + (rule.isEmpty ? "" : "," + rule)
        // The bus daemon filters broadcasts by the name's owner; unicast signals
        // reach us whatever the rule. The subscription keeps the service, and
        // so the following of its owner, alive.
        return try await connection.addMatch(full) { signal in
            guard self.isOwner(signal.sender) else { return }
            handler(signal)
        }
    }

    private func nameOwnerChanged(_ signal: ReceivedSignal) {
        // sd-bus takes a rule's well-known sender to match any sender, so it is checked here.
        guard answered, signal.sender == Self.bus, signal.path == Self.busPath, signal.interface == Self.bus,
              signal.member == "NameOwnerChanged",
              let changed = try? signal.arguments.read(String.self), changed == name,
              (try? signal.arguments.read(String.self)) != nil,
              let newOwner = try? signal.arguments.read(String.self) else { return }
        let now = newOwner.isEmpty ? nil : newOwner
        guard now != owner else { return }
        owner = now
        // A handler may cancel observations, its own or others'.
        for id in observers.keys.sorted() { observers[id]?(now) }
    }
}

/// A handler of ``BusService/onOwnerChange(_:)``; `cancel()` or dropping it ends it.
@BusActor
public final class OwnerObservation {
    private weak var service: BusService?
    private let id: UInt64

    fileprivate init(service: BusService, id: UInt64) {
        self.service = service
        self.id = id
    }

    public func cancel() {
        service?.removeObserver(id)
        service = nil
    }

    isolated deinit {
        cancel()
    }
}
