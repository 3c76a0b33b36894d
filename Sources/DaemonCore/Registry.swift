import NearbyCore

/// Limits on what clients may create, each answered with `LimitExceeded`:
/// per user first, so that one user cannot take what all share, then for
/// the whole daemon.
public struct RegistryLimits: Equatable, Sendable {
    /// Connections of one user (uid) with objects in the daemon.
    public var maxClientsPerUser: Int
    public var maxClients: Int
    public var maxManagersPerClient: Int
    /// Managers of all of one user's connections.
    public var maxManagersPerUser: Int
    /// API keys one user's managers may use at once: each is a registration
    /// with nearby-server, a connection to it and a token on the air.
    public var maxAPIKeysPerUser: Int
    public var maxObjectsPerManager: Int
    /// Publications and subscriptions of all of one user's managers.
    public var maxObjectsPerUser: Int
    public var maxObjects: Int

    public init(maxClientsPerUser: Int = 64, maxClients: Int = 1024, maxManagersPerClient: Int = 16,
                maxManagersPerUser: Int = 256, maxAPIKeysPerUser: Int = 8, maxObjectsPerManager: Int = 256,
                maxObjectsPerUser: Int = 1024, maxObjects: Int = 16_384) {
        self.maxClientsPerUser = maxClientsPerUser
        self.maxClients = maxClients
        self.maxManagersPerClient = maxManagersPerClient
        self.maxManagersPerUser = maxManagersPerUser
        self.maxAPIKeysPerUser = maxAPIKeysPerUser
        self.maxObjectsPerManager = maxObjectsPerManager
        self.maxObjectsPerUser = maxObjectsPerUser
        self.maxObjects = maxObjects
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
    /// Set when the registry forgets the client: nothing of it counts any more.
    fileprivate var forgotten = false
    /// What its user holds, shared by the user's clients: counting an object
    /// in or out reads it from here rather than hashing the uid.
    fileprivate let usage: UserUsage

    fileprivate init(number: UInt64, busName: String, uid: UInt32, usage: UserUsage) {
        self.number = number
        self.busName = busName
        self.uid = uid
        self.usage = usage
    }
}

/// A message manager: one app's access to Nearby under one API key.
public final class Manager {
    public let number: UInt64
    public unowned let client: Client
    public let apiKey: String
    public let appId: String
    /// The user's registration the manager's traffic goes through.
    public let account: Account
    /// Set at creation (`DebugLogging`), never changed: read on every record of its objects.
    public let debugLogging: Bool
    /// What the core keeps of the manager beside its registration: its run
    /// modes and error properties. Kept in the manager, not in a table of the
    /// core's, so that a Publish reads fields instead of hashing the manager
    /// into a table several times; only the ``Core`` changes it.
    public internal(set) var state = ManagerState()
    public fileprivate(set) var publications: [UInt64: Publication] = [:]
    public fileprivate(set) var subscriptions: [UInt64: Subscription] = [:]
    fileprivate var nextObject: UInt64 = 1
    /// Set when the registry forgets the manager (it, or its client, was
    /// removed): its objects no longer count towards the limits.
    fileprivate var forgotten = false

    init(number: UInt64, client: Client, apiKey: String, appId: String, debugLogging: Bool) {
        self.number = number
        self.client = client
        self.apiKey = apiKey
        self.appId = appId
        account = Account(uid: client.uid, apiKey: apiKey)
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
    /// Why it is not active, in a sentence for people; empty when it is.
    var statusReason: String { get set }
    /// How it runs now (nil: it waits, or ended), as the core's ``RunTable`` placed it.
    var run: Run? { get }
    /// What stands for it outside the core: its bus object, kept here by
    /// the bus face so that it finds its object from the core's effects
    /// without a table of its own, as sd-bus hands a callback its userdata.
    /// The core never reads it. The face clears it when the object ends
    /// (``Effect/ended(_:)``), which breaks the cycle with a bus object
    /// that holds the publication or subscription.
    var face: AnyObject? { get set }
}

/// A live publication.
public final class Publication: RegisteredObject {
    public let number: UInt64
    /// Held strongly, though the manager's table holds the publication: the
    /// registry takes it out of that table when it ends, which breaks the
    /// cycle. Every Publish and Unpublish reads it a dozen times, and reading
    /// an unowned reference costs an atomic retain and release each time.
    public let manager: Manager
    /// The id the server knows it by, unique within the device.
    public let id: String
    public let message: Message
    public let strategy: Strategy
    /// Wall-clock expiry in milliseconds since the epoch.
    public var expiresAtMs: UInt64
    public var status: ObjectStatus = .starting
    public var statusReason = ""
    /// How it runs now: kept in the object rather than in a table by id, so
    /// that running and ending it hash nothing. The core's ``RunTable`` alone
    /// changes it (``RunTable/reconcile(_:_:permitted:background:)``).
    public internal(set) var run: Run?
    public var face: AnyObject?

