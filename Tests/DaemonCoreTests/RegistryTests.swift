@_spi(Testing) import DaemonCore
import NearbyBusContract
import NearbyCore
import Testing

@Suite struct RegistryTests {
    let message = Message(namespace: "", type: "chat", content: [1])

    @Test func limitsAreEnforcedPerClientAndManager() throws {
        let registry = Registry(limits: RegistryLimits(maxClients: 1, maxManagersPerClient: 1, maxObjectsPerManager: 2),
                                idPrefix: "t")
        let client = try registry.addClient(busName: ":1.1", uid: 1000)
        #expect(try registry.addClient(busName: ":1.1", uid: 1000) === client)
        #expect(throws: NearbyError.self) { try registry.addClient(busName: ":1.2", uid: 1000) }
        let manager = try registry.addManager(to: client, apiKey: "k", appId: "a", debugLogging: false)
        #expect(throws: NearbyError.self) { try registry.addManager(to: client, apiKey: "k", appId: "a", debugLogging: false) }
        _ = try registry.addPublication(to: manager, message: message, strategy: Strategy(), expiresAtMs: 1)
        let subscription = try registry.addSubscription(to: manager, filter: MessageFilter(), strategy: Strategy(), expiresAtMs: 0)
        #expect(throws: NearbyError.limitExceeded("a manager may have at most 2 publications and subscriptions ([limits] max-objects-per-manager)")) {
            try registry.addPublication(to: manager, message: message, strategy: Strategy(), expiresAtMs: 1)
        }
        #expect(registry.remove(subscription))
        #expect(!registry.remove(subscription))
        _ = try registry.addPublication(to: manager, message: message, strategy: Strategy(), expiresAtMs: 1)
    }

    @Test func eachUserHasItsOwnShareBeforeTheDaemonsLimit() throws {
        let registry = Registry(limits: RegistryLimits(maxClientsPerUser: 2, maxClients: 3, maxManagersPerClient: 4,
                                                       maxManagersPerUser: 3, maxAPIKeysPerUser: 2, maxObjectsPerManager: 5,
                                                       maxObjectsPerUser: 4, maxObjects: 6),
                                idPrefix: "t")
        func limit(_ name: String, _ body: () throws -> Void) {
            do {
                try body()
                Issue.record("no \(name)")
            } catch {
                let error = error as? NearbyError
                #expect(error?.busError == .limitExceeded && error?.message.contains(name) == true, "\(String(describing: error))")
            }
        }
        // Clients: the user's share, then the daemon's.
        let first = try registry.addClient(busName: ":1.1", uid: 1000)
        let second = try registry.addClient(busName: ":1.2", uid: 1000)
        limit("max-clients-per-user") { _ = try registry.addClient(busName: ":1.3", uid: 1000) }
        let other = try registry.addClient(busName: ":1.4", uid: 2000)
        limit("max-clients)") { _ = try registry.addClient(busName: ":1.5", uid: 3000) }

        // Managers over all of a user's clients, and the API keys they use.
        let a = try registry.addManager(to: first, apiKey: "k1", appId: "a", debugLogging: false)
        _ = try registry.addManager(to: second, apiKey: "k2", appId: "a", debugLogging: false)
        limit("max-api-keys-per-user") { _ = try registry.addManager(to: second, apiKey: "k3", appId: "a", debugLogging: false) }
        let b = try registry.addManager(to: second, apiKey: "k1", appId: "b", debugLogging: false)
        limit("max-managers-per-user") { _ = try registry.addManager(to: first, apiKey: "k1", appId: "c", debugLogging: false) }
        let stranger = try registry.addManager(to: other, apiKey: "k9", appId: "a", debugLogging: false)

        // Objects over all of a user's managers, then the daemon's.
        for _ in 0..<3 { _ = try registry.addPublication(to: a, message: message, strategy: Strategy(), expiresAtMs: 1) }
        let last = try registry.addSubscription(to: b, filter: MessageFilter(), strategy: Strategy(), expiresAtMs: 0)
        limit("max-objects-per-user") { _ = try registry.addPublication(to: b, message: message, strategy: Strategy(), expiresAtMs: 1) }
        _ = try registry.addPublication(to: stranger, message: message, strategy: Strategy(), expiresAtMs: 1)
        _ = try registry.addPublication(to: stranger, message: message, strategy: Strategy(), expiresAtMs: 1)
        limit("max-objects)") { _ = try registry.addPublication(to: stranger, message: message, strategy: Strategy(), expiresAtMs: 1) }
        #expect(registry.objectCount == 6)

        // What goes gives its share back: an object, a manager with its objects, a client with its managers.
        registry.remove(last)
        _ = try registry.addPublication(to: b, message: message, strategy: Strategy(), expiresAtMs: 1)
        registry.removeManager(a)
        #expect(registry.objectCount == 3)
        _ = try registry.addManager(to: first, apiKey: "k1", appId: "c", debugLogging: false)
        registry.removeClient(busName: ":1.2")
        #expect(registry.objectCount == 2)
        _ = try registry.addManager(to: first, apiKey: "k3", appId: "d", debugLogging: false)
        limit("max-api-keys-per-user") { _ = try registry.addManager(to: first, apiKey: "k4", appId: "e", debugLogging: false) }
        _ = try registry.addClient(busName: ":1.6", uid: 1000)
        for _ in 0..<2 { _ = try registry.addPublication(to: stranger, message: message, strategy: Strategy(), expiresAtMs: 1) }
        limit("max-objects-per-user") { _ = try registry.addPublication(to: stranger, message: message, strategy: Strategy(), expiresAtMs: 1) }
    }

    @Test func whatIsForgottenGivesItsShareBackOnce() throws {
        let registry = Registry(limits: RegistryLimits(maxManagersPerUser: 1, maxObjectsPerUser: 1), idPrefix: "t")
        let client = try registry.addClient(busName: ":1.1", uid: 1000)
        let manager = try registry.addManager(to: client, apiKey: "k", appId: "a", debugLogging: false)
        let publication = try registry.addPublication(to: manager, message: message, strategy: Strategy(), expiresAtMs: 1)
        registry.removeClient(busName: ":1.1")
        // Its manager and object, ended after it, count no more and give back nothing more.
        registry.removeManager(manager)
        registry.remove(publication)
        #expect(registry.objectCount == 0)
        let again = try registry.addClient(busName: ":1.2", uid: 1000)
        let next = try registry.addManager(to: again, apiKey: "k", appId: "b", debugLogging: false)
        #expect(throws: NearbyError.self) { try registry.addManager(to: again, apiKey: "k", appId: "c", debugLogging: false) }
        _ = try registry.addPublication(to: next, message: message, strategy: Strategy(), expiresAtMs: 1)
        #expect(throws: NearbyError.self) { try registry.addPublication(to: next, message: message, strategy: Strategy(), expiresAtMs: 1) }
        #expect(registry.objectCount == 1)
    }

    @Test func numbersAndIdsAreNeverReused() throws {
        let registry = Registry(limits: RegistryLimits(), idPrefix: "run")
        let first = try registry.addClient(busName: ":1.1", uid: 0)
        registry.removeClient(busName: ":1.1")
        let second = try registry.addClient(busName: ":1.1", uid: 0)
        #expect(second.number == first.number + 1)
        let manager = try registry.addManager(to: second, apiKey: "k", appId: "a", debugLogging: false)
        let publication = try registry.addPublication(to: manager, message: message, strategy: Strategy(), expiresAtMs: 1)
        registry.remove(publication)
        let next = try registry.addPublication(to: manager, message: message, strategy: Strategy(), expiresAtMs: 1)
        #expect(next.number == publication.number + 1)
        #expect(next.id != publication.id && next.id.hasPrefix("run-"))
    }

    /// Ids are the prefix and a base-36 counter: with the daemon's prefix of
    /// 8 characters at most, 15 bytes, which Swift keeps inline.
    @Test func idsAreShortEnoughToBeKeptInline() throws {
        let registry = Registry(limits: RegistryLimits(), idPrefix: "zzzzzzzz")
        let manager = try registry.addManager(to: try registry.addClient(busName: ":1.1", uid: 0), apiKey: "k", appId: "a",
                                              debugLogging: false)
        let ids = try (1...40).map { _ in
            try registry.addPublication(to: manager, message: message, strategy: Strategy(), expiresAtMs: 1).id
        }
        #expect(ids[0] == "zzzzzzzz-1" && ids[9] == "zzzzzzzz-a" && ids[35] == "zzzzzzzz-10")
        #expect(ids == (1...40).map { "zzzzzzzz-" + String($0, radix: 36) })
        for value: UInt64 in [0, 35, 36, 1_295, 1_296, 2_176_782_335, 2_176_782_336, .max] {
            #expect(Registry.base36(value) == String(value, radix: 36))
        }
        #expect(ids.allSatisfy { $0.utf8.count <= 15 })
    }

    /// An account is its user and its key: the same pair made twice is one
    /// account (one server link), a different user or key another.
    @Test func accountsAreTheirUserAndKey() {
        let key = String(repeating: "k", count: 39)
        let account = Account(uid: 1000, apiKey: key)
        let again = Account(uid: 1000, apiKey: String(repeating: "k", count: 38) + "k")
        #expect(account == again && account.hashValue == again.hashValue)
        let others = [Account(uid: 1001, apiKey: key), Account(uid: 1000, apiKey: key + "x"), Account(uid: 1000, apiKey: "")]
        for other in others { #expect(other != account, "\(other)") }
        #expect(Set(others + [account, again]).count == 4)
    }
}

