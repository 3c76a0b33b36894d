/// Limits on what clients may create, each answered with `LimitExceeded`.
public struct RegistryLimits: Equatable, Sendable {
    public var maxClients: Int
    public var maxManagersPerClient: Int
    public var maxObjectsPerManager: Int

    public init(maxClients: Int = 256, maxManagersPerClient: Int = 16, maxObjectsPerManager: Int = 256) {
        self.maxClients = maxClients
        self.maxManagersPerClient = maxManagersPerClient
        self.maxObjectsPerManager = maxObjectsPerManager
    }
}

/// Where a publication or subscription stands.
public enum ObjectStatus: String, Sendable {
    /// Stopped: the app lost Nearby permission, or its manager is in the background.
    case inactive
    /// Waiting for the server or a medium; becomes active by itself.
    case starting
    /// Registered with the server and on the air.
    case active
}

/// A program connected to the daemon, known by its unique bus name.
public final class Client {
    public let number: UInt64
    public let busName: String
    public let uid: UInt32
    public fileprivate(set) var managers: [UInt64: Manager] = [:]
    fileprivate var nextManager: UInt64 = 1

    init(number: UInt64, busName: String, uid: UInt32) {
        self.number = number
        self.busName = busName
        self.uid = uid
    }
}

/// A message manager: one app's access to Nearby under one API key.
public final class Manager {
    public let number: UInt64
    public unowned let client: Client
    public let apiKey: String
    public let appId: String
    public var debugLogging: Bool
    public fileprivate(set) var publications: [UInt64: Publication] = [:]
    public fileprivate(set) var subscriptions: [UInt64: Subscription] = [:]
    fileprivate var nextObject: UInt64 = 1

    init(number: UInt64, client: Client, apiKey: String, appId: String, debugLogging: Bool) {
        self.number = number
        self.client = client
        self.apiKey = apiKey
        self.appId = appId
        self.debugLogging = debugLogging
    }

    var objectCount: Int { publications.count + subscriptions.count }
}

/// What a publication and a subscription have in common: whose it is, how
/// the server knows it, how it is to be discovered, and how far it has got.
public protocol RegisteredObject: AnyObject {
    var manager: Manager { get }
    var id: String { get }
    var strategy: Strategy { get }
    var status: ObjectStatus { get set }
}

/// A live publication.
public final class Publication: RegisteredObject {
    public let number: UInt64
    public unowned let manager: Manager
    /// The id the server knows it by, unique within the device.
    public let id: String
    public let message: Message
    public let strategy: Strategy
    /// Wall-clock expiry in microseconds since the epoch.
    public var expiresAt: UInt64
    public var status: ObjectStatus = .starting

    init(number: UInt64, manager: Manager, id: String, message: Message, strategy: Strategy, expiresAt: UInt64) {
        self.number = number
        self.manager = manager
        self.id = id
        self.message = message
        self.strategy = strategy
        self.expiresAt = expiresAt
    }
}

/// A live subscription and the messages it has found.
public final class Subscription: RegisteredObject {
    public let number: UInt64
    public unowned let manager: Manager
    public let id: String
    public let filter: MessageFilter
    public let strategy: Strategy
    public let deviceTypes: DeviceTypes
    /// Wall-clock expiry in microseconds since the epoch; 0 = never.
    public let expiresAt: UInt64
    public var status: ObjectStatus = .starting
    public var found = FoundTracker()

    init(number: UInt64, manager: Manager, id: String, filter: MessageFilter, strategy: Strategy,
         deviceTypes: DeviceTypes, expiresAt: UInt64) {
        self.number = number
        self.manager = manager
        self.id = id
        self.filter = filter
        self.strategy = strategy
        self.deviceTypes = deviceTypes
        self.expiresAt = expiresAt
    }
}

/// Every client, manager, publication and subscription of the daemon, with the
/// limits and the ownership rules; knows nothing of D-Bus or the network.
/// Numbers are never reused within the registry's life.
public final class Registry {
    public let limits: RegistryLimits
    public private(set) var clients: [String: Client] = [:]
    private var nextClient: UInt64 = 1
    private var idCounter: UInt64 = 0
    /// `<prefix>-`, ready for the counter.
    private let idPrefix: String

    /// `idPrefix` makes server ids unique across daemon restarts (ids are
    /// `<prefix>-<counter>`).
    public init(limits: RegistryLimits, idPrefix: String) {
        self.limits = limits
        self.idPrefix = idPrefix + "-"
    }

    public func client(busName: String) -> Client? {
        clients[busName]
    }

    /// The client for `busName`, created if new.
    public func addClient(busName: String, uid: UInt32) throws(NearbyError) -> Client {
        if let existing = clients[busName] { return existing }
        guard clients.count < limits.maxClients else {
            throw .limitExceeded("the daemon serves at most \(limits.maxClients) clients")
        }
        let client = Client(number: nextClient, busName: busName, uid: uid)
        nextClient += 1
        clients[busName] = client
        return client
    }

    /// Forgets a client and everything it made; returns it so the caller can clean up.
    @discardableResult
    public func removeClient(busName: String) -> Client? {
        clients.removeValue(forKey: busName)
    }

    public func addManager(to client: Client, apiKey: String, appId: String, debugLogging: Bool) throws(NearbyError) -> Manager {
        guard client.managers.count < limits.maxManagersPerClient else {
            throw .limitExceeded("a client may have at most \(limits.maxManagersPerClient) managers")
        }
        let manager = Manager(number: client.nextManager, client: client, apiKey: apiKey, appId: appId,
                              debugLogging: debugLogging)
        client.nextManager += 1
        client.managers[manager.number] = manager
        return manager
    }

    public func removeManager(_ manager: Manager) {
        manager.client.managers.removeValue(forKey: manager.number)
    }

    public func addPublication(to manager: Manager, message: Message, strategy: Strategy,
                               expiresAt: UInt64) throws(NearbyError) -> Publication {
        try checkRoom(in: manager)
        let publication = Publication(number: manager.nextObject, manager: manager, id: newID(),
                                      message: message, strategy: strategy, expiresAt: expiresAt)
        manager.nextObject += 1
        manager.publications[publication.number] = publication
        return publication
    }

    public func addSubscription(to manager: Manager, filter: MessageFilter, strategy: Strategy,
                                deviceTypes: DeviceTypes = DeviceTypes(), expiresAt: UInt64) throws(NearbyError) -> Subscription {
        try checkRoom(in: manager)
        let subscription = Subscription(number: manager.nextObject, manager: manager, id: newID(),
                                        filter: filter, strategy: strategy, deviceTypes: deviceTypes, expiresAt: expiresAt)
        manager.nextObject += 1
        manager.subscriptions[subscription.number] = subscription
        return subscription
    }

    /// Removes a publication; false if it was already gone.
    @discardableResult
    public func remove(_ publication: Publication) -> Bool {
        publication.manager.publications.removeValue(forKey: publication.number) != nil
    }

    @discardableResult
    public func remove(_ subscription: Subscription) -> Bool {
        subscription.manager.subscriptions.removeValue(forKey: subscription.number) != nil
    }

    private func checkRoom(in manager: Manager) throws(NearbyError) {
        guard manager.objectCount < limits.maxObjectsPerManager else {
            throw .limitExceeded("a manager may have at most \(limits.maxObjectsPerManager) publications and subscriptions")
        }
    }

    private func newID() -> String {
        idCounter += 1
        return idPrefix + String(idCounter)
    }
}
