import Logging
import NearbyBusContract
import NearbyCore
import ServerAPI

/// A change the daemon asks of one server link; the link applies them in the
/// order sent.
public enum LinkCommand {
    case publish(Publication)
    case unpublish(String)
    case subscribe(Subscription)
    case unsubscribe(String)
    /// Tokens heard for the first time, or again after the refresh interval.
    case seen([Sighting])
    /// Tokens no longer heard.
    case gone([Sighting.Key])
}

/// What a command of the ``Core`` asks of the world around it, in the order
/// it is to be done: the bus face turns these into signals and property
/// changes, the server links and the mediums into traffic.
public enum Effect {
    /// Properties of a manager's `org.nearbyd.Manager1` changed.
    case managerChanged(Manager, [NearbyBusContract.Property])
    /// Properties of a publication's or subscription's object changed.
    case objectChanged(any RegisteredObject, [NearbyBusContract.Property])
    /// A property of `org.nearbyd.Nearby1` changed.
    case daemonChanged(NearbyBusContract.Property)
    /// A subscription found or lost a message.
    case found(FoundChange)
    /// A publication or subscription reached its TTL (followed by ``ended(_:)``).
    case expired(any RegisteredObject)
    /// A publication or subscription is gone: its object goes.
    case ended(any RegisteredObject)
    /// A manager is gone, with everything it made (ended before it).
    case managerEnded(Manager)
    /// An account needs its server link from now on: it gets the link's events.
    case openLink(Link)
    /// No manager uses the account any more: its link sends what it has, then stops.
    case retireLink(Link)
    case link(Link, LinkCommand)
    /// What the mediums are asked for may have changed (``Core/wish(for:beacons:)``).
    case mediumsChanged
    /// The beacon watch takes a subscription's beacon part, or lets it go.
    case watchBeacons(Subscription, BeaconStrategy)
    case unwatchBeacons(Subscription)
    /// The earliest TTL or renewal is now at this wall-clock time
    /// (milliseconds): ``Core/tick()`` is due then.
    case tickAt(UInt64)
}

/// One server link as the core keeps it, one per account with a manager:
/// the daemon's view of it, and what stands for it outside the core. A
/// class, so that a manager reaches its own link (``ManagerState/link``)
/// and an effect hands the bus face its link, without hashing the account.
public final class Link {
    public let account: Account
    public fileprivate(set) var view: LinkView
    /// Set when no manager uses the account any more (``Effect/retireLink(_:)``):
    /// what the link still says is no one's concern.
    public fileprivate(set) var retired = false
    /// What stands for it outside the core: the bus face's connection to
    /// nearby-server, kept here as a publication keeps its bus object
    /// (``RegisteredObject/face``). The core never reads it; the face lets
    /// go of it when the link is retired.
    public var face: AnyObject?

    fileprivate init(account: Account, view: LinkView) {
        self.account = account
        self.view = view
    }
}

/// What the daemon keeps of a manager beside its registration
/// (``Manager/state``); the ``Core`` alone changes it.
public struct ManagerState {
    /// Its account's server link, while the core holds the manager.
    public fileprivate(set) var link: Link?
    /// The daemon's own manager (static publications): needs no permission
    /// and is never in the background.
    public fileprivate(set) var exempt = false
    /// Whether it may use Nearby: exempt, or its app's decision grants it.
    /// The decision's home is the permission broker; this is its answer,
    /// asked when the manager is made and again each time the decision
    /// changes (``Core/permissionChanged(uid:appId:)``), so that a Publish
    /// reads a field instead of hashing the app's key.
    public fileprivate(set) var permitted = false
    /// `Background` as the client set it, and whether its login session is
    /// inactive or locked: the manager is in the background while either holds.
    public fileprivate(set) var backgroundRequested = false
    public fileprivate(set) var sessionAway = false
    public fileprivate(set) var background = false
    /// Its error properties (``MediumErrors``).
    public fileprivate(set) var errors = MediumErrors()
}

