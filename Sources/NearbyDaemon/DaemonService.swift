import Crypto
import DaemonCore
import DBus
import Foundation
import Logging
import Mediums
import NIOSSL
import NearbyBusContract
import NearbyCore
import ServerAPI
import SystemdService
import Upstream

/// The daemon's logic: the registry of what clients made, the links to
/// nearby-server (one per API key), the mediums, and the found/lost signals.
/// Lives on the bus actor, so a D-Bus call is decoded, validated, registered and
/// answered without a hop; the network and the mediums run elsewhere and report
/// back in order.
@BusActor
final class DaemonService {
    /// The daemon's release.
    nonisolated static let version = "0.1.0"

    var version: String { Self.version }
    let configuration: DaemonConfiguration
    /// Wall-clock time for what is kept with a time (registrations, upstream
    /// messages, tokens, permission decisions) and what expires (TTLs): one
    /// clock for the service and its parts.
    private let clock: any WallClock
    let connection: BusConnection
    let logger: Logger
    private let registry: Registry
    /// The URLs of nearby-server and the one in use, shared by every connection to it.
    private let endpoints: ServerEndpoints
    private let credentials: CredentialStore
    private let backends: [Medium: any MediumBackend]
    private(set) var availableMediums: Set<Medium> = []
    private var mediumConditions: [Medium: MediumCondition] = [:]
    private(set) var debugLogging = false
    private var root: RootObject?
    private var watches: [String: PeerWatch] = [:]
    /// Who each connection of a client or agent is.
    private var callers: [String: PermissionBroker.Caller] = [:]
    /// The clients' login sessions: their managers are in the background while it is away.
    let sessions: LoginSessions
    private var sessionWatches: [String: SessionWatch] = [:]
    let permissions: PermissionBroker
    /// One per user and API key.
    private var links: [Account: LinkState] = [:]
    /// Why the last link attempt that could not reach the server failed; nil
    /// once a link is connected (``serverStatus``).
    private var serverUnreachable: String?
    private var managers: [ObjectIdentifier: ManagerObject] = [:]
    /// The same managers by account: an account's link lives while it has any.
    private var managersOfAccount: [Account: Set<ObjectIdentifier>] = [:]
    private var publications: [String: PublicationObject] = [:]
    private var subscriptions: [String: SubscriptionObject] = [:]
    /// What came of each static publication file: its publication, or why it has none.
    private(set) var staticPublications: [(file: String, result: Result<PublicationObject, NearbyError>)] = []
    /// The published ones by file, with what the file said.
    private var staticSources: [String: (source: StaticPublication, object: PublicationObject)] = [:]
    private var staticOwners: [StaticOwner: ManagerObject] = [:]
    /// The publications and subscriptions that run now, and where: what the
    /// links and the mediums are asked for, and the managers' error
    /// properties, are derived from it. The others wait for permission or the
    /// foreground.
    private var runs = RunTable()
    private var sightings: SightingTracker
    private let beacons: BeaconWatch
    /// Upstream messages: `org.nearbyd.Upstream1` of every manager.
    let upstream: UpstreamService
    /// Tokens this daemon broadcast recently, so it never reports hearing itself.
    private var ownTokens: [Token] = []
    private var mediumWishes: [Medium: AsyncStream<MediumWish>.Continuation] = [:]
    private var lastWishes: [Medium: MediumWish] = [:]
    private var tasks: [Task<Void, Never>] = []
    private var sightingsTimer: BusTimer?
    private var registrationsTimer: BusTimer?
    private var shrinkTimers: [Medium: BusTimer] = [:]
    /// When publications and subscriptions with a TTL end, with one timer for the earliest.
    private var expiries = Expiries()
    private var expiryTimer: BusTimer?

    let enabledMediums: Set<Medium>
    /// The strategy of a call that gives none, worked out once.
    private let defaultStrategies: [Strategy.Owner: Strategy]

    /// `serverTLS`: how an `https://` server's certificate is checked (``ServerTLS``).
    init(configuration: DaemonConfiguration, connection: BusConnection, backends: [any MediumBackend],
         serverTLS: TLSConfiguration? = nil, outbox: Outbox, sessions: LoginSessions, clock: any WallClock = SystemWallClock(),
         logger: Logger) {
        self.sessions = sessions
        self.clock = clock
        self.configuration = configuration
        enabledMediums = configuration.enabledMediums
        var defaults: [Strategy.Owner: Strategy] = [:]
        for owner in [Strategy.Owner.publication, .subscription] {
            defaults[owner] = try? StrategyOptions.parse(nil, for: owner, enabled: enabledMediums)
        }
        defaultStrategies = defaults
        self.connection = connection
        self.logger = logger
        permissions = PermissionBroker(configuration: configuration, connection: connection, clock: clock, logger: logger)
        self.backends = Dictionary(uniqueKeysWithValues: backends.map { ($0.medium, $0) })
        registry = Registry(limits: configuration.limits, idPrefix: Self.instanceID())
        let endpoints = ServerEndpoints(clients: configuration.serverURLs.map {
            ServerClient(baseURL: $0, timeoutSeconds: configuration.requestTimeout, tls: serverTLS, caFile: configuration.serverCAFile)
        }, logger: logger)
        let credentials = CredentialStore(stateDirectory: configuration.stateDirectory, endpoints: endpoints,
                                          limits: configuration.registrationLimits,
                                          refusedKeyRetry: .milliseconds(Int64(configuration.refusedKeyRetry * 1000)),
                                          clock: clock, logger: logger)
        self.endpoints = endpoints
        self.credentials = credentials
        sightings = SightingTracker(lostTimeout: .milliseconds(Int64(configuration.lostTimeout * 1000)),
                                    refreshInterval: .milliseconds(Int64(configuration.refreshInterval * 1000)),
                                    lostTimeouts: [.audio: .milliseconds(Int64(configuration.audioLostTimeout * 1000))])
        beacons = BeaconWatch(settings: BeaconWatch.Settings(configuration), source: endpoints, clock: clock, logger: logger)
        let backoff = Backoff(configuration)
        upstream = UpstreamService(outbox: outbox, clock: clock, logger: logger) { account in
            DirectChannel(account: account, connect: DirectChannel.connector(account: account, credentials: credentials, logger: logger),
                          endpoints: endpoints, backoff: backoff, logger: logger)
        }
    }

