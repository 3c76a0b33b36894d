import CSystemd
import Glibc

/// A connection to a message bus, owned by the bus thread (``BusActor``).
///
/// Calls to other peers suspend the caller without blocking the thread: sd-bus
/// delivers the reply to a callback on the loop, which resumes the caller.
@BusActor
public final class BusConnection {
    /// Which bus to connect to.
    public enum Address: Sendable, Equatable, CustomStringConvertible {
        case system
        /// The session bus of `DBUS_SESSION_BUS_ADDRESS` (or `$XDG_RUNTIME_DIR/bus`).
        case session
        /// A bus at a D-Bus server address such as `unix:path=/run/x/bus`.
        case address(String)

        public var description: String {
            switch self {
            case .system: "system bus"
            case .session: "session bus"
            case .address(let address): address
            }
        }
    }

    let bus: OpaquePointer
    let objects = ObjectTable()
    private var pump: BusPump?
    private var pacer: OversizedCallPacer?
    private var disconnectHandlers: [@BusActor () -> Void] = []
    private var disconnectSlot: OpaquePointer?
    /// What is waiting on the bus (replies, match installations), each with how
    /// to end it: sd-bus does not answer them once the connection is closed.
    private var waiting: [ObjectIdentifier: @BusActor (DBusError) -> Void] = [:]

    /// Connects and says Hello; the connection is served by the bus thread from now on.
    public init(_ address: Address) throws(DBusError) {
        var handle: OpaquePointer?
        switch address {
        case .system:
            try check(sd_bus_open_system(&handle), "connecting to the system bus")
        case .session:
            try check(sd_bus_open_user(&handle), "connecting to the session bus")
        case .address(let address):
            try check(sd_bus_new(&handle), "creating a bus connection")
            defer { if handle != nil, sd_bus_is_open(handle) <= 0 { handle = sd_bus_unref(handle) } }
            try check(sd_bus_set_address(handle, address), "setting bus address '\(address)'")
            try check(sd_bus_set_bus_client(handle, 1), "configuring the bus connection")
            try check(sd_bus_start(handle), "connecting to \(address)")
        }
        guard let handle else { throw .failed("connecting to \(address)") }
        bus = handle
        do {
            pump = try BusPump(bus)
        } catch {
            sd_bus_unref(bus)
            throw error
        }
        try watchDisconnect()
    }

    isolated deinit {
        abandonWaiting()
        if let disconnectSlot { sd_bus_slot_unref(disconnectSlot) }
        objects.close()
        pacer?.stop()
        pump?.stop()
        sd_bus_flush_close_unref(bus)
    }

    /// This connection's unique name, such as `:1.42`.
    public var uniqueName: String {
        var name: UnsafePointer<CChar>?
        guard sd_bus_get_unique_name(bus, &name) >= 0, let name else { return "" }
        return String(cString: name)
    }

    /// Takes a well-known name. Throws `NameTaken` (org.freedesktop.DBus.Error.AddressInUse)
    /// when another connection owns it.
    public func requestName(_ name: String) throws(DBusError) {
        let result = sd_bus_request_name(bus, name, 0)
        if result == -EEXIST {
            throw DBusError("org.freedesktop.DBus.Error.AddressInUse", "the name \(name) is owned by another connection")
        }
        try check(result, "requesting the name \(name)")
    }

    /// Runs `handler` when the connection to the bus is lost.
    public func onDisconnect(_ handler: @escaping @BusActor () -> Void) {
        disconnectHandlers.append(handler)
    }

    /// Flushes what is queued and closes the connection; peers see it leave the
    /// bus. Calls still waiting for a reply throw `Disconnected`.
    public func close() {
        sd_bus_flush(bus)
        sd_bus_close(bus)
        pacer?.stop()
        pump?.stop()
        abandonWaiting()
    }

    /// Paces the oversized messages this connection receives
    /// (``OversizedCallBudget``): a method call found oversized once the budget
    /// is spent is not run but answered with `refusal`, held back until the
    /// budget would have covered it. Calls of usual size are never touched.
    public func paceOversizedCalls(_ budget: OversizedCallBudget, refusal: DBusError) throws(DBusError) {
        pacer?.stop()
        let pacer = try OversizedCallPacer(bus, budget: budget, refusal: refusal)
        self.pacer = pacer
        pump?.pacer = pacer
    }

