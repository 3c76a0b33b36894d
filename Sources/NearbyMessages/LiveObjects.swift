import DBus
import NearbyBusContract

/// An object the daemon made for this client under a manager: it holds the
/// manager and ends the daemon's object (with `endMethod`) when the last Swift
/// reference to it goes.
final class DaemonObject: Sendable {
    let path: ObjectPath
    let manager: MessageManager
    let interface: String
    let endMethod: String
    /// The app's permission dialog given for it, exported while it lives.
    let dialog: DaemonCallee<[String]>?
    private var bus: NearbyBus { manager.bus }

    init(path: ObjectPath, manager: MessageManager, interface: String, endMethod: String, dialog: DaemonCallee<[String]>?) {
        self.path = path
        self.manager = manager
        self.interface = interface
        self.endMethod = endMethod
        self.dialog = dialog
    }

    deinit {
        bus.unroute(path)
        bus.sendAndForget(path, interface, endMethod)
        if let dialog { Task { @BusActor in dialog.unexport() } }
    }

    var status: String {
        get async throws { try await bus.property(path, interface, "Status").string ?? "" }
    }

    var statusReason: String {
        get async throws { try await bus.property(path, interface, "StatusReason").string ?? "" }
    }

    func end() async throws {
        try await bus.call(path, interface, endMethod)
    }
}

/// A live publication; unpublished when released or deallocated
/// (GNSPublication). It keeps its manager alive.
public final class Publication: Sendable {
    private let object: DaemonObject
    /// The daemon's object for it.
    public var path: ObjectPath { object.path }
    /// The manager it was made from, kept alive by it.
    public var manager: MessageManager { object.manager }

    init(path: ObjectPath, manager: MessageManager, dialog: DaemonCallee<[String]>?) {
        object = DaemonObject(path: path, manager: manager, interface: NearbyBusContract.publication.name,
                              endMethod: "Unpublish", dialog: dialog)
    }

    /// `starting` (waiting for the server or a medium), `active`, or
    /// `inactive` (the app's permission was revoked, or its manager is in the
    /// background and it may not run there).
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
/// deallocated (GNSSubscription). It keeps its manager alive.
public final class Subscription: Sendable {
    private let object: DaemonObject
    /// The daemon's object for it.
    public var path: ObjectPath { object.path }
    /// The manager it was made from, kept alive by it.
    public var manager: MessageManager { object.manager }

    init(path: ObjectPath, manager: MessageManager, dialog: DaemonCallee<[String]>?) {
        object = DaemonObject(path: path, manager: manager, interface: NearbyBusContract.subscription.name,
                              endMethod: "Unsubscribe", dialog: dialog)
    }

    /// `starting` (waiting for the server or a medium), `active`, or
    /// `inactive` (the app's permission was revoked, or its manager is in the
    /// background and it may not run there).
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