    /// Exports `/org/nearbyd` and starts the mediums.
    func start() throws(DBusError) {
        let root = RootObject(service: self)
        root.exported = try connection.export([RootObject.interface.bind(root)], at: RootObject.path)
        self.root = root
        permissions.decisionChanged = { [weak self] key in self?.permissionChanged(key) }
        sessions.onStatusChange = { [weak self] status in
            self?.logger.notice("login sessions: \(status)")
            self?.announce(NearbyBusContract.Nearby1.loginSessions)
        }
        tasks.append(Task { [sessions] in await sessions.start() })
        upstream.start { [weak self] in
            self.map { Array($0.managers.values) } ?? []
        }
        for (medium, backend) in backends {
            let (wishes, sink) = AsyncStream.makeStream(of: MediumWish.self, bufferingPolicy: .bufferingNewest(1))
            mediumWishes[medium] = sink
            tasks.append(Task { await backend.run() })
            tasks.append(Task {
                for await wish in wishes {
                    await backend.broadcast(wish.tokens)
                    await backend.scan(wish.scanMode)
                }
            })
            tasks.append(Task { @BusActor [weak self] in
                for await sighting in backend.sightings { self?.heard(sighting) }
            })
            tasks.append(Task { @BusActor [weak self] in
                for await condition in backend.conditionChanges { self?.medium(medium, is: condition) }
            })
            if let scanner = backend as? any BeaconScanner {
                tasks.append(Task { @BusActor [weak self] in
                    for await sighting in scanner.beaconSightings { self?.beacons.heard(sighting) }
                })
            }
        }
        expireSightingsSoon()
        dropStaleRegistrations()
    }

    /// Registrations unused for `[daemon] registration-retention-days`, and
    /// those beyond the bounds, go; looked for at start and every day.
    private func dropStaleRegistrations() {
        let credentials = credentials
        Task { await credentials.dropStale() }
        registrationsTimer = BusTimer(after: .seconds(86_400)) { [weak self] in self?.dropStaleRegistrations() }
    }

    /// Tokens not heard for the lost timeout are gone; checked ten times a second.
    private func expireSightingsSoon() {
        sightingsTimer = BusTimer(after: .milliseconds(100)) { [weak self] in
            self?.expireSightings()
            self?.expireSightingsSoon()
        }
    }

    /// Ends every client's objects (so subscribers elsewhere see them lost),
    /// waits up to `grace` for the server to hear of it, and stops.
    func stop(grace: Duration) async {
        for busName in registry.clients.keys { clientLeft(busName) }
        root?.exported?.unregister()
        let states = Array(links.values)
        // Past the grace the links stop, which releases anyone waiting on them.
        let deadline = Task {
            try? await Task.sleep(for: grace)
            for state in states { state.task.cancel() }
        }
        for state in states { await state.link.drain() }
        deadline.cancel()
        for state in states { state.task.cancel() }
        for task in tasks { task.cancel() }
        sightingsTimer?.cancel()
        registrationsTimer?.cancel()
        expiryTimer?.cancel()
        await upstream.stop()
        for timer in shrinkTimers.values { timer.cancel() }
        shrinkTimers.removeAll()
    }

    // MARK: Clients and managers

    func createManager(for busName: String, _ request: ManagerRequest) async throws(NearbyError) -> ObjectPath {
        let client = try await client(for: busName)
        let appId = try Self.appId(requested: request.appId, real: callers[busName]?.app, uid: client.uid, apiKey: request.apiKey)
        let manager = try registry.addManager(to: client, apiKey: request.apiKey, appId: appId,
                                              debugLogging: request.debugLogging)
        let path = ObjectPath.nearbyd(client: client.number, manager: manager.number)
        let object = ManagerObject(manager: manager, path: path, service: self)
        object.usageDescriptions = request.usageDescriptions
        object.exported = try exportOwned([ManagerObject.interface.bind(object), ManagerObject.upstreamInterface.bind(object)],
                                          at: path, owner: busName) {
            registry.removeManager(manager)
        }
        adopt(object)
        _ = link(for: manager.account)
        refreshErrors(of: object)
        upstream.managerCreated(object)
        await followSession(of: busName, for: object)
        logger.info("manager created", metadata: ["client": "\(busName)", "manager": "\(path)", "app": "\(appId)"])
        return path
    }

    /// Exports an object only its creator may call; when the bus refuses it
    /// (out of memory, a path clash), `undo` takes back what was registered for it.
    private func exportOwned(_ bindings: [InterfaceBinding], at path: ObjectPath, owner busName: String,
                             undo: () -> Void) throws(NearbyError) -> ExportedObject {
        do {
            return try connection.export(bindings, at: path, access: .owner(busName, denied: .notYours))
        } catch {
            undo()
            throw .limitExceeded("the bus refused a new object: \(error.message)")
        }
    }

    /// The client behind `busName`; a new one is watched from now on, so its
    /// objects go the moment it leaves the bus.
    private func client(for busName: String) async throws(NearbyError) -> Client {
        if let client = registry.client(busName: busName) { return client }
        // Before the round trips below; the per-user limit needs the uid they bring.
        guard registry.clients.count < configuration.limits.maxClients else {
            throw .limitExceeded("the daemon serves at most \(configuration.limits.maxClients) clients ([limits] max-clients)")
        }
        if watches[busName] == nil {
            do {
                watches[busName] = try PeerWatch(connection, name: busName) { [weak self] in self?.clientLeft(busName) }
            } catch {
                throw .accessDenied("cannot watch the caller on the bus: \(error.message)")
            }
        }
        let caller = try await self.caller(busName)
        // The caller may have left, or made a client meanwhile, while the bus answered.
        guard watches[busName] != nil else { throw .doesNotExist("the caller left the bus") }
        do {
            return try registry.addClient(busName: busName, uid: caller.uid)
        } catch {
            clientLeft(busName)
            throw error
        }
    }