    init(number: UInt64, manager: Manager, id: String, message: Message, strategy: Strategy, expiresAtMs: UInt64) {
        self.number = number
        self.manager = manager
        self.id = id
        self.message = message
        self.strategy = strategy
        self.expiresAtMs = expiresAtMs
    }
}

/// A live subscription and the messages it has found.
public final class Subscription: RegisteredObject {
    public let number: UInt64
    /// Held strongly, as ``Publication/manager`` is.
    public let manager: Manager
    public let id: String
    public let filter: MessageFilter
    public let strategy: Strategy
    public let deviceTypes: DeviceTypes
    /// Wall-clock expiry in milliseconds since the epoch; 0 = never.
    public let expiresAtMs: UInt64
    public var status: ObjectStatus = .starting
    public var statusReason = ""
    /// How it runs now, as ``Publication/run`` is.
    public internal(set) var run: Run?
    public var face: AnyObject?
    public var found = FoundTracker()

    init(number: UInt64, manager: Manager, id: String, filter: MessageFilter, strategy: Strategy,
         deviceTypes: DeviceTypes, expiresAtMs: UInt64) {
        self.number = number
        self.manager = manager
        self.id = id
        self.filter = filter
        self.strategy = strategy
        self.deviceTypes = deviceTypes
        self.expiresAtMs = expiresAtMs
    }
}

/// What one user (uid) holds, for the per-user limits: one per user with a
/// client, shared by the user's clients.
private final class UserUsage {
    var clients = 0
    var managers = 0
    var objects = 0
    /// Managers per API key.
    var apiKeys: [String: Int] = [:]
}

/// Every client, manager, publication and subscription of the daemon, with the
/// limits and the ownership rules; knows nothing of D-Bus or the network.
/// Numbers are never reused within the registry's life.
public final class Registry {
    public let limits: RegistryLimits
    public private(set) var clients: [String: Client] = [:]
    /// What each user (uid) with a client holds, for the per-user limits;
    /// each client has its user's at hand too.
    private var users: [UInt32: UserUsage] = [:]
    /// Publications and subscriptions of everyone.
    public private(set) var objectCount = 0
    private var nextClient: UInt64 = 1
    private var idCounter: UInt64 = 0
    /// `<prefix>-`, ready for the counter.
    private let idPrefix: String

    /// `idPrefix` makes server ids unique across daemon restarts (ids are
    /// `<prefix>-<counter>`, the counter in base 36). With a prefix of 8
    /// characters at most, an id fits in 15 bytes until the counter passes
    /// 36⁶ (about two billion): the longest string Swift keeps inline, so
    /// that copying an id, as the core's, the link's and the bus face's
    /// tables and commands do on every Publish, allocates nothing and counts
    /// no references.
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
        let usage = users[uid] ?? UserUsage()
        guard usage.clients < limits.maxClientsPerUser else {
            throw .limitExceeded("a user may have at most \(limits.maxClientsPerUser) clients ([limits] max-clients-per-user)")
        }
        guard clients.count < limits.maxClients else {
            throw .limitExceeded("the daemon serves at most \(limits.maxClients) clients ([limits] max-clients)")
        }
        let client = Client(number: nextClient, busName: busName, uid: uid, usage: usage)
        nextClient += 1
        clients[busName] = client
        users[uid] = usage
        usage.clients += 1
        return client
    }

    /// Forgets a client and everything it made; returns it so the caller can clean up.
    @discardableResult
    public func removeClient(busName: String) -> Client? {
        guard let client = clients.removeValue(forKey: busName) else { return nil }
        client.forgotten = true
        for manager in client.managers.values { forgetManager(manager) }
        client.usage.clients -= 1
        if client.usage.clients == 0 { users[client.uid] = nil }
        return client
    }

    public func addManager(to client: Client, apiKey: String, appId: String, debugLogging: Bool) throws(NearbyError) -> Manager {
        guard client.managers.count < limits.maxManagersPerClient else {
            throw .limitExceeded("a client may have at most \(limits.maxManagersPerClient) managers ([limits] max-managers-per-client)")
        }
        let usage = client.usage
        guard usage.managers < limits.maxManagersPerUser else {
            throw .limitExceeded("a user may have at most \(limits.maxManagersPerUser) managers ([limits] max-managers-per-user)")
        }
        guard usage.apiKeys[apiKey] != nil || usage.apiKeys.count < limits.maxAPIKeysPerUser else {
            throw .limitExceeded("a user's managers may use at most \(limits.maxAPIKeysPerUser) API keys at once ([limits] max-api-keys-per-user)")
        }
        let manager = Manager(number: client.nextManager, client: client, apiKey: apiKey, appId: appId,
                              debugLogging: debugLogging)
        client.nextManager += 1
        client.managers[manager.number] = manager
        usage.managers += 1
        usage.apiKeys[apiKey, default: 0] += 1
        return manager
    }