/// The daemon's logic without its bus: the registry of what clients made,
/// where each publication and subscription runs (permission, background,
/// login session), what the mediums are asked for, the server links' view,
/// found and lost, statuses, TTLs. It takes commands (publish, subscribe,
/// end, release, client left, permission changed, background changed, link
/// event, sighting, tick) and returns the ``Effect``s they have, in order;
/// it reads time from an injected clock. Nothing in it waits: the bus face
/// calls it on its one thread, and owns it.
///
/// The daemon's twin of the server's `NearbyService`: a face decodes and
/// calls it once per call; unit tests drive it with events and a manual clock.
public final class Core {
    public let registry: Registry
    private let clock: any WallClock
    private let logger: Logger
    private let enabledMediums: Set<Medium>
    /// `[server] url`, for ``serverStatus``.
    private let serverURLs: [String]
    /// `[server] refused-change-retry`, for people: `30 s`.
    private let refusedRetry: String
    /// Whether an app's decision lets a manager use Nearby: the decisions
    /// have one home (the permission broker), asked when a manager is made
    /// and when its app's decision changes.
    private let permits: (Manager) -> Bool

    /// The managers the core holds, for what concerns them all (a
    /// permission changed, a medium's condition); what it keeps of each is
    /// in the manager (``Manager/state``).
    public private(set) var managers: [ObjectIdentifier: Manager] = [:]
    /// The same managers by account: an account's link lives while it has any.
    private var managersOfAccount: [Account: Set<ObjectIdentifier>] = [:]
    public private(set) var publications: [String: Publication] = [:]
    public private(set) var subscriptions: [String: Subscription] = [:]
    /// What the publications and subscriptions that run now use, and where
    /// (each object's own run is in the object): what the links and the
    /// mediums are asked for, and the managers' error properties, are derived
    /// from it. The others wait for permission or the foreground.
    public private(set) var runs = RunTable()
    /// One per account with a manager.
    public private(set) var links: [Account: Link] = [:]
    /// Why the last link attempt that could not reach the server failed; nil
    /// once a link is connected (``serverStatus``).
    private var serverUnreachable: String?
    private var expiries = Expiries()
    private var sightings: SightingTracker
    /// Tokens this daemon broadcast recently, so it never reports hearing itself.
    private var ownTokens: [Token] = []
    private var mediumConditions: [Medium: MediumCondition] = [:]
    public private(set) var availableMediums: Set<Medium> = []
    /// What the command under way has done so far.
    private var effects: [Effect] = []
    /// A buffer handed back (``recycle(_:)``), emptied, for the next command's effects.
    private var spareEffects: [Effect]?

    public init(registry: Registry, enabledMediums: Set<Medium>, serverURLs: [String], refusedRetry: String,
                sightings: SightingTracker, clock: any WallClock, logger: Logger, permits: @escaping (Manager) -> Bool) {
        self.registry = registry
        self.enabledMediums = enabledMediums
        self.serverURLs = serverURLs
        self.refusedRetry = refusedRetry
        self.sightings = sightings
        self.clock = clock
        self.logger = logger
        self.permits = permits
    }

    /// The effects of the command that just ran, handed over: the buffer
    /// goes with them, so none is copied. The next command appends to the
    /// buffer last handed back (``recycle(_:)``), or to a new one.
    private func done() -> [Effect] {
        let done = effects
        if let spare = spareEffects.take() {
            effects = spare
        } else {
            effects = []
            // Room for a Publish's effects at once, rather than growing by doubling.
            effects.reserveCapacity(8)
        }
        return done
    }

    /// Takes back the effects of a command once they are done with: a later
    /// command reuses their buffer instead of allocating one, which saves an
    /// allocation on every Publish and Unpublish. A buffer grown large (a
    /// tick that ended thousands of objects) is let go instead of kept.
    public func recycle(_ done: consuming [Effect]) {
        guard spareEffects == nil, done.capacity <= 64 else { return }
        done.removeAll(keepingCapacity: true)
        spareEffects = done
    }

    // MARK: Queries

