@_spi(Testing) import DaemonCore
import Foundation
import NearbyCore
import ServerAPI
import Testing

/// One server link as the daemon sees it: its events turned into the
/// objects' status and what its subscriptions found and lost, above all
/// across a reconnect's snapshot, with no server, socket or bus.
struct LinkViewTests {
    private let registry = Registry(limits: RegistryLimits(), idPrefix: "test")
    private let subscription: Subscription
    private let waiting: Subscription

    init() throws {
        let client = try registry.addClient(busName: ":1.7", uid: 1000)
        let manager = try registry.addManager(to: client, apiKey: "key", appId: "app", debugLogging: false)
        subscription = try registry.addSubscription(to: manager, filter: MessageFilter(), strategy: Strategy(), expiresAtMs: 0)
        waiting = try registry.addSubscription(to: manager, filter: MessageFilter(), strategy: Strategy(), expiresAtMs: 0)
    }

    /// The link's two subscriptions, the second waiting.
    private struct Subscriptions: LinkSubscriptions {
        let byID: [String: Subscription]
        let waiting: String

        func subscription(_ id: String) -> Subscription? { byID[id] }
        func all() -> [Subscription] { Array(byID.values) }
        func runs(_ id: String) -> Bool { id != waiting }
    }

    private var subscriptions: Subscriptions {
        Subscriptions(byID: [subscription.id: subscription, waiting.id: waiting], waiting: waiting.id)
    }

    private func match(_ source: String, for subscription: Subscription? = nil) -> Match {
        Match(subscription: (subscription ?? self.subscription).id, source: source, namespace: "ns", type: "t",
              content: Data(source.utf8), medium: .ble, rssi: -60, distance: 1.5)
    }

    private func message(_ source: String) -> Message { Message(namespace: "ns", type: "t", content: Array(source.utf8)) }

    /// Applies events in turn; the found and lost they caused, as `+source` and `-source`.
    private func apply(_ events: [LinkEvent], to view: inout LinkView) -> [String] {
        var signals: [String] = []
        for event in events {
            for change in view.apply(event, subscriptions: subscriptions).found {
                switch change {
                case .found(_, _, let message, _): signals.append("+" + String(decoding: message.content, as: UTF8.self))
                case .lost(_, _, let message, _): signals.append("-" + String(decoding: message.content, as: UTF8.self))
                }
            }
        }
        return signals
    }

    private let connected = LinkEvent.connected(namespace: "project", registered: [], server: "http://one")

    @Test func aSnapshotAfterAReconnectLosesWhatWentMeanwhileAndKeepsTheRestQuietly() {
        var view = LinkView(refusedRetry: "30 s")
        #expect(apply([connected, .stream(.found(match("a"))), .stream(.found(match("b")))], to: &view) == ["+a", "+b"])
        let signals = apply([
            .disconnected, connected,
            .stream(.snapshot([match("a")], more: true)),
            // Found between the pages: current, though no page lists it.
            .stream(.found(match("c"))),
            .stream(.snapshot([], more: false)),
        ], to: &view)
        #expect(signals == ["+c", "-b"])
        #expect(subscription.found.sourceIDs == ["a", "c"])
    }

    @Test func aMessageLostBetweenThePagesStaysLost() {
        var view = LinkView(refusedRetry: "30 s")
        _ = apply([connected, .stream(.found(match("a")))], to: &view)
        let signals = apply([
            .stream(.snapshot([match("a")], more: true)),
            .stream(.lost(subscription: subscription.id, source: "a")),
            .stream(.snapshot([], more: false)),
        ], to: &view)
        #expect(signals == ["-a"])
        #expect(subscription.found.sourceIDs.isEmpty)
    }

    @Test func aSnapshotCutShortByADisconnectionSaysNothing() {
        var view = LinkView(refusedRetry: "30 s")
        _ = apply([connected, .stream(.found(match("a"))), .stream(.found(match("b")))], to: &view)
        // The first page listed a; the connection broke before the last one.
        let signals = apply([
            .stream(.snapshot([match("a")], more: true)),
            .disconnected, connected,
            .stream(.snapshot([match("b")], more: false)),
        ], to: &view)
        #expect(signals == ["-a"])
    }

    @Test func beaconsFoundByTheWatchOutliveTheServersSnapshot() {
        var view = LinkView(refusedRetry: "30 s")
        let beacon = FoundSource.beaconPrefix + "eddystone|x"
        _ = subscription.found.add(source: beacon, message: message("beacon"),
                                   info: SightingInfo(medium: .ble, rssi: -70, distanceMeters: 3))
        #expect(apply([connected, .stream(.snapshot([], more: false))], to: &view).isEmpty)
        #expect(subscription.found.sourceIDs == [beacon])
    }

    @Test func aWaitingSubscriptionHearsNothing() {
        var view = LinkView(refusedRetry: "30 s")
        #expect(apply([connected, .stream(.found(match("a", for: waiting)))], to: &view).isEmpty)
        #expect(apply([.stream(.snapshot([match("b", for: waiting)], more: false))], to: &view).isEmpty)
        #expect(waiting.found.sourceIDs.isEmpty)
    }

