import DaemonCore
import Foundation
import Logging
import NearbyBusContract
import NearbyCore
import ServerAPI
import Testing

/// The daemon's logic as a client meets it, with no bus, server or radio:
/// commands in, effects out, a clock moved by hand. The server link is
/// played by the test, which reads the link commands and answers with the
/// link's events.
@Suite struct CoreTests {
    /// The apps the user let use Nearby, by AppId.
    private final class Decisions {
        var granted: Set<String> = ["app"]
    }

    private let clock = ManualWallClock(nowMs: 1_800_000_000_000)
    private let decisions = Decisions()
    private let core: Core
    private let start = ContinuousClock.now
    private let tokenHeard = Token(bytes: Array(repeating: 0x5A, count: Token.byteCount))!
    private let ownToken = Token(bytes: Array(repeating: 0x0E, count: Token.byteCount))!

    init() {
        self.init(enabled: [.ble, .audio])
    }

    private init(enabled: Set<Medium>) {
        let decisions = decisions
        core = Core(registry: Registry(limits: RegistryLimits(), idPrefix: "test"), enabledMediums: enabled,
                    serverURLs: ["https://nearby.example"], refusedRetry: "30 s",
                    sightings: SightingTracker(lostTimeout: .seconds(5), refreshInterval: .seconds(2)),
                    clock: clock, logger: Logger(label: "core-tests")) { manager in
            decisions.granted.contains(manager.appId)
        }
    }

    // MARK: Effects as lines

    /// One effect as a short line: what a reader of the test checks.
    private static func line(_ effect: Effect) -> String {
        switch effect {
        case .managerChanged(let manager, let properties):
            "\(manager.appId) changed \(properties.map(\.name).joined(separator: ","))"
        case .objectChanged(let object, let properties): "\(object.id) changed \(properties.map(\.name).joined(separator: ","))"
        case .daemonChanged(let property): "Nearby1 changed \(property.name)"
        case .found(.found(let id, _, let message, _)): "\(id) found \(String(decoding: message.content, as: UTF8.self))"
        case .found(.lost(let id, _, let message, _)): "\(id) lost \(String(decoding: message.content, as: UTF8.self))"
        case .expired(let object): "\(object.id) expired"
        case .ended(let object): "\(object.id) ended"
        case .managerEnded(let manager): "\(manager.appId) ended"
        case .openLink(let link): "open link \(link.account.apiKey)"
        case .retireLink(let link): "retire link \(link.account.apiKey)"
        case .link(let link, let command): "link \(link.account.apiKey): " + line(command)
        case .mediumsChanged: "mediums"
        case .watchBeacons(let subscription, _): "watch beacons \(subscription.id)"
        case .unwatchBeacons(let subscription): "unwatch beacons \(subscription.id)"
        case .tickAt(let ms): "tick at +\(ms - 1_800_000_000_000) ms"
        }
    }

    private static func line(_ command: LinkCommand) -> String {
        switch command {
        case .publish(let publication): "publish \(publication.id)"
        case .unpublish(let id): "unpublish \(id)"
        case .subscribe(let subscription): "subscribe \(subscription.id)"
        case .unsubscribe(let id): "unsubscribe \(id)"
        case .seen(let sightings): "seen \(sightings.count)"
        case .gone(let keys): "gone \(keys.count)"
        }
    }

    private static func lines(_ effects: [Effect]) -> [String] { effects.map(line) }

    /// The link commands among `effects`.
    private static func linkLines(_ effects: [Effect]) -> [String] {
        lines(effects).filter { $0.hasPrefix("link ") }
    }

    // MARK: Fixtures

    private func manager(_ busName: String = ":1.10", uid: UInt32 = 1000, apiKey: String = "key",
                         appId: String = "app", exempt: Bool = false) throws -> (Manager, [Effect]) {
        let client = try core.registry.addClient(busName: busName, uid: uid)
        return try core.addManager(to: client, apiKey: apiKey, appId: appId, debugLogging: false, exempt: exempt)
    }

