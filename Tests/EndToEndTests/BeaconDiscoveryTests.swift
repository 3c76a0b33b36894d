import DBus
import Foundation
import NearbyMessages
import Testing
import TestSupport

/// Beacon subscriptions end to end: beacons hosted by nearby-air (real
/// Eddystone and iBeacon advertising data), a nearbyd whose sim BLE backend
/// hears them, and the NearbyMessages library.
@Suite(.serialized) struct BeaconDiscoveryTests {
    static let options = Cluster.Options(extraConfiguration: """

        [beacons]
        lost-timeout = 2
        signal-interval = 0.2
        cache-ttl = 1
        """)

    static let uidNamespace = "8b0ca750095477cb3e77"
    static let uidInstance = "331122334455"
    static let iBeaconUUID = "e2c56db5-dffb-48d2-b060-d0f5a71096e0"

    @Test func rawSubscriptionsSeeEveryBeaconWithoutAServer() async throws {
        try await withCluster(BeaconDiscoveryTests.options) { cluster in
            await cluster.killServer()
            let device = try await cluster.addDevice("A", at: (0, 0))
            let manager = try await MessageManager(device, apiKey: "no-server-needed")
            let raw = try await manager.record(deviceTypes: .bleBeacon, beaconStrategy: BeaconStrategy(raw: true))
            let noIBeacons = try await manager.record(deviceTypes: .bleBeacon,
                                                      beaconStrategy: BeaconStrategy(includeIBeacons: false, raw: true))

            try await cluster.placeBeacon("uid", "eddystone-uid", "\(Self.uidNamespace)/\(Self.uidInstance)", at: (2, 0))
            try await cluster.placeBeacon("ibeacon", "ibeacon", "\(Self.iBeaconUUID)/1/2", at: (0, 3), txPower: -65)

            let uid = try await raw.events.first(within: 15, "the Eddystone-UID") { $0.kind == .found && $0.info?.beacon?.kind == "eddystone-uid" }
            // Active without a server: beacons need BLE only.
            #expect(try await raw.subscription.status == "active")
            #expect(uid.message?.namespace == "__reserved_namespace")
            #expect(uid.message?.type == "__eddystone_uid")
            #expect(uid.message?.content == Data(hex: Self.uidNamespace + Self.uidInstance))
            #expect(uid.info?.beacon?.id == Self.uidNamespace + Self.uidInstance)
            #expect(uid.info?.beacon?.txPower == -59)
            // 2 m from -59 dBm at 1 m, free space: -65 dBm.
            #expect(uid.info?.rssi == -65)
            #expect(abs((uid.info?.distanceMeters ?? 0) - 2) < 0.2)

            let iBeacon = try await raw.events.first(within: 15, "the iBeacon") { $0.kind == .found && $0.info?.beacon?.kind == "ibeacon" }
            #expect(iBeacon.message?.type == "__i_beacon_id")
            #expect(iBeacon.message?.content == Data(hex: "e2c56db5dffb48d2b060d0f5a71096e000010002"))
            #expect(iBeacon.info?.beacon?.txPower == -65)
            #expect(abs((iBeacon.info?.distanceMeters ?? 0) - 3) < 0.3)
            // Both subscriptions are told of a frame in the same turn, in order:
            // by now the one without iBeacons has seen the UID and not the iBeacon.
            _ = try await noIBeacons.events.first(within: 15, "the UID without iBeacons") { $0.kind == .found }
            #expect(noIBeacons.events.values.map(\.info?.beacon?.kind) == ["eddystone-uid"])

            // A subscription made while beacons are in range finds them at once.
            let late = try await manager.record(deviceTypes: .bleBeacon, beaconStrategy: BeaconStrategy(raw: true))
            _ = try await late.events.first(within: 5, "the UID, already in range") { $0.kind == .found && $0.info?.beacon?.kind == "eddystone-uid" }
            _ = try await late.events.first(within: 5, "the iBeacon, already in range") { $0.kind == .found && $0.info?.beacon?.kind == "ibeacon" }

            // Nearer: the distance follows, at most once per signal interval.
            try await cluster.move("uid", to: (0.5, 0))
            _ = try await raw.events.first(within: 15, "the UID's distance near 0.5 m") {
                $0.kind == .distance && $0.message?.type == "__eddystone_uid" && abs(($0.value ?? 0) - 0.5) < 0.2
            }
            // Smoothed: the RSSI reported climbs from -65 towards -53 dBm in steps of 2 dB or more.
            _ = try await raw.events.first(within: 15, "the UID's RSSI near -53 dBm") {
                $0.kind == .signal && $0.message?.type == "__eddystone_uid" && (-56 ... -50).contains($0.value ?? 0)
            }

            // Out of range: lost after the lost timeout.
            try await cluster.move("uid", to: (1000, 0))
            _ = try await raw.events.first(within: 15, "the UID lost") { $0.kind == .lost && $0.message?.type == "__eddystone_uid" }
            #expect(!raw.events.values.contains { $0.kind == .lost && $0.message?.type == "__i_beacon_id" })
        }
    }