    /// Whether the manager may use Nearby; for a manager the core no longer
    /// holds, what it last knew.
    public func isPermitted(_ manager: Manager) -> Bool {
        manager.state.permitted
    }

    public func isBackground(_ manager: Manager) -> Bool {
        manager.state.background
    }

    /// The managers of one client.
    public func managers(of busName: String) -> [Manager] {
        registry.client(busName: busName).map { Array($0.managers.values) } ?? []
    }

    /// The namespace a publication is in: its own, or the project's once the server told it.
    public func resolvedNamespace(of publication: Publication) -> String {
        let namespace = publication.message.namespace
        guard namespace.isEmpty else { return namespace }
        return publication.manager.state.link?.view.namespace ?? ""
    }

    /// `Nearby1.Server`: `connected: URL` while a link is in step with the
    /// server at URL (`URL, URL` when links use different ones of `[server]
    /// url`); else `unreachable: WHY` after a round of attempts that could not
    /// reach it (or did not trust its certificate; with several URLs, WHY
    /// says why each failed), `connecting` before any round has ended, and
    /// `idle` while no app uses it. A refused API key is not the server's
    /// state: the server answered.
    public var serverStatus: String {
        LinkView.serverStatus(of: links.values.map(\.view), urls: serverURLs, unreachable: serverUnreachable)
    }

    /// What `medium` is asked for now; `beacons` is how the beacon watch listens.
    public func wish(for medium: Medium, beacons: ScanMode) -> MediumWish {
        MediumWish.of(medium, runs: runs, tokens: links.lazy.map { (key: $0.key, value: $0.value.view.token) },
                      beacons: medium == .ble ? beacons : .off)
    }

    // MARK: Managers and clients

    /// A new manager of `client`, with its link to the server.
    public func addManager(to client: Client, apiKey: String, appId: String, debugLogging: Bool,
                           exempt: Bool = false) throws(NearbyError) -> (Manager, [Effect]) {
        let manager = try registry.addManager(to: client, apiKey: apiKey, appId: appId, debugLogging: debugLogging)
        let id = ObjectIdentifier(manager)
        managers[id] = manager
        manager.state.exempt = exempt
        manager.state.permitted = exempt || permits(manager)
        managersOfAccount[manager.account, default: []].insert(id)
        if let link = links[manager.account] {
            manager.state.link = link
        } else {
            announcingServerStatus {
                let link = Link(account: manager.account, view: LinkView(refusedRetry: refusedRetry))
                links[manager.account] = link
                manager.state.link = link
                effects.append(.openLink(link))
            }
        }
        refreshErrors(of: manager)
        return (manager, done())
    }

    /// Release: the manager and everything it made go.
    public func release(_ manager: Manager) -> [Effect] {
        tearDown(manager)
        registry.removeManager(manager)
        return done()
    }

    /// A client left the bus: everything it made goes.
    public func clientLeft(_ busName: String) -> [Effect] {
        guard let client = registry.removeClient(busName: busName) else { return [] }
        for manager in client.managers.values { tearDown(manager) }
        return done()
    }

    private func tearDown(_ manager: Manager) {
        for publication in manager.publications.values { remove(publication) }
        for subscription in manager.subscriptions.values { remove(subscription) }
        let id = ObjectIdentifier(manager)
        guard managers.removeValue(forKey: id) != nil else { return }
        manager.state.link = nil
        effects.append(.managerEnded(manager))
        let account = manager.account
        managersOfAccount[account]?.remove(id)
        guard managersOfAccount[account]?.isEmpty ?? true else { return }
        managersOfAccount[account] = nil
        announcingServerStatus {
            guard let link = links.removeValue(forKey: account) else { return }
            link.retired = true
            // With no app using the server, what its last attempt found no longer says anything.
            if links.isEmpty { serverUnreachable = nil }
            effects.append(.retireLink(link))
        }
    }

    // MARK: Run modes