    /// Who is behind `busName`, asked of the bus daemon once per connection.
    private func caller(_ busName: String) async throws(NearbyError) -> PermissionBroker.Caller {
        if let known = callers[busName] { return known }
        let uid: UInt32
        do {
            uid = try await connection.unixUser(of: busName)
        } catch {
            clientLeft(busName)
            throw .accessDenied("cannot tell who the caller is: \(error.message)")
        }
        let pid = try? await connection.unixProcessID(of: busName)
        let session: LoginSession?
        do {
            session = try await sessions.session(of: busName)
        } catch {
            logger.warning("cannot tell the caller's login session", metadata: ["client": "\(busName)", "error": "\(error)"])
            session = nil
        }
        let app: RealApp? = if let pid { await RealApp.of(pid: pid) } else { nil }
        let caller = PermissionBroker.Caller(busName: busName, uid: uid, pid: pid, session: session?.path, app: app)
        if watches[busName] != nil { callers[busName] = caller }
        return caller
    }

    /// A client's managers go to the background while its login session is
    /// inactive or locked: watched from its first manager on.
    private func followSession(of busName: String, for object: ManagerObject) async {
        guard let session = callers[busName]?.session else { return }
        if sessionWatches[busName] == nil {
            let watch = await sessions.watch(session) { [weak self] state in self?.session(of: busName, is: state) }
            // The client may have left while logind answered.
            guard watches[busName] != nil else { return watch.cancel() }
            sessionWatches[busName] = watch
        }
        if let state = sessions.state(of: session) { setBackground(object, sessionAway: state.away) }
    }

    private func session(of busName: String, is state: SessionState) {
        for object in managers.values where object.manager.client.busName == busName {
            setBackground(object, sessionAway: state.away)
        }
    }

    /// A client left the bus: everything it made goes.
    private func clientLeft(_ busName: String) {
        watches.removeValue(forKey: busName)?.cancel()
        sessionWatches.removeValue(forKey: busName)?.cancel()
        callers.removeValue(forKey: busName)
        permissions.connectionLeft(busName)
        guard let client = registry.removeClient(busName: busName) else { return }
        for manager in client.managers.values {
            if let object = managers[ObjectIdentifier(manager)] { tearDown(object) }
        }
        logger.info("client left", metadata: ["client": "\(busName)"])
    }

    func release(_ object: ManagerObject) {
        tearDown(object)
        registry.removeManager(object.manager)
    }

    private func tearDown(_ object: ManagerObject) {
        for publication in object.manager.publications.values {
            if let child = publications[publication.id] { remove(child) }
        }
        for subscription in object.manager.subscriptions.values {
            if let child = subscriptions[subscription.id] { remove(child) }
        }
        object.exported?.unregister()
        // A call waiting on the manager (a Publish asking permission) sees it gone.
        object.exported = nil
        let account = object.manager.account
        let id = ObjectIdentifier(object.manager)
        managers.removeValue(forKey: id)
        managersOfAccount[account]?.remove(id)
        if object.directChannel { upstream.managersChanged(account) }
        guard managersOfAccount[account]?.isEmpty ?? true else { return }
        managersOfAccount[account] = nil
        if let state = links[account] { retire(state) }
    }

    private func adopt(_ object: ManagerObject) {
        let id = ObjectIdentifier(object.manager)
        managers[id] = object
        managersOfAccount[object.manager.account, default: []].insert(id)
    }

    // MARK: Permissions

    /// The connection's agent; it goes when the connection leaves the bus.
    func registerAgent(_ path: ObjectPath, for busName: String) async throws(NearbyError) {
        _ = try await client(for: busName)
        guard let caller = callers[busName] else { throw .doesNotExist("the caller left the bus") }
        try permissions.registerAgent(path, for: caller)
    }

    /// The uid whose decisions a caller asks about: its own, or, for root, any.
    func permissionUser(_ requested: UInt32?, for busName: String) async throws(NearbyError) -> UInt32? {
        let uid = try await caller(busName).uid
        guard let requested else { return uid == 0 ? nil : uid }
        guard requested == uid || uid == 0 else {
            throw .accessDenied("only root may see or change the permission decisions of another user")
        }
        return requested
    }

    func isPermitted(_ object: ManagerObject) -> Bool {
        object.exempt || permissions.isGranted(object.permissionKey)
    }

    /// Publish and Subscribe: `body` runs once the app may use Nearby, at once
    /// when that is decided; otherwise the call waits for the answer.
    func whenPermitted(_ owner: ManagerObject, mediums: Set<Medium>, handler: ObjectPath?, call: MethodCall,
                       _ body: @escaping @BusActor @Sendable () throws(NearbyError) -> ObjectPath) throws(DBusError) {
        if isPermitted(owner) {
            let path = try checked(body)
            return call.reply { writer throws(DBusError) in try writer.append(path) }
        }
        let request = PermissionBroker.Request(
            key: owner.permissionKey, mediums: mediums, handler: handler,
            caller: callers[owner.manager.client.busName]
                ?? PermissionBroker.Caller(busName: owner.manager.client.busName, uid: owner.manager.client.uid, pid: nil, session: nil),
            descriptions: owner.usageDescriptions)
        let reply = call.deferReply()
        Task { @BusActor in
            do throws(NearbyError) {
                try await self.permissions.authorize(request)
                guard owner.exported != nil else { throw .doesNotExist("the manager was released while permission was asked") }
                let path = try body()
                reply.reply { writer throws(DBusError) in try writer.append(path) }
            } catch {
                reply.fail(error.dbusError)
            }
        }
    }