    public func removeManager(_ manager: Manager) {
        guard manager.client.managers.removeValue(forKey: manager.number) != nil else { return }
        forgetManager(manager)
    }

    /// Takes a manager and its objects out of its user's usage.
    private func forgetManager(_ manager: Manager) {
        // Once: a client's removal leaves its managers listed in it, and the daemon may remove one after.
        guard !manager.forgotten else { return }
        manager.forgotten = true
        let usage = manager.client.usage
        usage.managers -= 1
        usage.objects -= manager.objectCount
        objectCount -= manager.objectCount
        let left = (usage.apiKeys[manager.apiKey] ?? 1) - 1
        usage.apiKeys[manager.apiKey] = left > 0 ? left : nil
    }

    public func addPublication(to manager: Manager, message: Message, strategy: Strategy,
                               expiresAtMs: UInt64) throws(NearbyError) -> Publication {
        try checkRoom(in: manager)
        let publication = Publication(number: manager.nextObject, manager: manager, id: newID(),
                                      message: message, strategy: strategy, expiresAtMs: expiresAtMs)
        manager.nextObject += 1
        manager.publications[publication.number] = publication
        counted(manager, 1)
        return publication
    }

    public func addSubscription(to manager: Manager, filter: MessageFilter, strategy: Strategy,
                                deviceTypes: DeviceTypes = DeviceTypes(), expiresAtMs: UInt64) throws(NearbyError) -> Subscription {
        try checkRoom(in: manager)
        let subscription = Subscription(number: manager.nextObject, manager: manager, id: newID(),
                                        filter: filter, strategy: strategy, deviceTypes: deviceTypes, expiresAtMs: expiresAtMs)
        manager.nextObject += 1
        manager.subscriptions[subscription.number] = subscription
        counted(manager, 1)
        return subscription
    }

    /// Removes a publication; false if it was already gone.
    @discardableResult
    public func remove(_ publication: Publication) -> Bool {
        guard publication.manager.publications.removeValue(forKey: publication.number) != nil else { return false }
        counted(publication.manager, -1)
        return true
    }

    @discardableResult
    public func remove(_ subscription: Subscription) -> Bool {
        guard subscription.manager.subscriptions.removeValue(forKey: subscription.number) != nil else { return false }
        counted(subscription.manager, -1)
        return true
    }

    /// Counts an object of a manager still in the registry: objects of a
    /// manager already forgotten count no more.
    private func counted(_ manager: Manager, _ delta: Int) {
        guard !manager.forgotten, !manager.client.forgotten else { return }
        manager.client.usage.objects += delta
        objectCount += delta
    }

    private func checkRoom(in manager: Manager) throws(NearbyError) {
        guard manager.objectCount < limits.maxObjectsPerManager else {
            throw .limitExceeded("a manager may have at most \(limits.maxObjectsPerManager) publications and subscriptions ([limits] max-objects-per-manager)")
        }
        guard manager.client.usage.objects < limits.maxObjectsPerUser else {
            throw .limitExceeded("a user may have at most \(limits.maxObjectsPerUser) publications and subscriptions ([limits] max-objects-per-user)")
        }
        guard objectCount < limits.maxObjects else {
            throw .limitExceeded("the daemon holds at most \(limits.maxObjects) publications and subscriptions ([limits] max-objects)")
        }
    }

    private func newID() -> String {
        idCounter += 1
        return idPrefix + Self.base36(idCounter)
    }

    /// `value` in base 36, lower case: what `String(value, radix: 36)` makes,
    /// written straight into an inline string (the standard library's goes
    /// through its generic formatting, which cost more than the rest of the id).
    @_spi(Testing) public static func base36(_ value: UInt64) -> String {
        String(unsafeUninitializedCapacity: 13) { buffer in
            let digits: StaticString = "0123456789abcdefghijklmnopqrstuvwxyz"
            var rest = value
            var count = 0
            repeat {
                buffer[count] = digits.utf8Start[Int(rest % 36)]
                rest /= 36
                count += 1
            } while rest > 0
            var written = UnsafeMutableBufferPointer(rebasing: buffer[..<count])
            written.reverse()
            return count
        }
    }
}