    private func abandonWaiting() {
        let abandoned = waiting.values
        waiting.removeAll()
        for end in abandoned { end(DBusError("org.freedesktop.DBus.Error.Disconnected", "the connection was closed")) }
    }

    /// Whether the connection is still open.
    public var isOpen: Bool { sd_bus_is_open(bus) > 0 }

    // MARK: Calls

    /// Calls a method and decodes its reply with `decode`, which runs on the bus
    /// thread while the reply message lives. Throws the error the peer answered with.
    public func call<Result: Sendable>(
        destination: String, path: ObjectPath, interface: String, member: String,
        timeoutMicroseconds: UInt64 = 0,
        arguments: @BusActor (MessageWriter) throws(DBusError) -> Void = { _ in },
        decode: @escaping @BusActor (MessageReader) throws(DBusError) -> Result
    ) async throws(DBusError) -> Result {
        try await callInOrder(destination: destination, path: path, interface: interface, member: member,
                              timeoutMicroseconds: timeoutMicroseconds, arguments: arguments) { answer throws(DBusError) in
            try decode(answer.get())
        }
    }

    /// Calls a method and hands its answer, the reply or the error, to `answered`
    /// as sd-bus dispatches it: in order with the signals around it, before any
    /// later message is handled. (The caller resumes later, when the bus actor
    /// gets to it.) What `answered` returns or throws is the call's outcome.
    func callInOrder<Value: Sendable>(
        destination: String, path: ObjectPath, interface: String, member: String,
        timeoutMicroseconds: UInt64 = 0,
        arguments: @BusActor (MessageWriter) throws(DBusError) -> Void = { _ in },
        answered: @escaping @BusActor (Swift.Result<MessageReader, DBusError>) throws(DBusError) -> Value
    ) async throws(DBusError) -> Value {
        let message = try newMethodCall(destination: destination, path: path, interface: interface, member: member)
        defer { sd_bus_message_unref(message) }
        try arguments(MessageWriter(message))
        do {
            return try await withCheckedThrowingContinuation { continuation in
                let pending = PendingCall(continuation: continuation, answered: answered)
                var slot: OpaquePointer?
                let result = sd_bus_call_async(bus, &slot, message, pendingCallReply,
                                               Unmanaged.passUnretained(pending).toOpaque(), timeoutMicroseconds)
                guard result >= 0 else {
                    continuation.resume(throwing: DBusError.system(result, "calling \(interface).\(member)"))
                    return
                }
                // The table holds the call (and through it the slot) until it is answered or abandoned.
                pending.slot = slot
                let key = ObjectIdentifier(pending)
                pending.finished = { [weak self] in self?.waiting.removeValue(forKey: key) }
                waiting[key] = { error in pending.fail(error) }
            }
        } catch let error as DBusError {
            throw error
        } catch {
            throw .failed("\(error)")
        }
    }

    /// Calls a method whose reply carries nothing the caller needs.
    public func call(
        destination: String, path: ObjectPath, interface: String, member: String,
        arguments: @BusActor (MessageWriter) throws(DBusError) -> Void = { _ in }
    ) async throws(DBusError) {
        try await call(destination: destination, path: path, interface: interface, member: member,
                       arguments: arguments) { _ throws(DBusError) in () }
    }

    /// Sends a method call without waiting for (or wanting) a reply.
    public func send(
        destination: String, path: ObjectPath, interface: String, member: String,
        arguments: @BusActor (MessageWriter) throws(DBusError) -> Void = { _ in }
    ) throws(DBusError) {
        let message = try newMethodCall(destination: destination, path: path, interface: interface, member: member)
        defer { sd_bus_message_unref(message) }
        try check(sd_bus_message_set_expect_reply(message, 0), "building a call")
        try arguments(MessageWriter(message))
        try check(sd_bus_send(bus, message, nil), "sending \(interface).\(member)")
    }