    /// A decision changed: the app's managers say so, and their objects stop or resume.
    private func permissionChanged(_ key: PermissionKey) {
        for object in managers.values where object.permissionKey == key {
            object.changed([NearbyBusContract.Manager1.permissionGranted.name])
            reconcile(object)
        }
    }

    /// Root only: turning on verbose logging for everyone.
    func setDebugLogging(_ enabled: Bool, by busName: String) throws(NearbyError) {
        let uid: UInt32
        do {
            uid = try connection.unixUserBlocking(of: busName)
        } catch {
            throw .accessDenied("cannot tell who the caller is: \(error.message)")
        }
        guard uid == 0 else { throw .accessDenied("only root may change DebugLogging") }
        debugLogging = enabled
        ServiceLogging.verbose = enabled
        logger.notice("debug logging \(enabled ? "on" : "off")", metadata: ["client": "\(busName)"])
        announce(NearbyBusContract.Nearby1.debugLogging)
    }

    // MARK: Publications and subscriptions

    /// The `Strategy` entry of Publish or Subscribe params, checked.
    func strategy(_ params: Options, for owner: Strategy.Owner) throws(NearbyError) -> Strategy {
        let strategyKey = NearbyBusContract.PublishOrSubscribeOption.strategy
        let options = try params.options(strategyKey.name, allowed: StrategyOptions.allowed, context: strategyKey.name)
        if options == nil, let strategy = defaultStrategies[owner] { return strategy }
        return try StrategyOptions.parse(options, for: owner, enabled: enabledMediums)
    }

    @discardableResult
    func publish(_ message: Message, strategy: Strategy, in owner: ManagerObject) throws(NearbyError) -> PublicationObject {
        let expiresAtMs = clock.nowMs + UInt64(strategy.ttlSeconds) * 1000
        let publication = try registry.addPublication(to: owner.manager, message: message, strategy: strategy,
                                                      expiresAtMs: expiresAtMs)
        let path = owner.path.child("publication\(publication.number)")
        let object = PublicationObject(publication: publication, path: path, service: self)
        object.exported = try exportOwned([PublicationObject.interface.bind(object)], at: path,
                                          owner: owner.manager.client.busName) { _ = registry.remove(publication) }
        publications[publication.id] = object
        armExpiryTimer(for: expiries.schedule(publication.id, expiresAtMs: expiresAtMs, renewed: owner.exempt))
        reconcile(object, owner: owner)
        record("published", by: owner.manager, ["object": "\(path)", "type": "\(message.type)",
                                                "medium": "\(Medium.names(strategy.mediums))"])
        return object
    }

    func subscribe(_ filter: MessageFilter, strategy: Strategy, deviceTypes: DeviceTypes,
                   in owner: ManagerObject) throws(NearbyError) -> ObjectPath {
        if deviceTypes.beacons != nil, !enabledMediums.contains(.ble) {
            throw .notSupported("beacon subscriptions need BLE, which this daemon's configuration disables")
        }
        let expiresAtMs = strategy.ttlSeconds == 0 ? 0 : clock.nowMs + UInt64(strategy.ttlSeconds) * 1000
        let subscription = try registry.addSubscription(to: owner.manager, filter: filter, strategy: strategy,
                                                        deviceTypes: deviceTypes, expiresAtMs: expiresAtMs)
        let path = owner.path.child("subscription\(subscription.number)")
        let object = SubscriptionObject(subscription: subscription, path: path, service: self)
        object.exported = try exportOwned([SubscriptionObject.interface.bind(object)], at: path,
                                          owner: owner.manager.client.busName) { _ = registry.remove(subscription) }
        subscriptions[subscription.id] = object
        if expiresAtMs > 0 { armExpiryTimer(for: expiries.schedule(subscription.id, expiresAtMs: expiresAtMs)) }
        reconcile(object, owner: owner)
        record("subscribed", by: owner.manager, ["object": "\(path)", "type": "\(filter.type)",
                                                 "medium": "\(Medium.names(deviceTypes.nearby ? strategy.mediums : [.ble]))",
                                                 "beacons": "\(deviceTypes.beacons != nil)"])
        return path
    }

    /// A manager going to or from the background. While it is there only its
    /// objects with `AllowInBackground` run, on BLE alone, listening with low
    /// power (a passive advertisement monitor where the adapter has one) unless
    /// another manager needs full listening; the others wait for the foreground.
    /// `requested` is the client's wish; `sessionAway` its login session's state.
    func setBackground(_ object: ManagerObject, requested: Bool? = nil, sessionAway: Bool? = nil) {
        if let requested { object.backgroundRequested = requested }
        if let sessionAway { object.sessionAway = sessionAway }
        let background = object.backgroundRequested || object.sessionAway
        guard object.background != background else { return }
        object.background = background
        object.changed([NearbyBusContract.Manager1.background.name])
        if object.directChannel { upstream.managersChanged(object.manager.account) }
        reconcile(object)
        if beacons.isWatching { updateMediums() }
        record(background ? "in the background" : "in the foreground", by: object.manager, [:])
    }

    // MARK: Running and waiting

    /// Starts, stops or moves every object of a manager as its permission and
    /// background say.
    private func reconcile(_ owner: ManagerObject) {
        for publication in owner.manager.publications.values {
            if let object = publications[publication.id] { reconcile(object, owner: owner) }
        }
        for subscription in owner.manager.subscriptions.values {
            if let object = subscriptions[subscription.id] { reconcile(object, owner: owner) }
        }
    }