    /// The decision of an app (a user's AppId) changed: its managers say so,
    /// and their objects stop or resume.
    public func permissionChanged(uid: UInt32, appId: String) -> [Effect] {
        for manager in managers.values where manager.client.uid == uid && manager.appId == appId {
            manager.state.permitted = manager.state.exempt || permits(manager)
            effects.append(.managerChanged(manager, [NearbyBusContract.Manager1.permissionGranted]))
            reconcile(manager)
        }
        return done()
    }

    /// A manager going to or from the background. While it is there only its
    /// objects with `AllowInBackground` run, on BLE alone, listening with low
    /// power unless another manager needs full listening; the others wait for
    /// the foreground. `requested` is the client's wish; `sessionAway` its
    /// login session's state.
    public func setBackground(_ manager: Manager, requested: Bool? = nil, sessionAway: Bool? = nil) -> [Effect] {
        place(manager, requested: requested, sessionAway: sessionAway)
        return done()
    }

    /// A client's login session became active or went away: its managers follow.
    public func session(of busName: String, away: Bool) -> [Effect] {
        for manager in managers(of: busName) { place(manager, sessionAway: away) }
        return done()
    }

    private func place(_ manager: Manager, requested: Bool? = nil, sessionAway: Bool? = nil) {
        // A manager released while its login session was asked about is no one's concern.
        guard managers[ObjectIdentifier(manager)] != nil else { return }
        var state = manager.state
        guard !state.exempt else { return }
        if let requested { state.backgroundRequested = requested }
        if let sessionAway { state.sessionAway = sessionAway }
        let background = state.backgroundRequested || state.sessionAway
        let moved = state.background != background
        state.background = background
        manager.state = state
        guard moved else { return }
        effects.append(.managerChanged(manager, [NearbyBusContract.Manager1.background]))
        reconcile(manager)
        // The beacon watch listens as its managers' placement says, which no run records.
        effects.append(.mediumsChanged)
        record(background ? "in the background" : "in the foreground", by: manager, [:])
    }

    // MARK: Publications and subscriptions

    /// A new publication of `manager`, running at once where it may.
    public func publish(_ message: Message, strategy: Strategy, in manager: Manager) throws(NearbyError) -> (Publication, [Effect]) {
        let expiresAtMs = clock.nowMs + UInt64(strategy.ttlSeconds) * 1000
        let publication = try registry.addPublication(to: manager, message: message, strategy: strategy,
                                                      expiresAtMs: expiresAtMs)
        publications[publication.id] = publication
        schedule(publication.id, at: expiresAtMs, renewed: manager.state.exempt)
        reconcile(publication, made: true)
        record("published", by: manager, ["object": "\(publication.path)", "type": "\(message.type)",
                                          "medium": "\(Medium.names(strategy.mediums))"])
        return (publication, done())
    }

    /// A new subscription of `manager`, running at once where it may.
    public func subscribe(_ filter: MessageFilter, strategy: Strategy, deviceTypes: DeviceTypes,
                          in manager: Manager) throws(NearbyError) -> (Subscription, [Effect]) {
        if deviceTypes.beacons != nil, !enabledMediums.contains(.ble) {
            throw .notSupported("beacon subscriptions need BLE, which this daemon's configuration disables")
        }
        let expiresAtMs = strategy.ttlSeconds == 0 ? 0 : clock.nowMs + UInt64(strategy.ttlSeconds) * 1000
        let subscription = try registry.addSubscription(to: manager, filter: filter, strategy: strategy,
                                                        deviceTypes: deviceTypes, expiresAtMs: expiresAtMs)
        subscriptions[subscription.id] = subscription
        if expiresAtMs > 0 { schedule(subscription.id, at: expiresAtMs, renewed: false) }
        reconcile(subscription, made: true)
        record("subscribed", by: manager, ["object": "\(subscription.path)", "type": "\(filter.type)",
                                           "medium": "\(Medium.names(deviceTypes.nearby ? strategy.mediums : [.ble]))",
                                           "beacons": "\(deviceTypes.beacons != nil)"])
        return (subscription, done())
    }

    /// Unpublish: the publication ends; nothing, if it already has (the
    /// registry never gives its number to another). The bus face has the
    /// object at hand, so the core need not find it by id.
    public func end(_ publication: Publication) -> [Effect] {
        remove(publication)
        return done()
    }

