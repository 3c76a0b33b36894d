import CSystemd

/// An incoming method call, valid while its handler runs. The handler reads
/// ``arguments`` and answers exactly once: ``reply(_:)`` or ``fail(_:)`` now,
/// or ``deferReply()`` to answer later (after an await) without holding up the
/// bus. A handler must not keep the call itself: the message belongs to sd-bus
/// until the handler returns, which spares every call a reference count and a
/// deinit on the bus actor.
@BusActor
public final class MethodCall {
    public private(set) var arguments: MessageReader
    private var answer: Answer
    private var deferred = false

    private init(_ message: OpaquePointer) {
        answer = Answer(message: message)
        arguments = MessageReader(message)
    }

    /// The call object of the last call handled, kept for the next one: the
    /// bus thread handles one call at a time, so a daemon answering thousands
    /// a second allocates none of them.
    private static var spare: MethodCall?

    /// Runs `handle` with `message` as a call object.
    static func handling(_ message: OpaquePointer, _ handle: (MethodCall) -> Void) {
        var call: MethodCall
        if let spare = spare.take() {
            spare.answer = Answer(message: message)
            spare.arguments = MessageReader(message)
            spare.deferred = false
            call = spare
        } else {
            call = MethodCall(message)
        }
        handle(call)
        // A handler that kept the call, against the rule above, keeps it to
        // itself: only a call no one else holds is used again.
        if isKnownUniquelyReferenced(&call) { spare = call }
    }

    private var message: OpaquePointer { answer.message }

    // Read from the message when asked: most handlers need none of them.

    /// The connection that made the call.
    public var caller: Caller {
        Caller(uniqueName: CString.string(senderName))
    }

    /// The method's name.
    public var member: String {
        CString.string(memberName)
    }

    var senderName: UnsafePointer<CChar>? {
        sd_bus_message_get_sender(message)
    }

    var memberName: UnsafePointer<CChar>? {
        sd_bus_message_get_member(message)
    }

    /// The object path the call was made on.
    public var path: ObjectPath {
        ObjectPath(trusted: CString.string(sd_bus_message_get_path(message), absent: "/"))
    }

    /// Replied, failed, or deferred.
    public var isAnswered: Bool { answer.isAnswered || deferred }

    /// Sends the method return; `body` appends the output arguments. Does
    /// nothing once the call is answered.
    public func reply(_ body: @BusActor (MessageWriter) throws(DBusError) -> Void = { _ in }) {
        guard !deferred else { return }
        answer.reply(body)
    }

    /// Answers the call with an error. Does nothing once the call is answered.
    public func fail(_ error: DBusError) {
        guard !deferred else { return }
        answer.fail(error)
    }

    /// Takes over the answer: the call stays open until the returned
    /// ``PendingReply`` is answered. Only for a call not yet answered.
    public func deferReply() -> PendingReply {
        precondition(!isAnswered, "deferReply() on a call that was already answered or deferred")
        deferred = true
        return PendingReply(message)
    }
}

/// The answer to a method call; one dropped unanswered answers with an error,
/// so no caller waits for a reply that never comes.
@BusActor
public final class PendingReply {
    private var answer: Answer

    init(_ message: OpaquePointer) {
        answer = Answer(message: sd_bus_message_ref(message))
    }

    isolated deinit {
        answer.fail(.failed("the call was dropped without an answer"))
        sd_bus_message_unref(answer.message)
    }

    /// Whether the call has been answered.
    public var isAnswered: Bool { answer.isAnswered }

    /// Sends the method return; `body` appends the output arguments. Does
    /// nothing once the call is answered.
    public func reply(_ body: @BusActor (MessageWriter) throws(DBusError) -> Void = { _ in }) {
        answer.reply(body)
    }

    /// Answers the call with an error. Does nothing once the call is answered.
    public func fail(_ error: DBusError) {
        answer.fail(error)
    }
}

/// A call's one answer: whichever of reply and fail comes first.
@BusActor
private struct Answer {
    let message: OpaquePointer
    private(set) var isAnswered = false

    init(message: OpaquePointer) {
        self.message = message
    }

    mutating func reply(_ body: @BusActor (MessageWriter) throws(DBusError) -> Void) {
        guard !isAnswered else { return }
        isAnswered = true
        send(message, body)
    }

    mutating func fail(_ error: DBusError) {
        guard !isAnswered else { return }
        isAnswered = true
        sendError(message, error)
    }
}

/// Sends a method return for `call`; if building it fails, the caller gets that error instead.
@BusActor
private func send(_ call: OpaquePointer, _ body: @BusActor (MessageWriter) throws(DBusError) -> Void) {
    var reply: OpaquePointer?
    guard sd_bus_message_new_method_return(call, &reply) >= 0, let reply else { return }
    defer { sd_bus_message_unref(reply) }
    do {
        try body(MessageWriter(reply))
    } catch {
        sendError(call, error)
        return
    }
    sd_bus_send(nil, reply, nil)
}

@BusActor
private func sendError(_ call: OpaquePointer, _ error: DBusError) {
    var bus = sd_bus_error()
    defer { sd_bus_error_free(&bus) }
    _ = error.store(in: &bus)
    var reply: OpaquePointer?
    guard sd_bus_message_new_method_error(call, &reply, &bus) >= 0, let reply else { return }
    sd_bus_send(nil, reply, nil)
    sd_bus_message_unref(reply)
}