    private func reconcile(_ object: PublicationObject, owner: ManagerObject) {
        let publication = object.publication
        let state = link(for: publication.manager.account)
        let transition = runs.reconcile(publication.id, RunRequest(publication), permitted: isPermitted(owner),
                                        background: owner.background)
        apply(transition.change)
        switch transition.nearby {
        case .started:
            state.link.send(.publish(publication))
        case .stopped:
            state.view.stopped(publication.id)
            state.link.send(.unpublish(publication.id))
            record("publication waiting", by: publication.manager, ["object": "\(object.path)"])
        case .unchanged:
            break
        }
        refreshStatus(of: object, state)
    }

    private func reconcile(_ object: SubscriptionObject, owner: ManagerObject) {
        let subscription = object.subscription
        let transition = runs.reconcile(subscription.id, RunRequest(subscription), permitted: isPermitted(owner),
                                        background: owner.background)
        // The watch before the mediums: their wish asks it how to listen.
        switch transition.beacons {
        case .started:
            if let strategy = subscription.deviceTypes.beacons { beacons.add(object, strategy: strategy) }
        case .stopped:
            beacons.remove(object)
            _ = subscription.found.keepOnly(subscription.found.sourceIDs.filter { !FoundSource.isBeacon($0) })
        case .unchanged:
            break
        }
        apply(transition.change)
        switch transition.nearby {
        case .started:
            link(for: subscription.manager.account).link.send(.subscribe(subscription))
        case .stopped:
            let state = link(for: subscription.manager.account)
            state.view.stopped(subscription.id)
            state.link.send(.unsubscribe(subscription.id))
            _ = subscription.found.keepOnly(subscription.found.sourceIDs.filter(FoundSource.isBeacon))
        case .unchanged:
            break
        }
        if transition.nearby == .stopped || transition.beacons == .stopped {
            record("subscription waiting", by: subscription.manager, ["object": "\(object.path)"])
        }
        refreshStatus(of: object)
    }

    /// Brings the mediums, the links' listening and the managers' error
    /// properties in line with what a change of the runs changed.
    private func apply(_ change: RunChange) {
        for (account, mediums) in change.startedListening {
            if let state = links[account] { startListening(state, on: mediums) }
        }
        if change.mediumsChanged { updateMediums() }
        for manager in change.managers {
            if let owner = managers[manager] { refreshErrors(of: owner) }
        }
    }

    func unpublish(_ object: PublicationObject) {
        remove(object)
    }

    func unsubscribe(_ object: SubscriptionObject) {
        remove(object)
    }

    /// The namespace a publication is in: its own, or the project's once the server told it.
    func resolvedNamespace(of object: PublicationObject) -> String {
        let namespace = object.publication.message.namespace
        guard namespace.isEmpty else { return namespace }
        return links[object.publication.manager.account]?.view.namespace ?? ""
    }

    private func remove(_ object: PublicationObject) {
        let publication = object.publication
        guard registry.remove(publication) else { return }
        object.exported?.unregister()
        publications.removeValue(forKey: publication.id)
        expiries.cancel(publication.id)
        record("publication ended", by: publication.manager, ["object": "\(object.path)"])
        apply(runs.end(publication.id).change)
        if let state = links[publication.manager.account] {
            state.view.ended(publication.id)
            state.link.send(.unpublish(publication.id))
        }
    }

    private func remove(_ object: SubscriptionObject) {
        let subscription = object.subscription
        guard registry.remove(subscription) else { return }
        object.exported?.unregister()
        subscriptions.removeValue(forKey: subscription.id)
        expiries.cancel(subscription.id)
        record("subscription ended", by: subscription.manager, ["object": "\(object.path)"])
        let transition = runs.end(subscription.id)
        if transition.beacons == .stopped { beacons.remove(object) }
        apply(transition.change)
        if subscription.deviceTypes.nearby, let state = links[subscription.manager.account] {
            state.view.ended(subscription.id)
            state.link.send(.unsubscribe(subscription.id))
        }
    }

    // MARK: Expiry

    /// Arms the expiry timer for `ms`, when ``Expiries`` says it is the earliest.
    private func armExpiryTimer(for ms: UInt64?) {
        guard let ms else { return }
        expiryTimer?.cancel()
        let delay = Int64(clamping: ms) - Int64(clamping: clock.nowMs)
        expiryTimer = BusTimer(after: .milliseconds(delay)) { [weak self] in self?.expireDue() }
    }

    /// Ends what is due (`Expired` first) and renews the static publications
    /// due, then waits for the next deadline.
    private func expireDue() {
        expiryTimer = nil
        for entry in expiries.due(nowMs: clock.nowMs) {
            switch entry {
            case .renew(let id):
                if let object = publications[id] { renew(object) }
            case .expire(let id):
                if let object = publications[id] {
                    object.emitExpired()
                    remove(object)
                } else if let object = subscriptions[id] {
                    object.emitExpired()
                    remove(object)
                }
            }
        }
        armExpiryTimer(for: expiries.rearm())
    }

    // MARK: Static publications