    /// Unsubscribe: the subscription ends; nothing, if it already has.
    public func end(_ subscription: Subscription) -> [Effect] {
        remove(subscription)
        return done()
    }

    /// Runs `body` on the view of `manager`'s link in place; nil when it has
    /// none. Reading goes through here too: reading `link.view` copies the
    /// view, retaining and releasing each of its tables, on every Publish.
    @discardableResult
    private func withLink<T>(of manager: Manager, _ body: (inout LinkView) -> T) -> T? {
        guard let link = manager.state.link else { return nil }
        return body(&link.view)
    }

    private func remove(_ publication: Publication) {
        guard registry.remove(publication) else { return }
        publications.removeValue(forKey: publication.id)
        expiries.cancel(publication.id)
        record("publication ended", by: publication.manager, ["object": "\(publication.path)"])
        apply(runs.end(&publication.run).change)
        if let link = publication.manager.state.link {
            link.view.ended(publication.id)
            effects.append(.link(link, .unpublish(publication.id)))
        }
        effects.append(.ended(publication))
    }

    private func remove(_ subscription: Subscription) {
        guard registry.remove(subscription) else { return }
        subscriptions.removeValue(forKey: subscription.id)
        expiries.cancel(subscription.id)
        record("subscription ended", by: subscription.manager, ["object": "\(subscription.path)"])
        let transition = runs.end(&subscription.run)
        if transition.beacons == .stopped { effects.append(.unwatchBeacons(subscription)) }
        apply(transition.change)
        if subscription.deviceTypes.nearby, let link = subscription.manager.state.link {
            link.view.ended(subscription.id)
            effects.append(.link(link, .unsubscribe(subscription.id)))
        }
        effects.append(.ended(subscription))
    }

    // MARK: Running and waiting

    /// Starts, stops or moves every object of a manager as its permission and
    /// background say.
    private func reconcile(_ manager: Manager) {
        for publication in manager.publications.values { reconcile(publication) }
        for subscription in manager.subscriptions.values { reconcile(subscription) }
    }

    /// `made`: the publication is being made, and its first status is no
    /// change to anyone (see ``set(_:_:of:made:)``).
    private func reconcile(_ publication: Publication, made: Bool = false) {
        let manager = publication.manager
        let (request, state) = (RunRequest(publication), manager.state)
        let transition = runs.reconcile(&publication.run, request, permitted: state.permitted, background: state.background)
        apply(transition.change)
        switch transition.nearby {
        case .started:
            if let link = state.link { effects.append(.link(link, .publish(publication))) }
        case .stopped:
            if let link = state.link {
                link.view.stopped(publication.id)
                effects.append(.link(link, .unpublish(publication.id)))
            }
            record("publication waiting", by: manager, ["object": "\(publication.path)"])
        case .unchanged:
            break
        }
        refreshStatus(of: publication, made: made)
    }

    private func reconcile(_ subscription: Subscription, made: Bool = false) {
        let manager = subscription.manager
        let (request, state) = (RunRequest(subscription), manager.state)
        let transition = runs.reconcile(&subscription.run, request, permitted: state.permitted, background: state.background)
        // The watch before the mediums: their wish asks it how to listen.
        switch transition.beacons {
        case .started:
            if let strategy = subscription.deviceTypes.beacons { effects.append(.watchBeacons(subscription, strategy)) }
        case .stopped:
            effects.append(.unwatchBeacons(subscription))
            _ = subscription.found.keepOnly(subscription.found.sourceIDs.filter { !FoundSource.isBeacon($0) })
        case .unchanged:
            break
        }
        apply(transition.change)
        switch transition.nearby {
        case .started:
            if let link = state.link { effects.append(.link(link, .subscribe(subscription))) }
        case .stopped:
            if let link = state.link {
                link.view.stopped(subscription.id)
                effects.append(.link(link, .unsubscribe(subscription.id)))
            }
            _ = subscription.found.keepOnly(subscription.found.sourceIDs.filter(FoundSource.isBeacon))
        case .unchanged:
            break
        }
        if transition.nearby == .stopped || transition.beacons == .stopped {
            record("subscription waiting", by: manager, ["object": "\(subscription.path)"])
        }
        refreshStatus(of: subscription, made: made)
    }

