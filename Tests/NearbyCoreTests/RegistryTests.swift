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
        _ = try registry.addPublication(to: manager, message: message, strategy: Strategy(), expiresAt: 1)
        let subscription = try registry.addSubscription(to: manager, filter: MessageFilter(), strategy: Strategy(), expiresAt: 0)
        #expect(throws: NearbyError.limitExceeded("a manager may have at most 2 publications and subscriptions")) {
            try registry.addPublication(to: manager, message: message, strategy: Strategy(), expiresAt: 1)
        }
        #expect(registry.remove(subscription))
        #expect(!registry.remove(subscription))
        _ = try registry.addPublication(to: manager, message: message, strategy: Strategy(), expiresAt: 1)
    }

    @Test func numbersAndIdsAreNeverReused() throws {
        let registry = Registry(limits: RegistryLimits(), idPrefix: "run")
        let first = try registry.addClient(busName: ":1.1", uid: 0)
        registry.removeClient(busName: ":1.1")
        let second = try registry.addClient(busName: ":1.1", uid: 0)
        #expect(second.number == first.number + 1)
        let manager = try registry.addManager(to: second, apiKey: "k", appId: "a", debugLogging: false)
        let publication = try registry.addPublication(to: manager, message: message, strategy: Strategy(), expiresAt: 1)
        registry.remove(publication)
        let next = try registry.addPublication(to: manager, message: message, strategy: Strategy(), expiresAt: 1)
        #expect(next.number == publication.number + 1)
        #expect(next.id != publication.id && next.id.hasPrefix("run-"))
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
