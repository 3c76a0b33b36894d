import DBus
import NearbyBusContract

/// An object this process exports for nearbyd to call with a question (a
/// permission agent, an app's own permission dialog), answered by a Swift
/// closure.
///
/// Questions are put to the closure one at a time, in the order they came: a
/// dialog asks one thing at a time, and a person answers in order. A question
/// still unanswered when the daemon stops waiting is answered late; the daemon
/// ignores that reply. Only the current owner of `org.nearbyd` is answered:
/// anyone else on the bus gets `AccessDenied`, so no other program can make
/// the closure show a dialog.
@BusActor
final class DaemonCallee<Question: Sendable> {
    let path: ObjectPath
    private let bus: NearbyBus
    private let answer: @Sendable (Question) async -> Bool
    private var exported: ExportedObject?
    private var waiting: [(question: Question, reply: PendingReply)] = []
    private var answering = false

    init(bus: NearbyBus, kind: String, answer: @escaping @Sendable (Question) async -> Bool) {
        self.bus = bus
        self.answer = answer
        path = bus.newExportPath(kind)
    }

    /// Puts the object on the bus with `interface`, whose method passes its
    /// question to ``ask(_:_:)``.
    func export(_ interface: Interface<DaemonCallee<Question>>) throws(DBusError) {
        exported = try bus.connection.export([interface.bind(self)], at: path)
    }

    /// Takes the object off the bus. Questions not yet put to the closure are
    /// answered with an error, which nearbyd takes as a deny.
    func unexport() {
        exported?.unregister()
        exported = nil
        waiting.removeAll()
    }

    /// Queues the question of `call`; its reply is sent once the closure has
    /// answered it. A question from anyone but nearbyd is refused at once.
    func ask(_ question: Question, _ call: MethodCall) {
        // The owner as of this call's arrival: a nearbyd that took the name is
        // known before its calls are dispatched (the bus sends NameOwnerChanged first).
        guard bus.nearbyd.isOwner(call.caller.uniqueName) else {
            call.fail(DBusError("org.freedesktop.DBus.Error.AccessDenied", "only nearbyd may call \(path)"))
            return
        }
        waiting.append((question, call.deferReply()))
        guard !answering else { return }
        answering = true
        Task { await answerWaiting() }
    }

    private func answerWaiting() async {
        while !waiting.isEmpty {
            let (question, reply) = waiting.removeFirst()
            let granted = await answer(question)
            reply.reply { writer throws(DBusError) in try writer.append(granted) }
        }
        answering = false
    }
}

/// The interfaces of ``DaemonCallee`` objects: one definition each per process,
/// as a connection requires.
@BusActor
enum CalleeInterfaces {
    /// `org.nearbyd.PermissionAgent1`: the user's dialog, for any app.
    static let agent = Interface<DaemonCallee<PermissionAgent.Request>>(
        NearbyBusContract.permissionAgent.name,
        methods: [
            Method(NearbyBusContract.PermissionAgent1.requestPermission.name,
                   inputs: [Argument("app_id", "s"), Argument("mediums", "as"), Argument("details", "a{sv}")],
                   outputs: [Argument("granted", "b")]) { callee, call throws(DBusError) in
                let appId = try call.arguments.read(String.self)
                let mediums = try call.arguments.read([String].self)
                let details = try call.arguments.read([String: Variant].self).mapValues(\.value)
                callee.ask(PermissionAgent.Request(appId: appId, mediums: mediums, details: details), call)
            },
        ]
    )

    /// `org.nearbyd.PermissionRequest1`: an app's own dialog, for its own requests.
    static let permissionRequest = Interface<DaemonCallee<[String]>>(
        NearbyBusContract.permissionRequest.name,
        methods: [
            Method(NearbyBusContract.PermissionRequest1.request.name, inputs: [Argument("mediums", "as")],
                   outputs: [Argument("granted", "b")]) { callee, call throws(DBusError) in
                callee.ask(try call.arguments.read([String].self), call)
            },
        ]
    )
}