    @Test func aMessageFromTwoSourcesIsFoundOnceAndLostWithTheLast() {
        var view = LinkView(refusedRetry: "30 s")
        var twin = match("a")
        twin.source = "a-elsewhere"
        #expect(apply([connected, .stream(.found(match("a"))), .stream(.found(twin))], to: &view) == ["+a"])
        #expect(apply([.stream(.lost(subscription: subscription.id, source: "a"))], to: &view).isEmpty)
        #expect(apply([.stream(.lost(subscription: subscription.id, source: "a-elsewhere"))], to: &view) == ["-a"])
    }

    /// ApiKeyError: set when a round of attempts ends with the server refusing
    /// the key, cleared when another cannot reach it or the link connects;
    /// each change said once.
    @Test func aRefusedKeyIsKnownUntilTheServerTakesItOrCannotBeReached() {
        var view = LinkView(refusedRetry: "30 s")
        #expect(!view.keyRefused)
        #expect(view.apply(.waiting("refuses the API key", reached: true), subscriptions: subscriptions).keyRefusedChanged)
        #expect(view.keyRefused)
        #expect(!view.apply(.waiting("refuses the API key", reached: true), subscriptions: subscriptions).keyRefusedChanged)
        #expect(view.apply(.waiting("connection refused", reached: false), subscriptions: subscriptions).keyRefusedChanged)
        #expect(!view.keyRefused)
        _ = view.apply(.waiting("refuses the API key", reached: true), subscriptions: subscriptions)
        #expect(view.apply(connected, subscriptions: subscriptions).keyRefusedChanged)
        #expect(!view.keyRefused)
        #expect(!view.apply(connected, subscriptions: subscriptions).keyRefusedChanged)
    }

    @Test func statusFollowsTheLinkTheServerAndTheMediums() {
        var view = LinkView(refusedRetry: "30 s")
        let id = subscription.id
        #expect(view.status(of: id, mediums: [.ble], available: [.ble]) == (.starting, "connecting to nearby-server"))
        let unreachable = view.apply(.waiting("connection refused", reached: false), subscriptions: subscriptions)
        #expect(unreachable.reach == .unreachable("connection refused"))
        #expect(unreachable.statuses == .all)
        #expect(view.status(of: id, mediums: [.ble], available: [.ble]) == (.starting, "connection refused"))
        // A refusal of the API key is no news of the server's reachability.
        #expect(view.apply(.waiting("unauthenticated", reached: true), subscriptions: subscriptions).reach == nil)

        let up = view.apply(connected, subscriptions: subscriptions)
        #expect(up.reach == .reached)
        #expect(up.namespaceChanged)
        #expect(view.server == "http://one")
        #expect(view.status(of: id, mediums: [.ble], available: [.ble]) == (.starting, "being registered with nearby-server"))

        let refused = view.apply(.refused(id, APIError(.limitExceeded, "too many"), retried: true), subscriptions: subscriptions)
        #expect(refused.statuses == .object(id))
        #expect(view.status(of: id, mediums: [.ble], available: [.ble]).reason.hasSuffix("; offered again every 30 s"))

        #expect(view.apply(.registered(id), subscriptions: subscriptions).statuses == .object(id))
        #expect(view.status(of: id, mediums: [.ble], available: [.ble]) == (.active, ""))
        #expect(view.status(of: id, mediums: [.audio, .ble], available: [])
            == (.starting, "none of its mediums (audio,ble) is available now"))

        view.stopped(id)
        #expect(view.status(of: id, mediums: [.ble], available: [.ble]) == (.starting, "being registered with nearby-server"))
        // The same namespace on a reconnect is no change.
        #expect(!view.apply(connected, subscriptions: subscriptions).namespaceChanged)
        #expect(view.apply(.disconnected, subscriptions: subscriptions).statuses == .all)
        #expect(!view.connected)
        #expect(view.registered.isEmpty)
    }

    @Test func aSubscriptionIsActiveOnceEachPartThatRunsIs() {
        let active = (status: ObjectStatus.active, reason: "")
        let registering = (status: ObjectStatus.starting, reason: "being registered with nearby-server")
        #expect(LinkView.subscriptionStatus(nearby: active, beaconsRun: true, available: [.ble]) == active)
        #expect(LinkView.subscriptionStatus(nearby: nil, beaconsRun: true, available: [.audio])
            == (.starting, "BLE is not available now"))
        #expect(LinkView.subscriptionStatus(nearby: registering, beaconsRun: true, available: []) == registering)
        #expect(LinkView.subscriptionStatus(nearby: registering, beaconsRun: false, available: [.ble]) == registering)
        #expect(LinkView.subscriptionStatus(nearby: active, beaconsRun: false, available: []) == active)
    }

    @Test func aNewTokenIsBroadcastAndNoneStopsIt() {
        var view = LinkView(refusedRetry: "30 s")
        let token = Token(bytes: Array(repeating: 7, count: Token.byteCount))!
        #expect(view.apply(.token(token), subscriptions: subscriptions).tokenChanged)
        #expect(view.token == token)
        #expect(view.apply(.token(nil), subscriptions: subscriptions).tokenChanged)
        #expect(view.token == nil)
    }
}
