import Foundation
import NearbyMessages
import Synchronization
import Testing
import TestSupport

/// nearbyd's BlueZ backend against bluetoothd's stand-in: the exact calls and
/// bytes it sends, and what it does as adapters and devices come, change and
/// go. (The same backend against the real bluetoothd runs in the QEMU rig.)
@Suite(.serialized) struct BlueZBackendTests {
    @Test func advertisesItsTokenAsServiceDataAndStopsWhenUnpublished() async throws {
        try await withBlueZ { cluster, bluez in
            let key = try await cluster.createProject("adv")
            let device = try await cluster.addDevice("A", ble: bluez.configuration())
            let publication = try await MessageManager(device, apiKey: key).publish("hello")

            let registered = try await bluez.call("RegisterAdvertisement") { $0.outcome == "ok" }
            #expect(registered.path == "/org/bluez/hci0")
            let advertisement = try #require(registered.advertisement)
            #expect(advertisement.type == "broadcast")
            #expect(advertisement.properties == ["ServiceData", "Type"])
            let token = try #require(advertisement.serviceData[BlueZStandIn.serviceUUID])
            #expect(token.count == 16)
            // Service Data - 128-bit UUID (0x21), 25 bytes long, the UUID little-endian, the token.
            #expect(advertisement.data == "1921" + BlueZStandIn.serviceUUIDLittleEndianHex + token)
            #expect(advertisement.data.count / 2 == 26)

            try await publication.unpublish()
            let unregistered = try await bluez.call("UnregisterAdvertisement")
            #expect(unregistered.outcome == "ok")
            #expect(unregistered.args == "[\"/org/nearbyd/ble/advertisement_\(token)\"]")
        }
    }

    @Test func scansWithAnLEFilterAndStopsWhenUnsubscribed() async throws {
        try await withBlueZ { cluster, bluez in
            let key = try await cluster.createProject("scan")
            let device = try await cluster.addDevice("B", ble: bluez.configuration())
            let subscription = try await MessageManager(device, apiKey: key).record()

            try await bluez.call("StartDiscovery") { $0.outcome == "ok" }
            let calls = bluez.calls.filter { $0.member.hasSuffix("Discovery") || $0.member == "SetDiscoveryFilter" }
            #expect(calls.map(\.member) == ["SetDiscoveryFilter", "StartDiscovery"])
            // No UUIDs: bluetoothd would match them against service UUID lists only.
            #expect(calls.first?.args == #"[{"DuplicateData": true, "Transport": "le"}]"#)
            #expect(calls.allSatisfy { $0.path == "/org/bluez/hci0" && $0.outcome == "ok" })

            // A session bluetoothd drops by itself is started again.
            try await bluez.dropDiscovery("hci0")
            try await bluez.call("StartDiscovery") { $0.n == 2 }

            try await subscription.subscription.unsubscribe()
            try await bluez.call("StopDiscovery") { $0.outcome == "ok" }
        }
    }

