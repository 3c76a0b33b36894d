import Beacons
import Mediums
import NearbyCore
import Testing
@testable import NearbyDaemon

struct BeaconTrackerTests {
    static let uid = BeaconFrame.eddystoneUID(EddystoneUID(
        txPower: -18, namespace: try! EddystoneNamespace(hex: "8b0ca750095477cb3e77"),
        instance: try! EddystoneInstance(hex: "331122334455")))
    static let tlm = BeaconFrame.eddystoneTLM(EddystoneTLM(batteryVoltage: 3000, temperatureFixedPoint: 5376,
                                                           advertisingPDUCount: 10, uptimeDeciseconds: 100))
    let start = ContinuousClock.now

    @Test func aBeaconIsNewOnceSmoothedAndGoneAfterTheLostTimeout() {
        var tracker = BeaconTracker(lostTimeout: .seconds(2), smoothing: 0.5)
        let id = Self.uid.advertisedID!
        let first = tracker.heard(BeaconSighting(frame: Self.uid, sender: "a", rssi: -70), at: start)
        let second = tracker.heard(BeaconSighting(frame: Self.uid, sender: "a", rssi: -60), at: start + .seconds(1))
        #expect(first == id && second == nil)
        let beacon = tracker.beacons[id]!
        // Eddystone declares -18 dBm at 0 m: -59 dBm at 1 m.
        #expect(beacon.powerAtOneMetre == -59)
        #expect(beacon.rssi == -65)
        #expect(abs(beacon.distance - PathLoss.distance(rssi: -65.0, txPower: -59)) < 1e-9)
        #expect(beacon.info == BeaconDetails(kind: "eddystone-uid", id: "8b0ca750095477cb3e77331122334455", txPower: -59))
        let early = tracker.expire(at: start + .milliseconds(2_900))
        let late = tracker.expire(at: start + .seconds(3))
        #expect(early.isEmpty && late.map(\.id) == [id])
        #expect(tracker.beacons.isEmpty)
    }

    @Test func telemetryKeepsTheBeaconOfItsSenderInRange() {
        var tracker = BeaconTracker(lostTimeout: .seconds(2))
        let id = Self.uid.advertisedID!
        // TLM from an unknown sender, and URL frames, identify nothing.
        let unknown = tracker.heard(BeaconSighting(frame: Self.tlm, sender: "a", rssi: -60), at: start)
        #expect(unknown == nil)
        #expect(tracker.beacons.isEmpty)
        _ = tracker.heard(BeaconSighting(frame: Self.uid, sender: "a", rssi: -60), at: start)
        _ = tracker.heard(BeaconSighting(frame: Self.tlm, sender: "a", rssi: -60), at: start + .seconds(1))
        _ = tracker.heard(BeaconSighting(frame: Self.tlm, sender: "b", rssi: -60), at: start + .seconds(1))
        #expect(tracker.beacons[id]?.telemetry == EddystoneTLM(batteryVoltage: 3000, temperatureFixedPoint: 5376,
                                                               advertisingPDUCount: 10, uptimeDeciseconds: 100).serviceData)
        let early = tracker.expire(at: start + .milliseconds(2_500))
        let late = tracker.expire(at: start + .seconds(3))
        #expect(early.isEmpty && late.count == 1)
    }

    @Test func accuracyGrowsWithTheSpreadOfTheSignal() {
        var steady = BeaconTracker(lostTimeout: .seconds(2))
        var noisy = BeaconTracker(lostTimeout: .seconds(2))
        for (index, rssi) in [-60, -60, -60, -60, -60, -60].enumerated() {
            _ = steady.heard(BeaconSighting(frame: Self.uid, sender: "a", rssi: rssi), at: start + .seconds(index))
        }
        for (index, rssi) in [-60, -70, -52, -68, -54, -62].enumerated() {
            _ = noisy.heard(BeaconSighting(frame: Self.uid, sender: "a", rssi: rssi), at: start + .seconds(index))
        }
        let id = Self.uid.advertisedID!
        #expect(steady.beacons[id]!.accuracy > 0)
        #expect(noisy.beacons[id]!.accuracy > 2 * steady.beacons[id]!.accuracy)
    }
}

struct AttachmentCacheTests {
    let key = AttachmentCache.Key(apiKey: "k", namespacedType: "*", beacon: BeaconTrackerTests.uid.advertisedID!)
    let now = ContinuousClock.now

    @Test func answersAreKeptForTheirTimeThenAskedAgainWhileStillUsable() {
        var cache = AttachmentCache(ttl: .seconds(10))
        let first = cache.shouldAsk(key, at: now)
        let again = cache.shouldAsk(key, at: now)
        #expect(first && !again)
        let attachment = BeaconAttachment(namespace: "demo", type: "menu", data: Array("soup".utf8))
        cache.answered(key, [attachment], at: now)
        let fresh = cache.shouldAsk(key, at: now + .seconds(9))
        let expired = cache.shouldAsk(key, at: now + .seconds(10))
        let refreshing = cache.shouldAsk(key, at: now + .seconds(10))
        #expect(!fresh && expired && !refreshing)
        #expect(cache.attachments(key) == [attachment])
        // A failed refresh keeps the old answer and asks again after the first retry delay.
        cache.failed(key, at: now + .seconds(11))
        #expect(cache.attachments(key) == [attachment])
        let retried = cache.shouldAsk(key, at: now + .seconds(12))
        #expect(retried)
    }

    @Test func failuresBackOffUpToTheMaximum() {
        var cache = AttachmentCache(ttl: .seconds(10), firstRetryDelay: .seconds(1), maximumRetryDelay: .seconds(3))
        var time = now
        var waits: [Duration] = []
        let asked = cache.shouldAsk(key, at: time)
        #expect(asked)
        for _ in 0..<4 {
            cache.failed(key, at: time)
            let since = time
            while !cache.shouldAsk(key, at: time) { time += .milliseconds(500) }
            waits.append(time - since)
        }
        #expect(waits == [.seconds(1), .seconds(2), .seconds(3), .seconds(3)])
        #expect(cache.attachments(key) == nil)
    }

    @Test func pruningKeepsWhatIsInRangeOrStillFresh() {
        var cache = AttachmentCache(ttl: .seconds(10))
        _ = cache.shouldAsk(key, at: now)
        cache.answered(key, [], at: now)
        cache.prune(keeping: [], at: now + .seconds(5))
        #expect(cache.attachments(key) == [])
        cache.prune(keeping: [key.beacon], at: now + .seconds(20))
        #expect(cache.attachments(key) == [])
        cache.prune(keeping: [], at: now + .seconds(20))
        #expect(cache.attachments(key) == nil)
    }
}

struct BeaconWatchNamingTests {
    @Test(arguments: [
        (MessageFilter(), "*"), (MessageFilter(type: "menu"), "*"),
        (MessageFilter(namespace: "other"), "other/*"), (MessageFilter(namespace: "other", type: "menu"), "other/menu"),
    ])
    func subscriptionsAskForTheirNamespace(filter: MessageFilter, namespacedType: String) async {
        #expect(await BeaconWatch.namespacedType(filter) == namespacedType)
    }
}