    /// Publishes the files of `[publications] directory` as the daemon's own
    /// client, one manager per API key and AppId; a bad file is logged and
    /// shown in `StaticPublications`, and the others still load. Read again
    /// (SIGHUP), a file whose publication is unchanged keeps it, so
    /// subscribers elsewhere notice nothing; the others end or begin.
    func reloadStaticPublications() async {
        // The files are read off the bus thread, which serves everyone meanwhile.
        let (directory, enabled, maxFiles) = (configuration.staticPublicationsDirectory, enabledMediums,
                                              configuration.maxStaticPublications)
        let entries = await Task.detached {
            StaticPublicationFile.loadAll(directory: directory, enabled: enabled, maxFiles: maxFiles)
        }.value
        let reload = StaticReload.of(previous: staticSources.mapValues(\.source),
                                     loaded: entries.map { ($0.path, try? $0.result.get()) })
        for path in reload.ended { staticSources.removeValue(forKey: path).map { remove($0.object) } }
        staticPublications = entries.map { entry in
            if reload.kept.contains(entry.path), let (_, object) = staticSources[entry.path] {
                return (entry.path, .success(object))
            }
            let result = Result { () throws(NearbyError) -> PublicationObject in
                let source = try entry.result.mapError { NearbyError.invalidArguments($0.message) }.get()
                var strategy = source.strategy
                strategy.ttlSeconds = Strategy.maximumTTL
                let object = try publish(source.message, strategy: strategy, in: staticManager(apiKey: source.apiKey, appId: source.appID))
                staticSources[entry.path] = (source, object)
                return object
            }
            switch result {
            case .success(let object):
                logger.info("static publication", metadata: ["file": "\(entry.path)", "object": "\(object.path)"])
            case .failure(let error):
                logger.error("static publication skipped: \(error.message)", metadata: ["file": "\(entry.path)"])
            }
            return (entry.path, result)
        }
        // Managers left with nothing to publish go.
        for (key, owner) in staticOwners where owner.manager.publications.isEmpty {
            staticOwners[key] = nil
            release(owner)
        }
        announce(NearbyBusContract.Nearby1.staticPublications)
    }

    private struct StaticOwner: Hashable {
        let apiKey: String
        let appId: String
    }

    /// The manager of the daemon's own client for an API key and AppId: needs
    /// no permission, never in the background. Its client is the daemon's own
    /// user, so its registration is nobody else's.
    private func staticManager(apiKey: String, appId: String) throws(NearbyError) -> ManagerObject {
        let owner = StaticOwner(apiKey: apiKey, appId: appId)
        if let known = staticOwners[owner] { return known }
        let client = try registry.addClient(busName: connection.uniqueName, uid: getuid())
        let manager = try registry.addManager(to: client, apiKey: apiKey, appId: appId, debugLogging: false)
        let object = ManagerObject(manager: manager, path: .nearbyd(client: client.number, manager: manager.number),
                                   service: self, exempt: true)
        adopt(object)
        _ = link(for: manager.account)
        staticOwners[owner] = object
        return object
    }

    /// A static publication's day is nearly over: the server is given another.
    private func renew(_ object: PublicationObject) {
        let publication = object.publication
        publication.expiresAtMs = clock.nowMs + UInt64(publication.strategy.ttlSeconds) * 1000
        armExpiryTimer(for: expiries.schedule(publication.id, expiresAtMs: publication.expiresAtMs, renewed: true))
        if runs.nearby(publication.id) != nil { links[publication.manager.account]?.link.send(.publish(publication)) }
    }

    // MARK: Server links

    /// `Nearby1.Server`: `connected: URL` while a link is in step with the
    /// server at URL (`URL, URL` when links use different ones of `[server]
    /// url`); else `unreachable: WHY` after a round of attempts that could not
    /// reach it (or did not trust its certificate; with several URLs, WHY
    /// says why each failed), `connecting` before any round has ended, and
    /// `idle` while no app uses it. A refused API key is not the server's
    /// state: the server answered.
    var serverStatus: String {
        LinkView.serverStatus(of: links.values.map(\.view), urls: endpoints.urls, unreachable: serverUnreachable)
    }

    /// Runs `change` and announces `Server` if it changed: around what can
    /// change it (links coming and going, connecting, failing), not every
    /// event of a link, as the status looks at every link.
    private func announcingServerStatus<T>(_ change: () -> T) -> T {
        let before = serverStatus
        let result = change()
        if serverStatus != before {
            announce(NearbyBusContract.Nearby1.server)
        }
        return result
    }

    private func link(for account: Account) -> LinkState {
        if let state = links[account] { return state }
        return announcingServerStatus { makeLink(for: account) }
    }

    private func makeLink(for account: Account) -> LinkState {
        let link = ServerLink(account: account, endpoints: endpoints, credentials: credentials, backoff: Backoff(configuration),
                              batchDelay: .milliseconds(Int64(configuration.batchDelay * 1000)),
                              refusedRetry: .milliseconds(Int64(configuration.refusedChangeRetry * 1000)), clock: clock, logger: logger)
        let state = LinkState(link: link, task: Task { await link.run() },
                              view: LinkView(refusedRetry: Self.seconds(configuration.refusedChangeRetry)))
        link.onEvent = { [weak self, weak state] event in
            guard let self, let state else { return }
            self.handle(event, from: state)
        }
        links[account] = state
        return state
    }

    /// No manager uses this account any more: let its removals reach the server, then stop it.
    private func retire(_ state: LinkState) {
        announcingServerStatus {
            links.removeValue(forKey: state.link.account)
            // With no app using the server, what its last attempt found no longer says anything.
            if links.isEmpty { serverUnreachable = nil }
        }
        let link = state.link
        let task = state.task
        Task {
            await link.drain()
            task.cancel()
        }
    }

    private func handle(_ event: LinkEvent, from state: LinkState) {
        let linkSubscriptions = LinkSubscriptionsOf(account: state.link.account, objects: subscriptions, runs: runs)
        let change: LinkView.Change
        switch event {
        case .connected, .disconnected, .waiting:
            change = announcingServerStatus {
                let change = state.view.apply(event, subscriptions: linkSubscriptions)
                switch change.reach {
                case .reached: serverUnreachable = nil
                case .unreachable(let why): serverUnreachable = why
                case nil: break
                }
                return change
            }
        case .registered, .refused, .token, .stream:
            // The hot path (every Publish is registered; every found and lost
            // streams): nothing here changes what `Server` says.
            change = state.view.apply(event, subscriptions: linkSubscriptions)
        }
        if change.namespaceChanged { announceResolvedNamespace(of: state) }
        switch change.statuses {
        case .none: break
        case .all: refreshStatuses(of: state)
        case .object(let id):
            if let object = publications[id] { refreshStatus(of: object, state) }
            if let object = subscriptions[id] { refreshStatus(of: object) }
        }
        if change.tokenChanged {
            if let token = state.view.token {
                ownTokens.append(token)
                if ownTokens.count > 64 { ownTokens.removeFirst(ownTokens.count - 64) }
            }
            updateMediums()
        }
        for found in change.found { signal(found) }
    }