    private func message(_ text: String) -> Message { Message(namespace: "ns", type: "t", content: Array(text.utf8)) }

    private func strategy(_ mediums: Set<Medium> = [.ble, .audio], ttl: UInt32 = 300, background: Bool = false) -> Strategy {
        Strategy(mediums: mediums, ttlSeconds: ttl, allowInBackground: background)
    }

    private func connect(_ account: Account, holding registered: Set<String> = []) -> [Effect] {
        core.link(account, .connected(namespace: "project", registered: registered, server: "https://nearby.example"))
    }

    // MARK: Publications and permission

    @Test func aPublicationIsActiveOnceTheServerHoldsItAndAMediumWorks() throws {
        let (manager, opened) = try self.manager()
        #expect(Self.lines(opened) == ["open link key", "Nearby1 changed Server"])
        #expect(core.serverStatus == "connecting")
        let (publication, effects) = try core.publish(message("hello"), strategy: strategy(), in: manager)
        #expect(Self.linkLines(effects) == ["link key: publish \(publication.id)"])
        #expect(Self.lines(effects).contains("tick at +300000 ms"))
        #expect(publication.status == .starting && publication.statusReason == "connecting to nearby-server")
        #expect(!Self.lines(effects).contains { $0.hasPrefix("\(publication.id) changed") },
                "a status set while the object is made is its initial value: no client knows its path yet")

