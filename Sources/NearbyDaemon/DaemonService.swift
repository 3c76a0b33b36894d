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

/// The daemon's bus face over its ``Core``: it knows the callers (who they
/// are, their login sessions, their permission), exports and unexports the
/// objects, and does what the core's commands return: signals and property
/// changes, the links to nearby-server (one per user and API key), the
/// mediums' wishes, the beacon watch, the TTL timer. Lives on the bus actor,
/// so a D-Bus call is decoded, validated, registered and answered without a
/// hop; the network and the mediums run elsewhere and report back in order.
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
    /// The logic: the registry, where everything runs, statuses, found and
    /// lost. This class is its bus face: it decodes, calls it once, and does
    /// what it returns (``apply(_:)``).
    let core: Core
    /// The URLs of nearby-server and the one in use, shared by every connection to it.
    private let endpoints: ServerEndpoints
    private let credentials: CredentialStore
    private let backends: [Medium: any MediumBackend]
    var availableMediums: Set<Medium> { core.availableMediums }
    private(set) var debugLogging = false
    private var root: RootObject?
    private var watches: [String: PeerWatch] = [:]
    /// Who each connection of a client or agent is.
    private var callers: [String: PermissionBroker.Caller] = [:]
    /// The clients' login sessions: their managers are in the background while it is away.
    let sessions: LoginSessions
    private var sessionWatches: [String: SessionWatch] = [:]
    let permissions: PermissionBroker
    /// One per user and API key, as the core opens and retires them; each
    /// is also its core link's face, where a `LinkCommand` finds it.
    private var links: [Account: (link: ServerLink, task: Task<Void, Never>)] = [:]
    /// The bus objects of the core's managers. A publication's or
    /// subscription's bus object is its `face`, where this class finds it
    /// from the core's effects (``liveObject(_:)``).
    private var managers: [ObjectIdentifier: ManagerObject] = [:]
    /// What came of each static publication file: its publication, or why it has none.
    private(set) var staticPublications: [(file: String, result: Result<PublicationObject, NearbyError>)] = []
    /// The published ones by file, with what the file said.
    private var staticSources: [String: (source: StaticPublication, object: PublicationObject)] = [:]
    private var staticOwners: [StaticOwner: ManagerObject] = [:]
    private let beacons: BeaconWatch
    /// Upstream messages: `org.nearbyd.Upstream1` of every manager.
    let upstream: UpstreamService
    private var mediumWishes: [Medium: AsyncStream<MediumWish>.Continuation] = [:]
    private var lastWishes: [Medium: MediumWish] = [:]
    private var tasks: [Task<Void, Never>] = []
    private var sightingsTimer: BusTimer?
    private var registrationsTimer: BusTimer?
    private var shrinkTimers: [Medium: BusTimer] = [:]
    /// The one timer for the earliest TTL or renewal (``Effect/tickAt(_:)``).
    private var expiryTimer: BusTimer?

    let enabledMediums: Set<Medium>
    /// The strategy of a call that gives none, worked out once for each kind
    /// of object (nil: the configuration leaves it no medium). Two fields, not
    /// a dictionary: every Publish reads one, and a field hashes nothing.
    private let defaultPublicationStrategy: Strategy?
    private let defaultSubscriptionStrategy: Strategy?

    /// The strategy of a call of `owner`'s kind that gives none.
    func defaultStrategy(for owner: Strategy.Owner) -> Strategy? {
        switch owner {
        case .publication: defaultPublicationStrategy
        case .subscription: defaultSubscriptionStrategy
        }
    }

    /// `serverTLS`: how an `https://` server's certificate is checked (``ServerTLS``).
    init(configuration: DaemonConfiguration, connection: BusConnection, backends: [any MediumBackend],
         serverTLS: TLSConfiguration? = nil, outbox: Outbox, sessions: LoginSessions, clock: any WallClock = SystemWallClock(),
         logger: Logger) {
        self.sessions = sessions
        self.clock = clock
        self.configuration = configuration
        enabledMediums = configuration.enabledMediums
        defaultPublicationStrategy = try? StrategyOptions.parse(nil, for: .publication, enabled: enabledMediums)
        defaultSubscriptionStrategy = try? StrategyOptions.parse(nil, for: .subscription, enabled: enabledMediums)
        self.connection = connection
        self.logger = logger
        let permissions = PermissionBroker(configuration: configuration, connection: connection, clock: clock, logger: logger)
        self.permissions = permissions
        self.backends = Dictionary(uniqueKeysWithValues: backends.map { ($0.medium, $0) })
        let endpoints = ServerEndpoints(clients: configuration.serverURLs.map {
            ServerClient(baseURL: $0, timeoutSeconds: configuration.requestTimeout, tls: serverTLS, caFile: configuration.serverCAFile)
        }, logger: logger)
        let credentials = CredentialStore(stateDirectory: configuration.stateDirectory, endpoints: endpoints,
                                          limits: configuration.registrationLimits,
                                          refusedKeyRetry: .milliseconds(Int64(configuration.refusedKeyRetry * 1000)),
                                          clock: clock, logger: logger)
        self.endpoints = endpoints
        self.credentials = credentials
        core = Core(registry: Registry(limits: configuration.limits, idPrefix: Self.instanceID()),
                    enabledMediums: configuration.enabledMediums, serverURLs: endpoints.urls,
                    refusedRetry: Self.seconds(configuration.refusedChangeRetry),
                    sightings: SightingTracker(lostTimeout: .milliseconds(Int64(configuration.lostTimeout * 1000)),
                                               refreshInterval: .milliseconds(Int64(configuration.refreshInterval * 1000)),
                                               lostTimeouts: [.audio: .milliseconds(Int64(configuration.audioLostTimeout * 1000))]),
                    clock: clock, logger: logger) { manager in
            permissions.isGranted(PermissionKey(uid: manager.client.uid, appId: manager.appId))
        }
        beacons = BeaconWatch(settings: BeaconWatch.Settings(configuration), source: endpoints, clock: clock, logger: logger)
        let backoff = Backoff(configuration)
        upstream = UpstreamService(outbox: outbox, clock: clock, logger: logger) { account in
            DirectChannel(account: account,
                          connect: DirectChannel.connector(account: account, credentials: credentials, endpoints: endpoints, logger: logger),
                          endpoints: endpoints, backoff: backoff, logger: logger)
        }
    }

    /// Exports `/org/nearbyd` and starts the mediums.
    func start() throws(DBusError) {
        let root = RootObject(service: self)
        try root.export()
        self.root = root
        permissions.decisionChanged = { [weak self] key in self?.permissionChanged(key) }
        sessions.onStatusChange = { [weak self] status in
            self?.logger.notice("login sessions: \(status)")
            self?.announce(NearbyBusContract.Nearby1.loginSessions)
        }
        tasks.append(Task { [sessions] in await sessions.start() })
        upstream.start { [weak self] in
            self?.managers.values.map { $0 } ?? []
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
        for busName in core.registry.clients.keys { clientLeft(busName) }
        root?.unexport()
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
        let (manager, effects) = try core.addManager(to: client, apiKey: request.apiKey, appId: appId,
                                                     debugLogging: request.debugLogging)
        let object = ManagerObject(manager: manager, path: ObjectPath(manager), service: self)
        object.usageDescriptions = request.usageDescriptions
        managers[ObjectIdentifier(manager)] = object
        do {
            try object.export()
        } catch {
            apply(effects + core.release(manager))
            throw error
        }
        apply(effects)
        upstream.managerCreated(object)
        await followSession(of: busName, for: object)
        logger.info("manager created", metadata: ["client": "\(busName)", "manager": "\(object.path)", "app": "\(appId)"])
        return object.path
    }

    /// The client behind `busName`; a new one is watched from now on, so its
    /// objects go the moment it leaves the bus.
    private func client(for busName: String) async throws(NearbyError) -> Client {
        if let client = core.registry.client(busName: busName) { return client }
        // Before the round trips below; the per-user limit needs the uid they bring.
        guard core.registry.clients.count < configuration.limits.maxClients else {
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
            return try core.registry.addClient(busName: busName, uid: caller.uid)
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
        if let state = sessions.state(of: session) { apply(core.setBackground(object.manager, sessionAway: state.away)) }
    }

    private func session(of busName: String, is state: SessionState) {
        apply(core.session(of: busName, away: state.away))
    }

    /// A client left the bus: everything it made goes.
    private func clientLeft(_ busName: String) {
        watches.removeValue(forKey: busName)?.cancel()
        sessionWatches.removeValue(forKey: busName)?.cancel()
        callers.removeValue(forKey: busName)
        permissions.connectionLeft(busName)
        guard core.registry.client(busName: busName) != nil else { return }
        apply(core.clientLeft(busName))
        logger.info("client left", metadata: ["client": "\(busName)"])
    }

    func release(_ object: ManagerObject) {
        apply(core.release(object.manager))
    }

    // MARK: Permissions

    /// The connection's agent; it goes when the connection leaves the bus.
    func registerAgent(_ path: ObjectPath, for busName: String) async throws(NearbyError) {
        _ = try await client(for: busName)
        guard let caller = callers[busName] else { throw .doesNotExist("the caller left the bus") }
        try permissions.registerAgent(path, for: caller)
    }

    /// Whose decisions a caller may see or change: its own user's, or, for
    /// root, any user's; and, for a sandboxed app, its own app's alone.
    func permissionReach(_ requested: UInt32?, for busName: String) async throws(NearbyError) -> PermissionReach {
        let caller = try await caller(busName)
        let sandbox = caller.app.flatMap { $0.kind == .flatpak ? $0.id : nil }
        guard let requested else { return PermissionReach(uid: caller.uid == 0 ? nil : caller.uid, onlyApp: sandbox) }
        guard requested == caller.uid || caller.uid == 0 else {
            throw .accessDenied("only root may see or change the permission decisions of another user")
        }
        return PermissionReach(uid: requested, onlyApp: sandbox)
    }

    /// Asks whether the app of `owner` may use Nearby on `mediums` (its
    /// user's agent, or the `handler` the call named); throws when it may not.
    /// When it may not and nearby-server refuses the manager's API key, the
    /// key is what the error names: nothing would work with it even if
    /// allowed, and it is the first thing to fix.
    func authorize(_ owner: ManagerObject, mediums: Set<Medium>, handler: ObjectPath?) async throws(NearbyError) {
        let busName = owner.manager.client.busName
        do {
            try await permissions.authorize(PermissionBroker.Request(
                key: owner.permissionKey, mediums: mediums, handler: handler,
                caller: callers[busName] ?? PermissionBroker.Caller(busName: busName, uid: owner.manager.client.uid, pid: nil, session: nil),
                descriptions: owner.usageDescriptions))
        } catch .notPermitted(let why) {
            if let refusal = await keyRefusal(owner.manager) {
                throw .notPermitted("\(refusal): check the API key first; also, \(why)")
            }
            throw .notPermitted(why)
        } catch {
            throw error
        }
    }

    /// Why nearby-server refuses the manager's API key, if it does: as its
    /// link last found, or as a registration with the key finds now (shared
    /// with the link's, when one is on its way; an answer the server gave
    /// within `[server] refused-key-retry` is not asked again). Nil when the
    /// key is taken, or the server cannot say (unreachable).
    private func keyRefusal(_ manager: Manager) async -> String? {
        if let view = manager.state.link?.view, view.keyRefused { return view.waiting ?? "nearby-server refuses the API key" }
        do {
            _ = try await credentials.registration(manager.account, with: await endpoints.current.client)
            return nil
        } catch ServerCallError.keyRefused(let message) {
            return "nearby-server refuses the API key: \(message)"
        } catch {
            return nil
        }
    }

    /// A decision changed: the app's managers say so, and their objects stop or resume.
    private func permissionChanged(_ key: PermissionKey) {
        apply(core.permissionChanged(uid: key.uid, appId: key.appId))
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

    @discardableResult
    func publish(_ message: Message, strategy: Strategy, in owner: ManagerObject) throws(NearbyError) -> PublicationObject {
        let (publication, effects) = try core.publish(message, strategy: strategy, in: owner.manager)
        let object = PublicationObject(publication: publication, path: ObjectPath(publication, under: owner), service: self)
        publication.face = object
        do {
            try object.export()
        } catch {
            apply(effects + core.end(publication))
            throw error
        }
        apply(effects)
        return object
    }

    func subscribe(_ filter: MessageFilter, strategy: Strategy, deviceTypes: DeviceTypes,
                   in owner: ManagerObject) throws(NearbyError) -> ObjectPath {
        let (subscription, effects) = try core.subscribe(filter, strategy: strategy, deviceTypes: deviceTypes, in: owner.manager)
        let object = SubscriptionObject(subscription: subscription, path: ObjectPath(subscription, under: owner), service: self)
        subscription.face = object
        do {
            try object.export()
        } catch {
            apply(effects + core.end(subscription))
            throw error
        }
        apply(effects)
        return object.path
    }

    /// `Background` set by the client.
    func setBackground(_ object: ManagerObject, requested: Bool) {
        apply(core.setBackground(object.manager, requested: requested))
    }

    func unpublish(_ object: PublicationObject) {
        apply(core.end(object.publication))
    }

    func unsubscribe(_ object: SubscriptionObject) {
        apply(core.end(object.subscription))
    }

    // MARK: What the core's commands do

    /// Does what a command of the core returned, in order, and gives the
    /// core their buffer back.
    private func apply(_ effects: consuming [Effect]) {
        for effect in copy effects {
            switch effect {
            case .managerChanged(let manager, let properties):
                guard let object = managers[ObjectIdentifier(manager)] else { continue }
                object.changed(properties)
                if properties.contains(NearbyBusContract.Manager1.background), object.directChannel {
                    upstream.managersChanged(manager.account)
                }
            case .objectChanged(let object, let properties):
                Self.liveObject(object)?.changed(properties)
            case .daemonChanged(let property):
                announce(property)
            case .found(let change):
                signal(change)
            case .expired(let object):
                Self.liveObject(object)?.emitExpired()
            case .ended(let object):
                Self.liveObject(object)?.unexport()
                object.face = nil
            case .managerEnded(let manager):
                guard let object = managers.removeValue(forKey: ObjectIdentifier(manager)) else { continue }
                object.unexport()
                if object.directChannel { upstream.managersChanged(manager.account) }
            case .openLink(let link):
                openLink(for: link)
            case .retireLink(let link):
                link.face = nil
                guard let state = links.removeValue(forKey: link.account) else { continue }
                Task {
                    await state.link.drain()
                    state.task.cancel()
                }
            case .link(let link, let command):
                (link.face as? ServerLink)?.send(command)
            case .mediumsChanged:
                updateMediums()
            case .watchBeacons(let subscription, let strategy):
                if let object = subscription.face as? SubscriptionObject { beacons.add(object, strategy: strategy) }
            case .unwatchBeacons(let subscription):
                beacons.remove(subscription)
            case .tickAt(let ms):
                expiryTimer?.cancel()
                let delay = Int64(clamping: ms) - Int64(clamping: clock.nowMs)
                expiryTimer = BusTimer(after: .milliseconds(delay)) { [weak self] in
                    guard let self else { return }
                    expiryTimer = nil
                    apply(core.tick())
                }
            }
        }
        core.recycle(effects)
    }

    private func signal(_ change: FoundChange) {
        switch change {
        case .found(let id, _, let message, let info):
            (core.subscriptions[id]?.face as? SubscriptionObject)?.emitFound(message, info)
        case .lost(let id, _, let message, let info):
            (core.subscriptions[id]?.face as? SubscriptionObject)?.emitLost(message, info)
        }
    }

    /// The bus object of a publication or subscription: its `face`.
    private static func liveObject(_ object: any RegisteredObject) -> (any LiveObject)? {
        if let publication = object.face as? PublicationObject { return publication }
        return object.face as? SubscriptionObject
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
        for path in reload.ended { staticSources.removeValue(forKey: path).map { unpublish($0.object) } }
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
        let client = try core.registry.addClient(busName: connection.uniqueName, uid: getuid())
        let (manager, effects) = try core.addManager(to: client, apiKey: apiKey, appId: appId, debugLogging: false, exempt: true)
        let object = ManagerObject(manager: manager, path: ObjectPath(manager), service: self)
        managers[ObjectIdentifier(manager)] = object
        apply(effects)
        staticOwners[owner] = object
        return object
    }

    // MARK: Server links

    /// `Nearby1.Server` (``Core/serverStatus``).
    var serverStatus: String { core.serverStatus }

    /// Connects the core's `coreLink` to nearby-server: the `ServerLink` is
    /// its face until it is retired.
    private func openLink(for coreLink: Link) {
        let account = coreLink.account
        let link = ServerLink(account: account, endpoints: endpoints, credentials: credentials, backoff: Backoff(configuration),
                              batchDelay: .milliseconds(Int64(configuration.batchDelay * 1000)),
                              refusedRetry: .milliseconds(Int64(configuration.refusedChangeRetry * 1000)), clock: clock, logger: logger)
        coreLink.face = link
        link.onEvent = { [weak self, weak link] event in
            // A retired link still drains: its events are no longer anyone's.
            guard let self, let link, coreLink.face === link else { return }
            self.apply(self.core.link(coreLink, event))
        }
        links[account] = (link, Task { await link.run() })
    }

    // MARK: Mediums

    private func medium(_ medium: Medium, is condition: MediumCondition) {
        apply(core.medium(medium, is: condition))
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
        let beaconScanMode = medium == .ble ? beacons.scanMode { [core] manager in core.isBackground(manager) } : .off
        return core.wish(for: medium, beacons: beaconScanMode)
    }

    private func apply(_ wish: MediumWish, to medium: Medium) {
        guard lastWishes[medium] != wish else { return }
        lastWishes[medium] = wish
        mediumWishes[medium]?.yield(wish)
    }

    private func heard(_ sighting: Sighting) {
        apply(core.heard(sighting, at: .now))
    }

    private func expireSightings() {
        apply(core.expireSightings(at: .now))
    }

    // MARK: Helpers

    private func announce(_ property: NearbyBusContract.Property) {
        root?.announce(property)
    }

    /// A duration from the configuration, for people: `30 s`.
    private static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : "\(value) s"
    }

    /// Distinguishes this run's publication ids from an earlier run's: 8
    /// base-36 characters at most (41 random bits), which keeps the ids
    /// short enough to be stored inline (``Registry/init(limits:idPrefix:)``).
    private static func instanceID() -> String {
        String(UInt64.random(in: 0..<2_821_109_907_456), radix: 36)
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

extension ObjectPath {
    /// The object of a manager, publication or subscription, where the core's
    /// paths say. A publication's and a subscription's are made from their
    /// manager object's (a Publish builds and checks only the last element).
    init(_ manager: Manager) { self.init(stringLiteral: manager.path) }

    init(_ publication: Publication, under manager: ManagerObject) {
        self = manager.path.child(Publication.pathElementPrefix, number: publication.number)
    }

    init(_ subscription: Subscription, under manager: ManagerObject) {
        self = manager.path.child(Subscription.pathElementPrefix, number: subscription.number)
    }
}