    /// Brings the mediums, the links' listening and the managers' error
    /// properties in line with what a change of the runs changed.
    private func apply(_ change: RunChange) {
        for (account, mediums) in change.startedListening {
            guard let link = links[account] else { continue }
            // A link that starts listening on mediums is told what is already heard there.
            let heard = sightings.current.filter { mediums.contains($0.medium) }
            if !heard.isEmpty { effects.append(.link(link, .seen(heard))) }
        }
        if change.mediumsChanged { effects.append(.mediumsChanged) }
        for id in change.managers {
            if let manager = managers[id] { refreshErrors(of: manager) }
        }
    }

    // MARK: Time

    private func schedule(_ id: String, at ms: UInt64, renewed: Bool) {
        if let deadline = expiries.schedule(id, expiresAtMs: ms, renewed: renewed) { effects.append(.tickAt(deadline)) }
    }

    /// The TTLs due end (`Expired` first) and the static publications due are
    /// renewed; then the next deadline is set.
    public func tick() -> [Effect] {
        for entry in expiries.due(nowMs: clock.nowMs) {
            switch entry {
            case .renew(let id):
                if let publication = publications[id] { renew(publication) }
            case .expire(let id):
                if let publication = publications[id] {
                    effects.append(.expired(publication))
                    remove(publication)
                } else if let subscription = subscriptions[id] {
                    effects.append(.expired(subscription))
                    remove(subscription)
                }
            }
        }
        if let deadline = expiries.rearm() { effects.append(.tickAt(deadline)) }
        return done()
    }

    /// A static publication's day is nearly over: the server is given another.
    private func renew(_ publication: Publication) {
        publication.expiresAtMs = clock.nowMs + UInt64(publication.strategy.ttlSeconds) * 1000
        schedule(publication.id, at: publication.expiresAtMs, renewed: true)
        if publication.run?.nearby != nil, let link = publication.manager.state.link {
            effects.append(.link(link, .publish(publication)))
        }
    }

    // MARK: Server links

    /// Runs `change` and announces `Server` if it changed: around what can
    /// change it (links coming and going, connecting, failing), not every
    /// event of a link, as the status looks at every link.
    private func announcingServerStatus<T>(_ change: () -> T) -> T {
        let before = serverStatus
        let result = change()
        if serverStatus != before { effects.append(.daemonChanged(NearbyBusContract.Nearby1.server)) }
        return result
    }