    @Test func findsAMessageHeardThroughBlueZAndLosesItWhenTheDeviceFallsSilent() async throws {
        let radioA = try await BlueZStandIn()
        try await withBlueZ { cluster, radioB in
            let key = try await cluster.createProject("relay")
            let a = try await cluster.addDevice("A", ble: radioA.configuration())
            let b = try await cluster.addDevice("B", ble: radioB.configuration())
            let publication = try await MessageManager(a, apiKey: key).publish("over the air")
            let subscription = try await MessageManager(b, apiKey: key).record()
            try await radioB.call("StartDiscovery") { $0.outcome == "ok" }

            // Noise first: another UUID, and nearbyd's UUID with a value of the wrong length.
            let uuid = BlueZStandIn.serviceUUID
            try await radioB.addDevice(on: "hci0", address: "C0:00:00:00:00:01", serviceData: ["0000feaa-0000-1000-8000-00805f9b34fb": [1, 2, 3]])
            try await radioB.addDevice(on: "hci0", address: "C0:00:00:00:00:02", serviceData: [uuid: [1, 2, 3, 4, 5, 6, 7, 8, 9]])

            // What A put on air, relayed to B's radio.
            let advertisement = try #require(try await radioA.call("RegisterAdvertisement") { $0.outcome == "ok" }.advertisement)
            let token = try #require(Self.bytes(advertisement.serviceData[uuid]))
            let peer = try await radioB.addDevice(on: "hci0", address: "C0:00:00:00:00:03", serviceData: [uuid: token], rssi: -65)
            let found = try await subscription.wait(.found, "over the air")
            #expect(found.info?.medium == "ble")
            #expect(found.info?.rssi == -65)
            #expect(subscription.kinds == ["found relay/chat 'over the air'"])

            // Silent from now on: lost after the hold and the lost timeout, and
            // the stale device is removed from bluetoothd.
            try await subscription.wait(.lost, "over the air", within: 30)
            let removed = try await radioB.call("RemoveDevice")
            #expect(removed.args == "[\"\(peer)\"]" && removed.outcome == "ok")
            #expect(cluster.device("B")?.daemon.isRunning == true)
            withExtendedLifetime(publication) {}
        }
        await radioA.stop()
    }

    @Test func eddystoneServiceDataOfBluezDevicesIsHeardAsABeacon() async throws {
        try await withBlueZ { cluster, bluez in
            let device = try await cluster.addDevice("A", ble: bluez.configuration())
            let raw = try await MessageManager(device, apiKey: "key")
                .record(deviceTypes: .bleBeacon, beaconStrategy: BeaconStrategy(raw: true))
            try await bluez.call("StartDiscovery") { $0.outcome == "ok" }
            // Eddystone-UID service data as bluetoothd keeps it: the frame after the 0xFEAA UUID,
            // declaring -18 dBm at 0 m (-59 dBm at 1 m).
            let id: [UInt8] = [0x8b, 0x0c, 0xa7, 0x50, 0x09, 0x54, 0x77, 0xcb, 0x3e, 0x77, 0x33, 0x11, 0x22, 0x33, 0x44, 0x55]
            let frame: [UInt8] = [0x00, 0xEE] + id + [0, 0]
            try await bluez.addDevice(on: "hci0", address: "C0:00:00:00:00:0B",
                                      serviceData: ["0000feaa-0000-1000-8000-00805f9b34fb": frame], rssi: -65)
            let found = try await raw.events.first(within: 15, "the Eddystone-UID over BlueZ") { $0.kind == .found }
            #expect(found.message?.content == Data(id))
            #expect(found.info?.beacon == BeaconInfo(kind: "eddystone-uid", id: "8b0ca750095477cb3e77331122334455", txPower: -59))
            #expect(found.info?.rssi == -65)
        }
    }

    @Test func bluetoothPowerErrorFollowsTheAdapterAndTheAdvertisementComesBack() async throws {
        try await withBlueZ { cluster, bluez in
            let key = try await cluster.createProject("power")
            let device = try await cluster.addDevice("A", ble: bluez.configuration())
            let errors = Inbox<MessageManager.ErrorState>()
            let manager = try await MessageManager(device, apiKey: key) { errors.put($0) }
            let publication = try await manager.publish("powered")
            try await bluez.call("RegisterAdvertisement") { $0.outcome == "ok" }
            #expect(try await manager.errorState == MessageManager.ErrorState())
            #expect(try await DaemonStatus.read(from: .address(device.busAddress)).availableMediums == ["ble"])
            // The publication may have come before BlueZ was read, with the error set and cleared since.
            errors.clear()

            try await bluez.setPowered("hci0", false)
            _ = try await errors.first(within: 10, "BluetoothPowerError") { $0.bluetoothPower }
            #expect(try await DaemonStatus.read(from: .address(device.busAddress)).availableMediums == [])

            try await bluez.setPowered("hci0", true)
            _ = try await errors.first(within: 10, "BluetoothPowerError cleared") { !$0.bluetoothPower }
            try await bluez.call("RegisterAdvertisement") { $0.n == 2 }
            withExtendedLifetime(publication) {}
        }
    }