    private func signal(_ change: FoundChange) {
        switch change {
        case .found(let id, let source, let message, let info):
            guard let object = subscriptions[id] else { return }
            object.emitFound(message, info)
            record("message found", by: object.subscription.manager,
                   ["object": "\(object.path)", "source": "\(source)", "medium": "\(info.medium)"])
        case .lost(let id, let source, let message, let info):
            guard let object = subscriptions[id] else { return }
            object.emitLost(message, info)
            record("message lost", by: object.subscription.manager,
                   ["object": "\(object.path)", "source": "\(source ?? "(gone from the snapshot)")"])
        }
    }

    /// A record of what a manager's objects do: at debug level, or at info for
    /// a manager created with `DebugLogging` (so it shows without turning on
    /// debug logging for the whole daemon). `metadata` is built only when the record is written: publishing and
    /// ending objects is the daemon's hot path.
    private func record(_ message: Logger.Message, by manager: Manager,
                        _ metadata: @autoclosure () -> Logger.Metadata) {
        let level: Logger.Level = manager.debugLogging ? .info : .debug
        guard logger.logLevel <= level else { return }
        var metadata = metadata()
        metadata["client"] = "\(manager.client.busName)"
        metadata["manager"] = "\(ObjectPath.nearbyd(client: manager.client.number, manager: manager.number))"
        metadata["app"] = "\(manager.appId)"
        logger.log(level: level, message, metadata: metadata)
    }

    // MARK: Status and errors

    private func refreshStatuses(of state: LinkState) {
        for object in publications.values where object.publication.manager.account == state.link.account {
            refreshStatus(of: object, state)
        }
        for object in subscriptions.values where object.subscription.manager.account == state.link.account {
            refreshStatus(of: object)
        }
    }

    /// Publications in the project's namespace show it once the server has said what it is.
    private func announceResolvedNamespace(of state: LinkState) {
        for object in publications.values
        where object.publication.manager.account == state.link.account && object.publication.message.namespace.isEmpty {
            object.changed([NearbyBusContract.Publication1.namespace.name])
        }
    }

    private func refreshStatus(of object: PublicationObject, _ state: LinkState) {
        let publication = object.publication
        guard runs.nearby(publication.id) != nil else {
            return set(.inactive, waitingReason(publication.manager), of: object)
        }
        let (status, reason) = state.view.status(of: publication.id, mediums: publication.strategy.mediums,
                                                 available: availableMediums)
        set(status, reason, of: object)
    }

    /// Why a manager's objects wait (`inactive`).
    private func waitingReason(_ manager: Manager) -> String {
        Placement.waitingReason(permitted: managers[ObjectIdentifier(manager)].map(isPermitted) ?? true)
    }

    private func refreshStatus(of object: SubscriptionObject) {
        let subscription = object.subscription
        let nearbyRuns = runs.nearby(subscription.id) != nil
        let beaconsRun = runs.beaconsRun(subscription.id)
        guard nearbyRuns || beaconsRun else { return set(.inactive, waitingReason(subscription.manager), of: object) }
        let nearby = nearbyRuns ? links[subscription.manager.account].map {
            $0.view.status(of: subscription.id, mediums: subscription.strategy.mediums, available: availableMediums)
        } : nil
        let (status, reason) = LinkView.subscriptionStatus(nearby: nearby, beaconsRun: beaconsRun, available: availableMediums)
        set(status, reason, of: object)
    }

    private func set(_ status: ObjectStatus, _ reason: String = "", of object: some LiveObject) {
        var changed: [String] = []
        if status != object.entry.status {
            object.entry.status = status
            changed.append(NearbyBusContract.PublicationOrSubscription.status.name)
        }
        if reason != object.entry.statusReason {
            object.entry.statusReason = reason
            changed.append(NearbyBusContract.PublicationOrSubscription.statusReason.name)
        }
        guard !changed.isEmpty else { return }
        object.changed(changed)
        if changed.contains(NearbyBusContract.PublicationOrSubscription.status.name),
           managers[ObjectIdentifier(object.entry.manager)]?.exempt == true {
            announce(NearbyBusContract.Nearby1.staticPublications)
        }
    }

    /// The manager's error properties, as ``MediumErrors`` says, announced when they change.
    private func refreshErrors(of object: ManagerObject) {
        let errors = MediumErrors.of(inUse: runs.mediums(usedBy: ObjectIdentifier(object.manager)), enabled: enabledMediums,
                                     conditions: mediumConditions)
        var changed: [String] = []
        if errors.bluetoothPower != object.bluetoothPowerError {
            object.bluetoothPowerError = errors.bluetoothPower
            changed.append(NearbyBusContract.Manager1.bluetoothPowerError.name)
        }
        if errors.bluetoothPermission != object.bluetoothPermissionError {
            object.bluetoothPermissionError = errors.bluetoothPermission
            changed.append(NearbyBusContract.Manager1.bluetoothPermissionError.name)
        }
        if errors.microphonePermission != object.microphonePermissionError {
            object.microphonePermissionError = errors.microphonePermission
            changed.append(NearbyBusContract.Manager1.microphonePermissionError.name)
        }
        if !changed.isEmpty { object.changed(changed) }
    }

    // MARK: Mediums

    private func medium(_ medium: Medium, is condition: MediumCondition) {
        guard mediumConditions.updateValue(condition, forKey: medium) != condition else { return }
        logger.info("medium \(condition)", metadata: ["medium": "\(medium)"])
        let available = condition == .ready
        if available ? availableMediums.insert(medium).inserted : availableMediums.remove(medium) != nil {
            announce(NearbyBusContract.Nearby1.availableMediums)
            for state in links.values { refreshStatuses(of: state) }
            for object in subscriptions.values where !object.subscription.deviceTypes.nearby { refreshStatus(of: object) }
        }
        for object in managers.values { refreshErrors(of: object) }
    }