        #expect(Self.lines(connect(manager.account)).contains("Nearby1 changed Server"))
        #expect(core.serverStatus == "connected: https://nearby.example")
        #expect(publication.statusReason == "being registered with nearby-server")
        _ = core.link(manager.account, .registered(publication.id))
        #expect(publication.status == .starting, "no medium works yet")
        let ready = core.medium(.ble, is: .ready)
        #expect(Self.lines(ready).contains("Nearby1 changed AvailableMediums"))
        #expect(Self.lines(ready).contains("\(publication.id) changed Status,StatusReason"))
        #expect(publication.status == .active)
    }

    @Test func effectsHandedBackLeaveNoneOfThemToTheNextCommand() throws {
        let (manager, _) = try self.manager()
        let (publication, published) = try core.publish(message("p"), strategy: strategy(), in: manager)
        let (twin, twinPublished) = try core.publish(message("q"), strategy: strategy(), in: manager)
        #expect(Self.linkLines(published) == ["link key: publish \(publication.id)"])
        core.recycle(published)
        core.recycle(twinPublished) // one buffer is kept; this one goes
        let ended = Self.lines(core.end(publication))
        #expect(ended == ["link key: unpublish \(publication.id)", "\(publication.id) ended"],
                "the end's effects, and nothing of the Publish whose buffer it reused")
        // Not handed back: the next command gets a buffer of its own all the same.
        // The last publication gone, the mediums stop.
        #expect(Self.lines(core.end(twin)) == ["mediums", "app changed BluetoothPowerError",
                                                  "link key: unpublish \(twin.id)", "\(twin.id) ended"])
        // An Unpublish that races the end (a second call, or the TTL) does nothing.
        #expect(core.end(twin).isEmpty)
    }

    /// A publication and a subscription hold their manager strongly (the
    /// manager's tables hold them): what ended must still be freed, or a
    /// long-running daemon grows with every object it ever held.
    @Test func whatEndedIsFreedThoughObjectsHoldTheirManager() throws {
        weak var ended: Publication?
        weak var kept: Subscription?
        weak var released: Manager?
        do {
            let (manager, _) = try self.manager()
            let (publication, published) = try core.publish(message("p"), strategy: strategy(), in: manager)
            let (subscription, subscribed) = try core.subscribe(MessageFilter(), strategy: strategy(),
                                                                deviceTypes: DeviceTypes(), in: manager)
            core.recycle(published)
            core.recycle(subscribed)
            core.recycle(core.end(publication))
            (ended, kept, released) = (publication, subscription, manager)
        }
        #expect(ended == nil, "an ended publication")
        #expect(kept != nil && released != nil, "the manager and its live subscription")
        do {
            let manager = try #require(released)
            core.recycle(core.release(manager))
        }
        #expect(kept == nil, "a subscription of a released manager")
        #expect(released == nil, "a released manager")
    }

    @Test func whatAClientThatLeftHeldIsFreed() throws {
        weak var live: Publication?
        weak var left: Manager?
        do {
            let (manager, _) = try self.manager(":1.20")
            let (publication, published) = try core.publish(message("p"), strategy: strategy(), in: manager)
            core.recycle(published)
            (live, left) = (publication, manager)
        }
        #expect(live != nil && left != nil, "the client is still connected")
        core.recycle(core.clientLeft(":1.20"))
        #expect(live == nil, "a publication of a client that left")
        #expect(left == nil, "a manager of a client that left")
    }

    @Test func aRevokedPermissionStopsEveryObjectOfTheAppAndAGrantResumesThem() throws {
        let (manager, _) = try self.manager()
        decisions.granted.insert("other")
        let (other, _) = try self.manager(":1.11", appId: "other")
        let (publication, _) = try core.publish(message("p"), strategy: strategy(), in: manager)
        let (subscription, _) = try core.subscribe(MessageFilter(), strategy: strategy(), deviceTypes: DeviceTypes(), in: manager)
        let (untouched, _) = try core.publish(message("o"), strategy: strategy(), in: other)
        _ = connect(manager.account, holding: [publication.id, subscription.id, untouched.id])

        decisions.granted.remove("app")
        let revoked = core.permissionChanged(uid: 1000, appId: "app")
        #expect(Self.lines(revoked).first == "app changed PermissionGranted")
        #expect(Set(Self.linkLines(revoked)) == ["link key: unpublish \(publication.id)", "link key: unsubscribe \(subscription.id)"])
        #expect(publication.status == .inactive && subscription.status == .inactive)
        #expect(publication.statusReason == "the app is not permitted to use Nearby (PermissionGranted)")
        #expect(untouched.run?.nearby == .foreground, "another app's publication on the same link runs on")

        decisions.granted.insert("app")
        let granted = core.permissionChanged(uid: 1000, appId: "app")
        #expect(Set(Self.linkLines(granted)) == ["link key: publish \(publication.id)", "link key: subscribe \(subscription.id)"])
        #expect(publication.statusReason == "being registered with nearby-server", "the server must hold it again")
    }

    /// The broker tells the core of every change of a decision; between
    /// changes a Publish reads the answer the core was last given.
    @Test func theDecisionIsAskedWhenTheManagerIsMadeAndWhenItChanges() throws {
        let (manager, _) = try self.manager()
        #expect(core.isPermitted(manager))
        decisions.granted.remove("app")
        let (publication, _) = try core.publish(message("p"), strategy: strategy(), in: manager)
        #expect(publication.run?.nearby == .foreground, "no change was announced: the last answer holds")
        _ = core.permissionChanged(uid: 1000, appId: "app")
        #expect(!core.isPermitted(manager) && publication.run?.nearby == nil)
        #expect(publication.statusReason == "the app is not permitted to use Nearby (PermissionGranted)")
    }

    @Test func anotherUsersDecisionForTheSameAppIdChangesNothing() throws {
        let (manager, _) = try self.manager()
        _ = try core.publish(message("p"), strategy: strategy(), in: manager)
        #expect(core.permissionChanged(uid: 1001, appId: "app").isEmpty)
    }

    // MARK: Clients leaving, releases and links

    @Test func aClientLeavingEndsItsObjectsTellsTheServerAndRetiresTheLinkLast() throws {
        let (manager, _) = try self.manager()
        let (publication, _) = try core.publish(message("p"), strategy: strategy(), in: manager)
        let (subscription, _) = try core.subscribe(MessageFilter(), strategy: strategy(), deviceTypes: DeviceTypes(), in: manager)
        let lines = Self.lines(core.clientLeft(":1.10"))
        for expected in ["link key: unpublish \(publication.id)", "\(publication.id) ended",
                         "link key: unsubscribe \(subscription.id)", "\(subscription.id) ended", "app ended", "retire link key",
                         "Nearby1 changed Server"] {
            #expect(lines.contains(expected), "\(expected)")
        }
        // The link drains what it was told before it goes; the manager's objects go before it.
        #expect(lines.firstIndex(of: "retire link key")! > lines.firstIndex(of: "link key: unpublish \(publication.id)")!)
        #expect(lines.firstIndex(of: "app ended")! > lines.firstIndex(of: "\(subscription.id) ended")!)
        #expect(core.serverStatus == "idle")
        #expect(core.registry.objectCount == 0 && core.managers.isEmpty && core.links.isEmpty)
        #expect(core.clientLeft(":1.10").isEmpty, "a client leaves once")
    }

    @Test func aLinkLivesWhileAnyManagerOfItsAccountDoes() throws {
        let (first, _) = try self.manager()
        let (second, opened) = try self.manager(":1.11")
        #expect(!Self.lines(opened).contains("open link key"), "one link per user and API key")
        let (otherUser, openedOther) = try self.manager(":1.12", uid: 1001)
        #expect(Self.lines(openedOther).contains("open link key"), "another user's traffic is never mixed in")
        #expect(!Self.lines(core.release(first)).contains("retire link key"))
        #expect(Self.lines(core.release(second)).contains("retire link key"))
        #expect(core.links.keys.map(\.uid) == [otherUser.account.uid])
    }

    @Test func aWaitingUnreachableServerIsTheDaemonsStatusUntilALinkConnects() throws {
        let (manager, _) = try self.manager()
        let waiting = core.link(manager.account, .waiting("connection refused", reached: false))
        #expect(Self.lines(waiting) == ["Nearby1 changed Server"])
        #expect(core.serverStatus == "unreachable: connection refused")
        #expect(core.link(manager.account, .waiting("connection refused", reached: false)).isEmpty)
        _ = connect(manager.account)
        #expect(core.serverStatus == "connected: https://nearby.example")
        _ = core.link(manager.account, .disconnected)
        #expect(core.serverStatus == "connecting", "a connection since says the old failure no longer holds")
    }

    @Test func eventsOfALinkNoLongerOpenChangeNothing() throws {
        let (manager, _) = try self.manager()
        _ = core.release(manager)
        #expect(connect(manager.account).isEmpty)
    }

    /// The bus face asks a client's login session while it makes a manager,
    /// and the client may release the manager before the answer comes.
    @Test func aReleasedManagerGoesNeitherToNorFromTheBackground() throws {
        let (manager, _) = try self.manager()
        _ = core.release(manager)
        #expect(core.setBackground(manager, sessionAway: true).isEmpty)
        #expect(core.setBackground(manager, requested: true).isEmpty)
        #expect(!core.isBackground(manager))
    }

    // MARK: Found and lost

    @Test func aFoundReachesOnlyTheSubscriptionOfTheLinkThatStreamedIt() throws {
        let (manager, _) = try self.manager()
        let (stranger, _) = try self.manager(":1.11", uid: 1001)
        let (subscription, _) = try core.subscribe(MessageFilter(), strategy: strategy(), deviceTypes: DeviceTypes(), in: manager)
        let (theirs, _) = try core.subscribe(MessageFilter(), strategy: strategy(), deviceTypes: DeviceTypes(), in: stranger)
        _ = connect(manager.account, holding: [subscription.id])
        func match(_ id: String) -> LinkEvent {
            .stream(.found(Match(subscription: id, source: "pub-1", namespace: "ns", type: "t", content: Data("hi".utf8),
                                 medium: .ble, rssi: -60, distance: 1)))
        }
        #expect(Self.lines(core.link(manager.account, match(subscription.id))) == ["\(subscription.id) found hi"])
        #expect(core.link(manager.account, match(theirs.id)).isEmpty, "a link speaks of its own account's subscriptions")
        let lost = core.link(manager.account, .stream(.lost(subscription: subscription.id, source: "pub-1")))
        #expect(Self.lines(lost) == ["\(subscription.id) lost hi"])
    }

    @Test func aSnapshotAfterAReconnectLosesWhatWentMeanwhile() throws {
        let (manager, _) = try self.manager()
        let (subscription, _) = try core.subscribe(MessageFilter(), strategy: strategy(), deviceTypes: DeviceTypes(), in: manager)
        _ = connect(manager.account, holding: [subscription.id])
        _ = core.link(manager.account, .stream(.found(Match(subscription: subscription.id, source: "pub-1", namespace: "ns",
                                                             type: "t", content: Data("hi".utf8), medium: .ble, rssi: -60,
                                                             distance: 1))))
        _ = core.link(manager.account, .disconnected)
        #expect(subscription.status == .starting)
        _ = connect(manager.account, holding: [subscription.id])
        let snapshot = core.link(manager.account, .stream(.snapshot([])))
        #expect(Self.lines(snapshot) == ["\(subscription.id) lost hi"])
    }

    // MARK: Time

    @Test func aTTLEndsItsObjectWithExpiredBeforeItGoes() throws {
        let (manager, _) = try self.manager()
        let (subscription, effects) = try core.subscribe(MessageFilter(), strategy: strategy(ttl: 10), deviceTypes: DeviceTypes(),
                                                         in: manager)
        #expect(Self.lines(effects).contains("tick at +10000 ms"))
        let (publication, later) = try core.publish(message("p"), strategy: strategy(ttl: 60), in: manager)
        #expect(!Self.lines(later).contains { $0.hasPrefix("tick at") }, "the timer is already set for an earlier deadline")
        clock.advance(byMs: 9_999)
        #expect(Self.lines(core.tick()) == ["tick at +10000 ms"], "nothing due yet: the timer is armed again")
        clock.advance(byMs: 1)
        let due = Self.lines(core.tick())
        #expect(due.first == "\(subscription.id) expired")
        #expect(due.contains("link key: unsubscribe \(subscription.id)"))
        #expect(due.firstIndex(of: "\(subscription.id) ended")! > 0)
        #expect(due.last == "tick at +60000 ms", "then the publication's")
        #expect(core.subscriptions[subscription.id] == nil && core.publications[publication.id] != nil)
    }

    @Test func aStaticPublicationIsRenewedBeforeItsDayEndsAndNeverExpires() throws {
        decisions.granted = []
        let (manager, _) = try self.manager(":1.1", uid: 0, appId: "static", exempt: true)
        let (publication, effects) = try core.publish(message("s"), strategy: strategy(ttl: Strategy.maximumTTL), in: manager)
        #expect(Self.linkLines(effects) == ["link key: publish \(publication.id)"], "the daemon's own needs no permission")
        #expect(core.setBackground(manager, requested: true).isEmpty, "and is never in the background")
        let renewAt = UInt64(Strategy.maximumTTL) * 1000 - 3_600_000
        #expect(Self.lines(effects).contains("tick at +\(renewAt) ms"))
        clock.advance(byMs: renewAt)
        let renewed = Self.lines(core.tick())
        #expect(renewed.contains("link key: publish \(publication.id)"))
        #expect(!renewed.contains("\(publication.id) expired"))
        #expect(publication.expiresAtMs == clock.nowMs + UInt64(Strategy.maximumTTL) * 1000)
        #expect(renewed.last == "tick at +\(2 * renewAt) ms")
    }

    @Test func aStaticPublicationsStatusIsTheDaemonsProperty() throws {
        let (manager, _) = try self.manager(":1.1", uid: 0, appId: "static", exempt: true)
        let (publication, _) = try core.publish(message("s"), strategy: strategy(), in: manager)
        _ = core.medium(.ble, is: .ready)
        let registered = Self.lines(connect(manager.account, holding: [publication.id]))
        #expect(registered.contains("Nearby1 changed StaticPublications"))
    }

    // MARK: Background and sessions

    @Test func inTheBackgroundOnlyAllowInBackgroundRunsOnBLEListeningWithLowPower() throws {
        let (manager, _) = try self.manager()
        let (foregroundOnly, _) = try core.publish(message("f"), strategy: strategy(), in: manager)
        let (subscription, _) = try core.subscribe(MessageFilter(), strategy: strategy(background: true),
                                                   deviceTypes: DeviceTypes(), in: manager)
        #expect(core.wish(for: .ble, beacons: .off).scanMode == .full)
        #expect(core.wish(for: .audio, beacons: .off).scanMode == .full)
        let moved = Self.lines(core.setBackground(manager, requested: true))
        #expect(moved.first == "app changed Background")
        #expect(moved.contains("link key: unpublish \(foregroundOnly.id)"))
        #expect(foregroundOnly.status == .inactive
            && foregroundOnly.statusReason == "its manager is in the background, and it has no AllowInBackground")
        #expect(subscription.run?.nearby == .background)
        #expect(core.wish(for: .ble, beacons: .off).scanMode == .lowPower)
        #expect(core.wish(for: .audio, beacons: .off).scanMode == .off, "audio never runs in the background")

        let back = Self.lines(core.setBackground(manager, requested: false))
        #expect(back.contains("link key: publish \(foregroundOnly.id)"))
        #expect(core.wish(for: .ble, beacons: .off).scanMode == .full)
    }

    @Test func aManagerIsInTheBackgroundWhileItAsksOrItsSessionIsAway() throws {
        let (manager, _) = try self.manager()
        #expect(Self.lines(core.session(of: ":1.10", away: true)).first == "app changed Background")
        #expect(core.setBackground(manager, requested: true).isEmpty, "already there")
        #expect(core.session(of: ":1.10", away: false).isEmpty, "still asked for")
        #expect(core.isBackground(manager))
        #expect(Self.lines(core.setBackground(manager, requested: false)).first == "app changed Background")
        #expect(!core.isBackground(manager))
    }

    // MARK: Beacons

    @Test func aBeaconSubscriptionIsWatchedWhileItRunsAndActiveWhileBLEWorks() throws {
        let (manager, _) = try self.manager()
        let beacons = DeviceTypes(nearby: false, beacons: BeaconStrategy(allowInBackground: false))
        let (subscription, effects) = try core.subscribe(MessageFilter(), strategy: strategy(), deviceTypes: beacons, in: manager)
        let lines = Self.lines(effects)
        #expect(lines.contains("watch beacons \(subscription.id)"))
        #expect(Self.linkLines(effects).isEmpty, "no nearby part: the server is not asked")
        #expect(lines.firstIndex(of: "watch beacons \(subscription.id)")! < lines.firstIndex(of: "mediums")!,
                "the watch first: the mediums' wish asks it how to listen")
        #expect(subscription.status == .starting && subscription.statusReason == "BLE is not available now")
        _ = core.medium(.ble, is: .ready)
        #expect(subscription.status == .active)
        #expect(Self.lines(core.setBackground(manager, requested: true)).contains("unwatch beacons \(subscription.id)"))
        #expect(subscription.status == .inactive)
        let ended = Self.lines(core.end(subscription))
        #expect(!ended.contains("unwatch beacons \(subscription.id)"), "it was not watched")
        #expect(ended.contains("\(subscription.id) ended"))
        #expect(core.end(subscription).isEmpty, "ended once")
    }

    @Test func beaconSubscriptionsNeedBLEInTheConfiguration() throws {
        let core = CoreTests(enabled: [.audio]).core
        let client = try core.registry.addClient(busName: ":1.10", uid: 1000)
        let (manager, _) = try core.addManager(to: client, apiKey: "key", appId: "app", debugLogging: false)
        #expect(throws: NearbyError.self) {
            try core.subscribe(MessageFilter(), strategy: Strategy(mediums: [.audio]),
                               deviceTypes: DeviceTypes(nearby: false, beacons: BeaconStrategy()), in: manager)
        }
    }

    // MARK: Mediums and sightings

    @Test func aTokenHeardGoesToTheListeningLinksOnceAndTheDaemonsOwnNever() throws {
        let (manager, _) = try self.manager()
        let (listener, _) = try core.subscribe(MessageFilter(), strategy: strategy([.ble]), deviceTypes: DeviceTypes(), in: manager)
        let (quiet, _) = try self.manager(":1.11", apiKey: "quiet")
        _ = try core.publish(message("p"), strategy: Strategy(mediums: [.ble], mode: .broadcast), in: quiet)
        #expect(Self.lines(core.link(quiet.account, .token(ownToken))) == ["mediums"])
        #expect(core.wish(for: .ble, beacons: .off).tokens == [ownToken])

        let heard = Sighting(token: tokenHeard, medium: .ble, rssi: -60, txPower: -59, distanceMeters: 1, seenAtMilliseconds: clock.nowMs)
        #expect(Self.lines(core.heard(heard, at: start)) == ["link key: seen 1"], "the link that only publishes is not told")
        #expect(core.heard(heard, at: start + .seconds(1)).isEmpty, "again within the refresh interval")
        #expect(Self.lines(core.heard(heard, at: start + .seconds(2))) == ["link key: seen 1"])
        var own = heard
        own.token = ownToken
        #expect(core.heard(own, at: start).isEmpty, "the daemon never reports hearing itself")
        #expect(core.expireSightings(at: start + .seconds(6)).isEmpty)
        #expect(Set(Self.lines(core.expireSightings(at: start + .seconds(7)))) == ["link key: gone 1", "link quiet: gone 1"])
        _ = listener
    }

    @Test func aLinkThatStartsListeningIsToldWhatIsAlreadyHeard() throws {
        let (manager, _) = try self.manager()
        let (first, _) = try self.manager(":1.11", apiKey: "first")
        _ = try core.subscribe(MessageFilter(), strategy: strategy([.ble]), deviceTypes: DeviceTypes(), in: first)
        let heard = Sighting(token: tokenHeard, medium: .ble, rssi: -60, txPower: -59, distanceMeters: 1, seenAtMilliseconds: clock.nowMs)
        _ = core.heard(heard, at: start)
        let (_, effects) = try core.subscribe(MessageFilter(), strategy: strategy([.ble]), deviceTypes: DeviceTypes(), in: manager)
        #expect(Self.linkLines(effects).contains("link key: seen 1"))
    }

    @Test func aManagersErrorPropertiesFollowTheMediumsItsObjectsUse() throws {
        let (manager, _) = try self.manager()
        let (publication, effects) = try core.publish(message("p"), strategy: strategy([.ble]), in: manager)
        #expect(Self.lines(effects).contains("app changed BluetoothPowerError"), "no word from BLE yet counts as off")
        #expect(manager.state.errors == MediumErrors(bluetoothPower: true))
        let refused = Self.lines(core.medium(.ble, is: .refused))
        #expect(refused.contains("app changed BluetoothPowerError,BluetoothPermissionError"))
        _ = core.medium(.ble, is: .ready)
        #expect(manager.state.errors == MediumErrors())
        #expect(Self.lines(core.end(publication)) == ["mediums", "link key: unpublish \(publication.id)", "\(publication.id) ended"])
        #expect(core.medium(.ble, is: .ready).isEmpty, "no change, nothing to say")
    }
}

extension Core {
    /// An event of `account`'s link, as its `ServerLink` would report it; nothing once it has none.
    func link(_ account: Account, _ event: LinkEvent) -> [Effect] {
        links[account].map { link($0, event) } ?? []
    }
}