    @Test func recoversWhenBluetoothdStartsLateAndWhenItRestarts() async throws {
        let bluez = try await BlueZStandIn(running: false)
        try await withBlueZ(bluez) { cluster, bluez in
            let key = try await cluster.createProject("restart")
            let device = try await cluster.addDevice("A", ble: bluez.configuration())
            let errors = Inbox<MessageManager.ErrorState>()
            let manager = try await MessageManager(device, apiKey: key) { errors.put($0) }
            let publication = try await manager.publish("late")
            let subscription = try await manager.record(type: "other")
            #expect(try await manager.errorState.bluetoothPower)

            try await bluez.start()
            try await bluez.call("RegisterAdvertisement") { $0.outcome == "ok" }
            try await bluez.call("StartDiscovery") { $0.outcome == "ok" }
            _ = try await errors.first(within: 10, "BluetoothPowerError cleared") { !$0.bluetoothPower }
            errors.clear()

            await bluez.kill()
            _ = try await errors.first(within: 10, "BluetoothPowerError") { $0.bluetoothPower }
            // A new bluetoothd knows nothing of the old one's registrations.
            try await bluez.start()
            try await bluez.call("RegisterAdvertisement") { $0.outcome == "ok" }
            try await bluez.call("StartDiscovery") { $0.outcome == "ok" }
            _ = try await errors.first(within: 10, "BluetoothPowerError cleared again") { !$0.bluetoothPower }
            withExtendedLifetime((publication, subscription)) {}
        }
    }

    @Test func usesTheFirstPoweredAdapterOrTheConfiguredOneAndFollowsAdaptersComingAndGoing() async throws {
        let bluez = try await BlueZStandIn(adapters: ["hci0:off", "hci1"])
        try await withBlueZ(bluez) { cluster, bluez in
            let key = try await cluster.createProject("adapters")
            let first = try await cluster.addDevice("A", ble: bluez.configuration())
            let publication = try await MessageManager(first, apiKey: key).publish("first powered")
            try await bluez.call("RegisterAdvertisement") { $0.path == "/org/bluez/hci1" && $0.outcome == "ok" }

            // A daemon told to use hci2 waits for it.
            let errors = Inbox<MessageManager.ErrorState>()
            let second = try await cluster.addDevice("B", ble: bluez.configuration("adapter = \"hci2\""))
            let manager = try await MessageManager(second, apiKey: key) { errors.put($0) }
            let waiting = try await manager.publish("configured")
            #expect(try await manager.errorState.bluetoothPower)
            try await bluez.addAdapter("hci2")
            try await bluez.call("RegisterAdvertisement") { $0.path == "/org/bluez/hci2" && $0.outcome == "ok" }
            _ = try await errors.first(within: 10, "BluetoothPowerError cleared") { !$0.bluetoothPower }
            errors.clear()

            // The adapter goes: the error comes back; bluetoothd's Release is taken in stride.
            try await bluez.removeAdapter("hci2")
            _ = try await errors.first(within: 10, "BluetoothPowerError") { $0.bluetoothPower }
            #expect(cluster.device("B")?.daemon.isRunning == true)
            withExtendedLifetime((publication, waiting)) {}
        }
    }

    @Test func bluetoothPermissionErrorWhileBlueZRefusesAndRecoveryAfter() async throws {
        try await withBlueZ { cluster, bluez in
            let key = try await cluster.createProject("refusal")
            let device = try await cluster.addDevice("A", ble: bluez.configuration())
            try await bluez.refuse(with: "org.freedesktop.DBus.Error.AccessDenied")
            let errors = Inbox<MessageManager.ErrorState>()
            let manager = try await MessageManager(device, apiKey: key) { errors.put($0) }
            let publication = try await manager.publish("refused")
            _ = try await errors.first(within: 10, "BluetoothPermissionError") { $0.bluetoothPermission && !$0.bluetoothPower }
            errors.clear()

            try await bluez.refuse(with: nil)
            try await bluez.call("RegisterAdvertisement", within: 40) { $0.outcome == "ok" }
            _ = try await errors.first(within: 10, "BluetoothPermissionError cleared") { !$0.bluetoothPermission }
            withExtendedLifetime(publication) {}
        }
    }