    /// An event of `link`; nothing, once it is retired.
    public func link(_ link: Link, _ event: LinkEvent) -> [Effect] {
        guard !link.retired else { return [] }
        let account = link.account
        let own = OwnSubscriptions(account: account, subscriptions: subscriptions)
        let change: LinkView.Change
        switch event {
        case .connected, .disconnected, .waiting:
            change = announcingServerStatus {
                let change = link.view.apply(event, subscriptions: own)
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
            change = link.view.apply(event, subscriptions: own)
        }
        if change.namespaceChanged {
            for publication in publications.values
            where publication.manager.account == account && publication.message.namespace.isEmpty {
                effects.append(.objectChanged(publication, [NearbyBusContract.Publication1.namespace]))
            }
        }
        switch change.statuses {
        case .none: break
        case .all: refreshStatuses(of: account)
        case .object(let id):
            if let publication = publications[id] {
                refreshStatus(of: publication)
            } else if let subscription = subscriptions[id] {
                refreshStatus(of: subscription)
            }
        }
        if change.keyRefusedChanged {
            for id in managersOfAccount[account] ?? [] {
                if let manager = managers[id] { effects.append(.managerChanged(manager, [NearbyBusContract.Manager1.apiKeyError])) }
            }
        }
        if change.tokenChanged {
            if let token = link.view.token {
                ownTokens.append(token)
                if ownTokens.count > 64 { ownTokens.removeFirst(ownTokens.count - 64) }
            }
            effects.append(.mediumsChanged)
        }
        for found in change.found {
            effects.append(.found(found))
            switch found {
            case .found(let id, let source, _, let info):
                if let subscription = subscriptions[id] {
                    record("message found", by: subscription.manager,
                           ["object": "\(subscription.path)", "source": "\(source)", "medium": "\(info.medium)"])
                }
            case .lost(let id, let source, _, _):
                if let subscription = subscriptions[id] {
                    record("message lost", by: subscription.manager,
                           ["object": "\(subscription.path)", "source": "\(source ?? "(gone from the snapshot)")"])
                }
            }
        }
        return done()
    }

    // MARK: Mediums

    /// A medium heard a token: the links listening there are told, unless
    /// it is one of this daemon's own or was told of lately.
    public func heard(_ sighting: Sighting, at now: ContinuousClock.Instant) -> [Effect] {
        guard !ownTokens.contains(sighting.token), let report = sightings.heard(sighting, at: now) else { return [] }
        for link in links.values where runs.scans(link.account, on: sighting.medium) {
            effects.append(.link(link, .seen([report])))
        }
        return done()
    }

    /// Tokens not heard for the lost timeout are gone.
    public func expireSightings(at now: ContinuousClock.Instant) -> [Effect] {
        let gone = sightings.expire(at: now)
        guard !gone.isEmpty else { return [] }
        for link in links.values { effects.append(.link(link, .gone(gone))) }
        return done()
    }

    /// A medium's condition changed: `AvailableMediums`, the statuses and the
    /// managers' error properties follow.
    public func medium(_ medium: Medium, is condition: MediumCondition) -> [Effect] {
        guard mediumConditions.updateValue(condition, forKey: medium) != condition else { return [] }
        logger.info("medium \(condition)", metadata: ["medium": "\(medium)"])
        let available = condition == .ready
        if available ? availableMediums.insert(medium).inserted : availableMediums.remove(medium) != nil {
            effects.append(.daemonChanged(NearbyBusContract.Nearby1.availableMediums))
            for account in links.keys { refreshStatuses(of: account) }
            for subscription in subscriptions.values where !subscription.deviceTypes.nearby { refreshStatus(of: subscription) }
        }
        for manager in managers.values { refreshErrors(of: manager) }
        return done()
    }

    // MARK: Status and errors

    private func refreshStatuses(of account: Account) {
        for publication in publications.values where publication.manager.account == account { refreshStatus(of: publication) }
        for subscription in subscriptions.values where subscription.manager.account == account { refreshStatus(of: subscription) }
    }

    private func refreshStatus(of publication: Publication, made: Bool = false) {
        guard publication.run?.nearby != nil,
              let (status, reason) = withLink(of: publication.manager, {
                  $0.status(of: publication.id, mediums: publication.strategy.mediums, available: availableMediums)
              }) else {
            return set(.inactive, Placement.waitingReason(permitted: isPermitted(publication.manager)), of: publication, made: made)
        }
        set(status, reason, of: publication, made: made)
    }

    private func refreshStatus(of subscription: Subscription, made: Bool = false) {
        let nearbyRuns = subscription.run?.nearby != nil
        let beaconsRun = subscription.run?.beacons ?? false
        guard nearbyRuns || beaconsRun else {
            return set(.inactive, Placement.waitingReason(permitted: isPermitted(subscription.manager)), of: subscription, made: made)
        }
        let nearby = nearbyRuns ? withLink(of: subscription.manager) {
            $0.status(of: subscription.id, mediums: subscription.strategy.mediums, available: availableMediums)
        } : nil
        let (status, reason) = LinkView.subscriptionStatus(nearby: nearby, beaconsRun: beaconsRun, available: availableMediums)
        set(status, reason, of: subscription, made: made)
    }

    /// `made`: the object is being made by the call now answered. No client
    /// knows its path before the reply, so its first status is its initial
    /// value, read with the object, not a change to signal: a signal sent
    /// then would reach nobody and cost every Publish and Subscribe a
    /// message through the bus.
    private func set(_ status: ObjectStatus, _ reason: String, of object: some RegisteredObject, made: Bool = false) {
        let statusChanged = status != object.status
        let reasonChanged = reason != object.statusReason
        guard statusChanged || reasonChanged else { return }
        object.status = status
        object.statusReason = reason
        if !made {
            // One of three lists made once.
            effects.append(.objectChanged(object, statusChanged ? (reasonChanged ? Self.statusAndReason : Self.status) : Self.reason))
        }
        if statusChanged, object.manager.state.exempt {
            effects.append(.daemonChanged(NearbyBusContract.Nearby1.staticPublications))
        }
    }

    private static let status = [NearbyBusContract.PublicationOrSubscription.status]
    private static let reason = [NearbyBusContract.PublicationOrSubscription.statusReason]
    private static let statusAndReason = status + reason

    /// The manager's error properties, as ``MediumErrors`` says, announced when they change.
    private func refreshErrors(of manager: Manager) {
        let before = manager.state.errors
        let errors = MediumErrors.of(inUse: runs.mediums(usedBy: ObjectIdentifier(manager)), enabled: enabledMediums,
                                     conditions: mediumConditions)
        guard errors != before else { return }
        manager.state.errors = errors
        typealias Manager1 = NearbyBusContract.Manager1
        var changed: [NearbyBusContract.Property] = []
        if errors.bluetoothPower != before.bluetoothPower { changed.append(Manager1.bluetoothPowerError) }
        if errors.bluetoothPermission != before.bluetoothPermission { changed.append(Manager1.bluetoothPermissionError) }
        if errors.microphonePermission != before.microphonePermission { changed.append(Manager1.microphonePermissionError) }
        effects.append(.managerChanged(manager, changed))
    }

    // MARK: Records

    /// A record of what a manager's objects do: at debug level, or at info for
    /// a manager created with `DebugLogging` (so it shows without turning on
    /// debug logging for the whole daemon). `metadata` is built only when the
    /// record is written: publishing and ending objects is the daemon's hot path.
    private func record(_ message: Logger.Message, by manager: Manager, _ metadata: @autoclosure () -> Logger.Metadata) {
        let level: Logger.Level = manager.debugLogging ? .info : .debug
        guard logger.logLevel <= level else { return }
        var metadata = metadata()
        metadata["client"] = "\(manager.client.busName)"
        metadata["manager"] = "\(manager.path)"
        metadata["app"] = "\(manager.appId)"
        logger.log(level: level, message, metadata: metadata)
    }
}

/// One link's subscriptions, for its stream: a link speaks of its own alone.
/// Holds a copy of the core's table, which costs nothing until changed.
private struct OwnSubscriptions: LinkSubscriptions {
    let account: Account
    let subscriptions: [String: Subscription]

    func subscription(_ id: String) -> Subscription? {
        guard let subscription = subscriptions[id], subscription.manager.account == account else { return nil }
        return subscription
    }

    func all() -> [Subscription] {
        subscriptions.values.filter { $0.manager.account == account }
    }

    func runs(_ id: String) -> Bool { subscriptions[id]?.run?.nearby != nil }
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

extension Manager {
    /// Its object's path: `/org/nearbyd/clientN/managerM`.
    public var path: String { "\(NearbyBusContract.rootPath)/client\(client.number)/manager\(number)" }
}

extension Publication {
    /// Its object's path, under its manager's.
    public var path: String { "\(manager.path)/\(pathElement)" }
    /// The last element of ``path``: this prefix and ``Publication/number``.
    public static let pathElementPrefix = "publication"
    public var pathElement: String { "\(Self.pathElementPrefix)\(number)" }
}

extension Subscription {
    public var path: String { "\(manager.path)/\(pathElement)" }
    /// The last element of ``path``: this prefix and ``Subscription/number``.
    public static let pathElementPrefix = "subscription"
    public var pathElement: String { "\(Self.pathElementPrefix)\(number)" }
}