    @Test func registeredBeaconsYieldTheirAttachmentsToTheirProjectOnly() async throws {
        try await withCluster(BeaconDiscoveryTests.options) { cluster in
            let key = try await cluster.createProject("shop")
            _ = try await cluster.createProject("rival")
            let uid = Self.uidNamespace + Self.uidInstance
            let rival = "e2c56db5dffb48d2b060d0f5a71096e000030004"
            try await cluster.serverCommand(["beacon", "register", "--project", "shop", "--type", "eddystone", "--id", uid])
            try await cluster.serverCommand(["beacon", "attachment", "add", "3!\(uid)", "--project", "shop",
                                             "--type", "menu", "--data", "soup of the day"])
            try await cluster.serverCommand(["beacon", "attachment", "add", "3!\(uid)", "--project", "shop",
                                             "--type", "offer", "--data", "two for one"])
            try await cluster.serverCommand(["beacon", "register", "--project", "rival", "--type", "ibeacon", "--id", rival])
            try await cluster.serverCommand(["beacon", "attachment", "add", "1!\(rival)", "--project", "rival",
                                             "--type", "menu", "--data", "the rival's menu"])
            let device = try await cluster.addDevice("A", at: (0, 0))
            let manager = try await MessageManager(device, apiKey: key)
            let everything = try await manager.record(deviceTypes: .bleBeacon)
            let menus = try await manager.record(type: "menu", deviceTypes: .bleBeacon)

            // The rival's beacon (registered, with an attachment in its own private
            // namespace) is asked about and yields nothing.
            try await cluster.placeBeacon("rival", "ibeacon", "\(Self.iBeaconUUID)/3/4", at: (1, 0))
            _ = try await device.daemon.waitForLine(containing: "attachments=0 beacon=IBEACON:\(rival)")

            try await cluster.placeBeacon("door", "eddystone-uid", "\(Self.uidNamespace)/\(Self.uidInstance)", at: (2, 0))
            let found = try await everything.wait(.found, "soup of the day")
            #expect(found.message?.namespace == "shop" && found.message?.type == "menu")
            #expect(found.info?.beacon == BeaconInfo(kind: "eddystone-uid", id: uid, txPower: -59))
            let offer = try await everything.wait(.found, "two for one")
            try await menus.wait(.found, "soup of the day")

            // Answers are asked again after the cache TTL: a new attachment is
            // found and a deleted one lost while the beacon stays in range.
            try await cluster.serverCommand(["beacon", "attachment", "add", "3!\(uid)", "--project", "shop",
                                             "--type", "offer", "--data", "free coffee"])
            try await everything.wait(.found, "free coffee")
            let offers = try await cluster.serverCommand(["beacon", "attachment", "list", "3!\(uid)", "--project", "shop", "--json"])
            let listed = try JSONSerialization.jsonObject(with: Data(offers.utf8)) as? [[String: Any]]
            let name = try #require(listed?.first { $0["data"] as? String == Data("two for one".utf8).base64EncodedString() }?["attachmentName"] as? String)
            try await cluster.serverCommand(["beacon", "attachment", "delete", name, "--project", "shop"])
            try await everything.wait(.lost, "two for one")
            #expect(offer.info?.beacon?.id == uid)

            try await cluster.move("door", to: (1000, 0))
            try await everything.wait(.lost, "soup of the day")
            try await everything.wait(.lost, "free coffee")
            try await menus.wait(.lost, "soup of the day")
            #expect(menus.kinds == ["found shop/menu 'soup of the day'", "lost shop/menu 'soup of the day'"])
            #expect(!everything.kinds.contains { $0.contains("rival") })
        }
    }

    @Test func nearbyctlShowsTheBeaconsInRange() async throws {
        try await withCluster(BeaconDiscoveryTests.options) { cluster in
            let device = try await cluster.addDevice("A", at: (0, 0))
            try await cluster.placeBeacon("shelf", "ibeacon", "\(BeaconDiscoveryTests.iBeaconUUID)/7/9", at: (1, 0))
            let watch = try await ChildProcess(name: "nearbyctl", executable: Programs.path("nearbyctl"), arguments: [
                "beacons", "--bus", device.busAddress, "--api-key", "key", "--raw-only", "--json", "--count", "1",
            ])
            let line = try await watch.waitForLine(containing: #""event":"in-range""#)
            let event = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(event?["kind"] as? String == "ibeacon")
            #expect(event?["id"] as? String == "e2c56db5dffb48d2b060d0f5a71096e000070009")
            #expect(event?["rssi"] as? Int == -59)
            #expect(try await watch.waitForExit() == 0)
        }
    }

    @Test func beaconSubscriptionsAreCheckedAndNeedBLE() async throws {
        try await withCluster(BeaconDiscoveryTests.options) { cluster in
            let device = try await cluster.addDevice("A", at: (0, 0))
            let manager = try await MessageManager(device, apiKey: "key")
            for (deviceTypes, strategy) in [(DeviceTypes.nearby, BeaconStrategy(raw: true)), ([], nil)] {
                await #expect { _ = try await manager.record(deviceTypes: deviceTypes, beaconStrategy: strategy) } throws: {
                    ($0 as? NearbyMessagesError)?.kind == .invalidArguments
                }
            }
            // Audio alone: beacons are BLE's.
            let deaf = try await cluster.addDevice("B", at: (0, 0), ble: "backend = \"off\"\n[audio]\nbackend = \"sim\"")
            await #expect { _ = try await MessageManager(deaf, apiKey: "key").record(deviceTypes: .bleBeacon) } throws: {
                ($0 as? NearbyMessagesError)?.kind == .notSupported
            }
        }
    }
}

extension Data {
    /// Bytes from an even number of hex digits (tests only: malformed text traps).
    init(hex: String) {
        self.init(stride(from: 0, to: hex.count, by: 2).map { offset in
            let start = hex.index(hex.startIndex, offsetBy: offset)
            return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)!
        })
    }
}