    @Test func bluetoothPermissionErrorWhileTheBusPolicyKeepsNearbydFromBlueZ() async throws {
        // Like Debian's bluetooth.conf: bluetoothd may call back into its clients,
        // but only those the policy names may call bluetoothd. At first, nobody.
        let directory = try TemporaryDirectory("bluez-policy")
        let policy = directory.file("bluetooth.conf")
        let rules = { (admitted: String) in
            """
            <busconfig>
              <policy user="root">
                <allow own="org.bluez"/>
                <allow send_destination="org.bluez" send_interface="org.nearbyd.test.BlueZ1"/>
                <allow send_interface="org.bluez.LEAdvertisement1"/>
                <allow send_interface="org.bluez.AdvertisementMonitor1"/>
                <allow send_interface="org.freedesktop.DBus.Properties"/>
                <allow send_interface="org.freedesktop.DBus.ObjectManager"/>
                \(admitted)
              </policy>
            </busconfig>
            """
        }
        try rules("").write(toFile: policy, atomically: true, encoding: .utf8)
        let bluez = try await BlueZStandIn(policy: .system(including: [policy]))
        try await withBlueZ(bluez) { cluster, bluez in
            let key = try await cluster.createProject("policy")
            let device = try await cluster.addDevice("A", ble: bluez.configuration())
            let errors = Inbox<MessageManager.ErrorState>()
            let manager = try await MessageManager(device, apiKey: key) { errors.put($0) }
            let publication = try await manager.publish("denied")
            _ = try await errors.first(within: 10, "BluetoothPermissionError") { $0.bluetoothPermission }
            #expect(try await DaemonStatus.read(from: .address(device.busAddress)).availableMediums == [])
            errors.clear()

            try rules(#"<allow send_destination="org.bluez"/>"#).write(toFile: policy, atomically: true, encoding: .utf8)
            bluez.bus.reloadConfiguration()
            try await bluez.call("RegisterAdvertisement", within: 40) { $0.outcome == "ok" }
            _ = try await errors.first(within: 10, "BluetoothPermissionError cleared") { !$0.bluetoothPermission }
            withExtendedLifetime(publication) {}
        }
        directory.remove()
    }

    @Test func registersAgainWhenBluetoothdReleasesTheAdvertisement() async throws {
        try await withBlueZ { cluster, bluez in
            let key = try await cluster.createProject("release")
            let device = try await cluster.addDevice("A", ble: bluez.configuration())
            let publication = try await MessageManager(device, apiKey: key).publish("again")
            let first = try await bluez.call("RegisterAdvertisement") { $0.outcome == "ok" }
            try await bluez.releaseAdvertisements()
            let second = try await bluez.call("RegisterAdvertisement") { $0.n == 2 }
            #expect(second.args == first.args)
            withExtendedLifetime(publication) {}
        }
    }

    @Test func aManagerInTheBackgroundListensThroughAnAdvertisementMonitor() async throws {
        let bluez = try await BlueZStandIn(adapters: ["hci0", "hci1:nomonitor"])
        try await withBlueZ(bluez) { cluster, bluez in
            let key = try await cluster.createProject("background")
            let device = try await cluster.addDevice("A", ble: bluez.configuration())
            let manager = try await MessageManager(device, apiKey: key)
            let subscription = try await manager.record(strategy: Strategy(allowInBackground: true))
            try await bluez.call("StartDiscovery") { $0.outcome == "ok" }

            try await manager.setBackground(true)
            let registered = try await bluez.call("RegisterMonitor") { $0.outcome == "ok" }
            #expect(registered.path == "/org/bluez/hci0" && registered.args == #"["/org/nearbyd/ble/monitor"]"#)
            // AD type 0x21 (33) starting with the UUID, Eddystone's service data (0x16, AA FE) and
            // iBeacon's manufacturer data (0xFF, 4C 00 02 15); any strength; lost after the lost timeout (1 s here).
            #expect(registered.monitors == """
                {"/org/nearbyd/ble/monitor/token_frame": {"Patterns": [[0, 33, "\(BlueZStandIn.serviceUUIDLittleEndianHex)"], \
                [0, 22, "aafe"], [0, 255, "4c000215"]], \
                "RSSIHighThreshold": -127, "RSSIHighTimeout": 1, "RSSILowThreshold": -127, "RSSILowTimeout": 1, \
                "RSSISamplingPeriod": 0, "Type": "or_patterns"}}
                """)
            try await bluez.call("StopDiscovery") { $0.outcome == "ok" }

            try await manager.setBackground(false)
            try await bluez.call("UnregisterMonitor") { $0.outcome == "ok" }
            try await bluez.call("StartDiscovery") { $0.n == 2 }

            // An adapter without monitors keeps discovering in the background, and says so.
            let other = try await cluster.addDevice("B", ble: bluez.configuration("adapter = \"hci1\""))
            let backgrounded = try await MessageManager(other, apiKey: key)
            let quiet = try await backgrounded.record(strategy: Strategy(allowInBackground: true))
            try await bluez.call("StartDiscovery") { $0.path == "/org/bluez/hci1" && $0.outcome == "ok" }
            try await backgrounded.setBackground(true)
            try await other.daemon.waitForLine(containing: "hci1 has no advertisement monitor")
            withExtendedLifetime((subscription, quiet)) {}
        }
    }

    @Test func aDeviceHeardOnceIsHeldAcrossTheKernelsDuplicateFilter() async throws {
        let radioA = try await BlueZStandIn()
        try await withBlueZ { cluster, radioB in
            let key = try await cluster.createProject("hold")
            let a = try await cluster.addDevice("A", ble: radioA.configuration())
            let b = try await cluster.addDevice("B", ble: radioB.configuration())
            let publication = try await MessageManager(a, apiKey: key).publish("steady")
            let subscription = try await MessageManager(b, apiKey: key).record()
            try await radioB.call("StartDiscovery") { $0.outcome == "ok" }
            let advertisement = try #require(try await radioA.call("RegisterAdvertisement") { $0.outcome == "ok" }.advertisement)
            let token = try #require(Self.bytes(advertisement.serviceData[BlueZStandIn.serviceUUID]))

            // One report, as the kernel gives for a steady advertiser per scan.
            try await radioB.addDevice(on: "hci0", address: "C0:00:00:00:00:04", serviceData: [BlueZStandIn.serviceUUID: token])
            let reported = ContinuousClock.now
            try await subscription.wait(.found, "steady")
            try await subscription.wait(.lost, "steady", within: 30)
            // Held for ten seconds, then lost after the lost timeout (1 s).
            #expect(ContinuousClock.now - reported >= .seconds(10))
            withExtendedLifetime(publication) {}
        }
        await radioA.stop()
    }

    // MARK: Helpers

    /// A cluster with one BlueZ stand-in (`bluez`, or a new one with hci0);
    /// on failure the stand-in's log is printed with the programs'.
    func withBlueZ(_ bluez: BlueZStandIn? = nil, _ body: (Cluster, BlueZStandIn) async throws -> Void) async throws {
        let standIn = if let bluez { bluez } else { try await BlueZStandIn() }
        do {
            try await withCluster { cluster in try await body(cluster, standIn) }
        } catch {
            print("--- bluez stand-in ---\n" + standIn.output)
            await standIn.stop()
            throw error
        }
        await standIn.stop()
    }

    static func bytes(_ hex: String?) -> [UInt8]? {
        guard let hex, hex.count % 2 == 0 else { return nil }
        return stride(from: 0, to: hex.count, by: 2).compactMap {
            UInt8(hex[hex.index(hex.startIndex, offsetBy: $0)..<hex.index(hex.startIndex, offsetBy: $0 + 2)], radix: 16)
        }
    }
}