    /// The uid of the process behind a connection, asked of the bus daemon.
    public func unixUser(of name: String) async throws(DBusError) -> UInt32 {
        try await call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                       interface: "org.freedesktop.DBus", member: "GetConnectionUnixUser",
                       arguments: { writer throws(DBusError) in try writer.append(name) }
        ) { reader throws(DBusError) in try reader.read(UInt32.self) }
    }

    /// The same, answered before returning: the bus thread waits for the bus
    /// daemon meanwhile. For rare privileged checks in handlers that must answer
    /// at once (property setters); everything else uses the async form.
    public func unixUserBlocking(of name: String) throws(DBusError) -> UInt32 {
        let message = try newMethodCall(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                        interface: "org.freedesktop.DBus", member: "GetConnectionUnixUser")
        defer { sd_bus_message_unref(message) }
        try MessageWriter(message).append(name)
        var error = sd_bus_error()
        defer { sd_bus_error_free(&error) }
        var reply: OpaquePointer?
        if sd_bus_call(bus, message, 0, &error, &reply) < 0 {
            throw sd_bus_error_is_set(&error) != 0 ? DBusError(&error) : .failed("GetConnectionUnixUser failed")
        }
        defer { sd_bus_message_unref(reply) }
        return try MessageReader(reply!).read(UInt32.self)
    }

    /// The process id behind a connection, asked of the bus daemon.
    public func unixProcessID(of name: String) async throws(DBusError) -> UInt32 {
        try await call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                       interface: "org.freedesktop.DBus", member: "GetConnectionUnixProcessID",
                       arguments: { writer throws(DBusError) in try writer.append(name) }
        ) { reader throws(DBusError) in try reader.read(UInt32.self) }
    }

    // MARK: Signals

    /// Emits a signal; with a `destination` it goes to that connection only.
    public func emitSignal(
        path: ObjectPath, interface: String, member: String, destination: String? = nil,
        arguments: @BusActor (MessageWriter) throws(DBusError) -> Void
    ) throws(DBusError) {
        var message: OpaquePointer?
        try check(sd_bus_message_new_signal(bus, &message, path.rawValue, interface, member),
                  "creating signal \(interface).\(member)")
        defer { sd_bus_message_unref(message) }
        if let destination {
            try check(sd_bus_message_set_destination(message, destination), "addressing signal to \(destination)")
        }
        try arguments(MessageWriter(message!))
        try check(sd_bus_send(bus, message, nil), "sending signal \(interface).\(member)")
    }

    /// Subscribes to signals matching a D-Bus match rule; returns once the bus has
    /// installed the match, so no signal sent after this returns is missed.
    public func addMatch(
        _ rule: String, handler: @escaping @BusActor (ReceivedSignal) -> Void
    ) async throws(DBusError) -> SignalSubscription {
        let subscription = SignalSubscription(handler: handler)
        var slot: OpaquePointer?
        do {
            let key = ObjectIdentifier(subscription)
            defer { waiting.removeValue(forKey: key) }
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                subscription.installed = continuation
                let result = sd_bus_add_match_async(bus, &slot, rule, signalTrampoline, matchInstalled,
                                                    Unmanaged.passUnretained(subscription).toOpaque())
                if result < 0 {
                    subscription.installed = nil
                    continuation.resume(throwing: DBusError.system(result, "adding match \(rule)"))
                } else {
                    waiting[key] = { error in subscription.abandonInstallation(error) }
                }
            }
        } catch let error as DBusError {
            if let slot { sd_bus_slot_unref(slot) }
            throw error
        } catch {
            throw .failed("\(error)")
        }
        subscription.slot = slot
        return subscription
    }

    // MARK: Internals

    func newMethodCall(destination: String, path: ObjectPath, interface: String, member: String) throws(DBusError) -> OpaquePointer {
        var message: OpaquePointer?
        try check(sd_bus_message_new_method_call(bus, &message, destination, path.rawValue, interface, member),
                  "calling \(interface).\(member) on \(destination)")
        return message!
    }

    private func watchDisconnect() throws(DBusError) {
        let onDisconnected: sd_bus_message_handler_t = { _, userdata, _ in
            BusActor.assumeIsolated(userdata) { userdata in
                let connection = Unmanaged<BusConnection>.fromOpaque(userdata!).takeUnretainedValue()
                for handler in connection.disconnectHandlers { handler() }
            }
            return 0
        }
        var slot: OpaquePointer?
        let rule = "type='signal',sender='org.freedesktop.DBus.Local',interface='org.freedesktop.DBus.Local',member='Disconnected'"
        // The Local interface is synthesised by sd-bus, so this installs no match on the bus.
        try check(sd_bus_add_match(bus, &slot, rule, onDisconnected, Unmanaged.passUnretained(self).toOpaque()),
                  "watching for disconnection")
        disconnectSlot = slot
    }
}

/// A signal delivered to a ``SignalSubscription`` handler; valid during the handler only.
@BusActor
public struct ReceivedSignal {
    public let sender: String
    public let path: ObjectPath
    public let interface: String
    public let member: String
    public let arguments: MessageReader