    /// Tells each medium which tokens to broadcast and whether to listen. More
    /// is asked at once; less only after a short grace, so a burst of
    /// publications coming and going does not toggle the radio each time.
    private func updateMediums() {
        for medium in backends.keys {
            let wish = currentWish(for: medium)
            guard let last = lastWishes[medium], wish != last else {
                if lastWishes[medium] == nil { apply(wish, to: medium) }
                shrinkTimers.removeValue(forKey: medium)?.cancel()
                continue
            }
            if wish.covers(last) {
                shrinkTimers.removeValue(forKey: medium)?.cancel()
                apply(wish, to: medium)
            } else if shrinkTimers[medium] == nil {
                shrinkTimers[medium] = BusTimer(after: Self.shrinkGrace) { [weak self] in
                    guard let self else { return }
                    self.shrinkTimers.removeValue(forKey: medium)
                    self.apply(self.currentWish(for: medium), to: medium)
                }
            }
        }
    }

    private static let shrinkGrace = Duration.milliseconds(500)

    private func currentWish(for medium: Medium) -> MediumWish {
        let beaconScanMode = medium == .ble
            ? beacons.scanMode { [managers] manager in managers[ObjectIdentifier(manager)]?.background ?? false } : .off
        return MediumWish.of(medium, runs: runs, tokens: links.mapValues(\.view.token), beacons: beaconScanMode)
    }

    private func apply(_ wish: MediumWish, to medium: Medium) {
        guard lastWishes[medium] != wish else { return }
        lastWishes[medium] = wish
        mediumWishes[medium]?.yield(wish)
    }

    /// A link that starts listening on mediums is told what is already heard there.
    private func startListening(_ state: LinkState, on mediums: Set<Medium>) {
        guard !mediums.isEmpty else { return }
        let heard = sightings.current.filter { mediums.contains($0.medium) }
        if !heard.isEmpty { state.link.send(.seen(heard)) }
    }

    private func heard(_ sighting: Sighting) {
        guard !ownTokens.contains(sighting.token),
              let report = sightings.heard(sighting, at: .now) else { return }
        for state in links.values where runs.scans(state.link.account, on: sighting.medium) {
            state.link.send(.seen([report]))
        }
    }

    private func expireSightings() {
        let gone = sightings.expire(at: .now)
        guard !gone.isEmpty else { return }
        for state in links.values { state.link.send(.gone(gone)) }
    }

    // MARK: Helpers

    /// Emits `PropertiesChanged` for one of `Nearby1`'s properties.
    private func announce(_ property: NearbyBusContract.Property) {
        try? root?.exported?.emitPropertiesChanged(interface: RootObject.interfaceName, [property.name])
    }

    /// A duration from the configuration, for people: `30 s`.
    private static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : "\(value) s"
    }

    /// Distinguishes this run's publication ids from an earlier run's.
    private static func instanceID() -> String {
        String(UInt64.random(in: 0...UInt64.max), radix: 36)
    }

    /// A manager's AppId: the app the system says the caller is, when it
    /// says (a different one asked for is refused: a Flatpak app may not pass
    /// as another); else what the caller asked for; else one derived from
    /// the user and the API key.
    nonisolated static func appId(requested: String?, real: RealApp?, uid: UInt32, apiKey: String) throws(NearbyError) -> String {
        guard let real else { return requested ?? defaultAppId(uid: uid, apiKey: apiKey) }
        guard requested == nil || requested == real.id else {
            throw .accessDenied("this program runs as the \(real.kind.rawValue) '\(real.id)': its AppId is that one, or left out")
        }
        return real.id
    }

    /// The AppId of a manager that named none: stable for a user and API key.
    private nonisolated static func defaultAppId(uid: UInt32, apiKey: String) -> String {
        let digest = SHA256.hash(data: Data(apiKey.utf8)).prefix(8).map { String(format: "%02x", $0) }.joined()
        return "uid\(uid)-\(digest)"
    }
}

extension RunRequest {
    init(_ publication: Publication) {
        self.init(account: publication.manager.account, manager: ObjectIdentifier(publication.manager),
                  strategy: publication.strategy)
    }

    init(_ subscription: Subscription) {
        self.init(account: subscription.manager.account, manager: ObjectIdentifier(subscription.manager),
                  strategy: subscription.strategy, nearby: subscription.deviceTypes.nearby,
                  beaconsAllowInBackground: subscription.deviceTypes.beacons?.allowInBackground)
    }
}

/// One link's subscriptions, for its stream: a link speaks of its own alone.
/// Holds copies of the daemon's tables, which cost nothing until changed.
@BusActor
private struct LinkSubscriptionsOf: @BusActor LinkSubscriptions {
    let account: Account
    let objects: [String: SubscriptionObject]
    let runs: RunTable

    func subscription(_ id: String) -> Subscription? {
        guard let object = objects[id], object.subscription.manager.account == account else { return nil }
        return object.subscription
    }

    func all() -> [Subscription] {
        objects.values.map(\.subscription).filter { $0.manager.account == account }
    }

    func runs(_ id: String) -> Bool { runs.nearby(id) != nil }
}

/// The daemon's view of one ServerLink.
@BusActor
final class LinkState {
    let link: ServerLink
    let task: Task<Void, Never>
    var view: LinkView

    init(link: ServerLink, task: Task<Void, Never>, view: LinkView) {
        self.link = link
        self.task = task
        self.view = view
    }
}

extension ObjectPath {
    /// `/org/nearbyd/clientN/managerM`.
    static func nearbyd(client: UInt64, manager: UInt64) -> ObjectPath {
        RootObject.path.child("client\(client)").child("manager\(manager)")
    }
}