@Suite struct FoundTrackerTests {
    let hello = Message(namespace: "p", type: "chat", content: Array("hello".utf8))
    let info = SightingInfo(medium: .ble, rssi: -60, distanceMeters: 1)

    @Test func aMessageIsFoundOnceWhileAnySourceIsNear() {
        var tracker = FoundTracker()
        let found = [
            tracker.add(source: "A/1", message: hello, info: info),
            tracker.add(source: "C/7", message: hello, info: info),
            tracker.add(source: "A/1", message: hello, info: info),
        ]
        #expect(found == [true, false, false])
        let lost = [tracker.remove(source: "A/1"), tracker.remove(source: "C/7"), tracker.remove(source: "C/7")]
        #expect(lost.map { $0?.0 } == [nil, hello, nil])
        #expect(tracker.messages.isEmpty)
    }

    @Test func keepOnlyDropsWhatASnapshotNoLongerHas() {
        var tracker = FoundTracker()
        let other = Message(namespace: "p", type: "chat", content: [2])
        _ = tracker.add(source: "A/1", message: hello, info: info)
        _ = tracker.add(source: "B/1", message: other, info: info)
        let lost = tracker.keepOnly(["B/1"])
        #expect(lost.map(\.0) == [hello])
        #expect(tracker.sourceIDs == ["B/1"])
    }
}