    init(_ message: OpaquePointer) {
        sender = CString.string(sd_bus_message_get_sender(message))
        path = ObjectPath(trusted: CString.string(sd_bus_message_get_path(message), absent: "/"))
        interface = CString.string(sd_bus_message_get_interface(message))
        member = CString.string(sd_bus_message_get_member(message))
        arguments = MessageReader(message)
    }
}

/// A live signal match; `cancel()` (or dropping it) removes the match.
@BusActor
public final class SignalSubscription {
    fileprivate let handler: @BusActor (ReceivedSignal) -> Void
    fileprivate var installed: CheckedContinuation<Void, any Error>?
    fileprivate var slot: OpaquePointer?

    fileprivate init(handler: @escaping @BusActor (ReceivedSignal) -> Void) {
        self.handler = handler
    }

    public func cancel() {
        if let slot { sd_bus_slot_unref(slot) }
        slot = nil
    }

    fileprivate func abandonInstallation(_ error: DBusError) {
        guard let continuation = installed else { return }
        installed = nil
        continuation.resume(throwing: error)
    }

    isolated deinit {
        cancel()
    }
}

private let signalTrampoline: sd_bus_message_handler_t = { message, userdata, _ in
    BusActor.assumeIsolated((message, userdata)) { message, userdata in
        let subscription = Unmanaged<SignalSubscription>.fromOpaque(userdata!).takeUnretainedValue()
        subscription.handler(ReceivedSignal(message!))
    }
    return 0
}

private let matchInstalled: sd_bus_message_handler_t = { message, userdata, _ in
    BusActor.assumeIsolated((message, userdata)) { message, userdata in
        BusPump.dispatched = true
        let subscription = Unmanaged<SignalSubscription>.fromOpaque(userdata!).takeUnretainedValue()
        guard let continuation = subscription.installed else { return }
        subscription.installed = nil
        if let error = sd_bus_message_get_error(message), sd_bus_error_is_set(error) != 0 {
            continuation.resume(throwing: DBusError(error))
        } else {
            continuation.resume()
        }
    }
    return 0
}

/// A method call in flight: the continuation to resume, what to make of the
/// answer, and the sd-bus slot that delivers it. Answered once: by the reply
/// or error (or its timeout), or by the connection closing first.
@BusActor
private final class PendingCall<Value: Sendable> {
    private var continuation: CheckedContinuation<Value, any Error>?
    private let answered: @BusActor (Swift.Result<MessageReader, DBusError>) throws(DBusError) -> Value
    var slot: OpaquePointer?
    /// Takes the call off its connection's table, which is what keeps it alive.
    var finished: @BusActor () -> Void = {}

    init(continuation: CheckedContinuation<Value, any Error>,
         answered: @escaping @BusActor (Swift.Result<MessageReader, DBusError>) throws(DBusError) -> Value) {
        self.continuation = continuation
        self.answered = answered
    }

    func complete(_ message: OpaquePointer) {
        guard let continuation = end() else { return }
        let answer: Swift.Result<MessageReader, DBusError>
        if let error = sd_bus_message_get_error(message), sd_bus_error_is_set(error) != 0 {
            answer = .failure(DBusError(error))
        } else {
            answer = .success(MessageReader(message))
        }
        do {
            continuation.resume(returning: try answered(answer))
        } catch {
            continuation.resume(throwing: error)
        }
    }

    func fail(_ error: DBusError) {
        end()?.resume(throwing: error)
    }

    private func end() -> CheckedContinuation<Value, any Error>? {
        guard let continuation else { return nil }
        self.continuation = nil
        if let slot { sd_bus_slot_unref(slot) }
        slot = nil
        finished()
        return continuation
    }
}

/// Generic C callbacks cannot be written, so the reply callback recovers the
/// concrete `PendingCall` through a protocol.
@BusActor
private protocol ReplyReceiver: AnyObject {
    func complete(_ message: OpaquePointer)
}

extension PendingCall: ReplyReceiver {}

private let pendingCallReply: sd_bus_message_handler_t = { message, userdata, _ in
    BusActor.assumeIsolated((message, userdata)) { message, userdata in
        BusPump.dispatched = true
        // Retained by the connection's table until `complete` takes it off.
        let receiver = Unmanaged<AnyObject>.fromOpaque(userdata!).takeUnretainedValue() as! ReplyReceiver
        receiver.complete(message!)
    }
    return 0
}