@Suite struct SightingTrackerTests {
    let token = Token(bytes: [1, 2, 3, 4, 5, 6, 7, 8])!

    func sighting(rssi: Int = -60) -> Sighting {
        Sighting(token: token, medium: .ble, rssi: rssi, txPower: -59, distanceMeters: 1, seenAtMilliseconds: 0)
    }

    @Test func newTokensAreReportedAtOnceThenEveryRefreshInterval() {
        var tracker = SightingTracker(lostTimeout: .seconds(3), refreshInterval: .seconds(1))
        let start = ContinuousClock.now
        let reports = [
            tracker.heard(sighting(), at: start),
            tracker.heard(sighting(), at: start + .milliseconds(500)),
            tracker.heard(sighting(rssi: -70), at: start + .milliseconds(1000)),
        ]
        #expect(reports.map { $0?.rssi } == [-60, nil, -70])
    }

    @Test func tokensNotHeardForTheLostTimeoutAreGone() {
        var tracker = SightingTracker(lostTimeout: .seconds(3), refreshInterval: .seconds(1))
        let start = ContinuousClock.now
        _ = tracker.heard(sighting(), at: start)
        _ = tracker.heard(sighting(), at: start + .seconds(2))
        let early = tracker.expire(at: start + .milliseconds(4900))
        #expect(early.isEmpty)
        #expect(tracker.nextExpiry == start + .seconds(5))
        let gone = tracker.expire(at: start + .seconds(5))
        #expect(gone == [Sighting.Key(token: token, medium: .ble)])
        #expect(tracker.current.isEmpty)
    }

    @Test func distanceFollowsThePathLossModel() {
        #expect(PathLoss.distance(rssi: -59, txPower: -59) == 1)
        #expect(abs(PathLoss.distance(rssi: -79, txPower: -59) - 10) < 1e-9)
        #expect(abs(PathLoss.rssi(distance: 10, txPower: -59) - -79) < 1e-9)
    }
}
