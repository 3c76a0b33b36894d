import Foundation
import NearbyMessages
import Testing
import TestSupport

/// Another user (nobody) sends forged signals to nearbyd's clients and to
/// nearbyd itself, as any program on a shared bus can: the bus delivers a
/// signal addressed to one connection whatever its match rules say. Each
/// client believes only the connection that owns the service's name now.
///
/// Each test forges first (the forger returns once the bus has queued its
/// signals for their recipients), then makes the real service do something
/// the client sees: a client handles its messages in order, so by the time
/// the real event shows, the forged ones have been handled (and ignored).
@Suite(.serialized, .timeLimit(.minutes(5)), .enabled(if: getuid() == 0, "forges signals as nobody, which needs root"))
struct ForgedSignalTests {
    /// Device buses as the system bus is for every user but root: nearbyd's own policy, nobody may connect.
    static var options: Cluster.Options {
        let policy = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../dbus-policy/org.nearbyd.conf").standardizedFileURL.path
        return Cluster.Options(busPolicy: .sharedWithOtherUsers(including: [policy]))
    }

    /// The report's attack: "found p1/spoofme … 'FAKE: wire 500 EUR to attacker'".
    @Test func subscribersBelieveOnlyNearbyd() async throws {
        try await withCluster(Self.options) { cluster in
            let key = try await cluster.createProject("genuine")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (2, 0))
            let backgrounds = Inbox<Bool>()
            let permissions = Inbox<Bool>()
            let manager = try await MessageManager(apiKey: key, bus: .address(b.busAddress),
                                                   permissionChanged: { permissions.put($0) },
                                                   backgroundChanged: { backgrounds.put($0) })
            let library = try await manager.record()
            let nearbyctl = try await ChildProcess(name: "nearbyctl subscribe", executable: Programs.path("nearbyctl"),
                                                   arguments: ["subscribe", "--bus", b.busAddress, "--api-key", key, "--json"])
            let subscribed = try await nearbyctl.waitForLine(containing: #""event":"subscribed""#)
            let nearbyctlPath = try #require(
                (try JSONSerialization.jsonObject(with: Data(subscribed.utf8)) as? [String: Any])?["path"] as? String)

            var forged: [SignalForger.Signal] = []
            for path in [library.subscription.path.rawValue, nearbyctlPath] {
                forged.append(Self.messageFound(at: path))
                // The manager's path is the subscription's parent.
                let managerPath = String(path[..<path.lastIndex(of: "/")!])
                forged.append(.propertiesChanged(at: managerPath, "org.nearbyd.Manager1",
                                                 ["Background": ["b", true], "PermissionGranted": ["b", false]]))
            }
            // The forger claims nearbyd's name went to it, then says the same again.
            forged.append(.nameOwnerChanged("org.nearbyd", from: "", to: "{forger}"))
            forged += forged.filter { $0.member == "MessageFound" }
            try await SignalForger.forge(forged, on: b.busAddress)

            let publication = try await MessageManager(a, apiKey: key).publish("genuine")
            try await library.wait(.found, "genuine")
            let found = try await nearbyctl.waitForLine(containing: #""text":"genuine""#)
            #expect(library.kinds == ["found genuine/chat 'genuine'"])
            // nearbyd's own PermissionGranted (true, as the policy granted the app) is heard; the forger's false is not.
            #expect(backgrounds.values.isEmpty && !permissions.values.contains(false), "\(backgrounds.values) \(permissions.values)")
            #expect(try await manager.background == false)
            #expect(nearbyctl.lines.values == [subscribed, found], "\(nearbyctl.output)")
            await nearbyctl.stop()
            withExtendedLifetime(publication) {}
        }
    }

    /// nearbyd's BlueZ client: a device announced by someone other than
    /// bluetoothd is not heard (a radio-less relay of a token heard elsewhere),
    /// and bluetoothd's departure announced by someone other than the bus
    /// leaves BLE on.
    @Test func nearbydBelievesOnlyBluetoothd() async throws {
        let radioA = try await BlueZStandIn()
        let radioC = try await BlueZStandIn()
        let radioB = try await BlueZStandIn(policy: .sharedWithOtherUsers(including: []))
        let radios = [radioA, radioB, radioC]
        do {
            try await withCluster { cluster in
                let key = try await cluster.createProject("relay")
                let a = try await cluster.addDevice("A", ble: radioA.configuration())
                let c = try await cluster.addDevice("C", ble: radioC.configuration())
                let b = try await cluster.addDevice("B", ble: radioB.configuration())
                let near = try await MessageManager(a, apiKey: key).publish("near")
                let far = try await MessageManager(c, apiKey: key).publish("far away")
                let errors = Inbox<MessageManager.ErrorState>()
                let subscription = try await MessageManager(b, apiKey: key) { errors.put($0) }.record()
                try await radioB.call("StartDiscovery") { $0.outcome == "ok" }
                let tokenA = try await Self.token(advertisedOn: radioA)
                let tokenC = try await Self.token(advertisedOn: radioC)
                #expect(try await DaemonStatus.read(from: .address(b.busAddress)).availableMediums == ["ble"])
                errors.clear()

                // C's token, heard far away, announced to B as if B's radio had heard it:
                // a new device, and a device B's radio has really heard (no nearbyd) given C's token.
                let uuid = BlueZStandIn.serviceUUID
                let quiet = try await radioB.addDevice(on: "hci0", address: "C0:00:00:00:00:21",
                                                       serviceData: ["0000feaa-0000-1000-8000-00805f9b34fb": [1, 2, 3]])
                let serviceData: [String: [any Sendable]] = [uuid: ["ay", tokenC.map(Int.init)]]
                let relayed: [String: [any Sendable]] = [
                    "Adapter": ["o", "/org/bluez/hci0"], "Address": ["s", "C0:00:00:00:00:66"], "RSSI": ["n", -40],
                    "ServiceData": ["a{sv}", serviceData],
                ]
                let interfaces: [String: [String: [any Sendable]]] = ["org.bluez.Device1": relayed]
                try await SignalForger.forge([
                    SignalForger.Signal(path: "/", interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesAdded",
                                        signature: "oa{sa{sv}}",
                                        body: ["/org/bluez/hci0/dev_C0_00_00_00_00_66", interfaces]),
                    .propertiesChanged(at: quiet, "org.bluez.Device1",
                                       ["ServiceData": ["a{sv}", serviceData], "RSSI": ["n", -40]]),
                ], on: radioB.bus.address)
                try await radioB.addDevice(on: "hci0", address: "C0:00:00:00:00:03", serviceData: [uuid: tokenA], rssi: -65)
                try await subscription.wait(.found, "near")
                #expect(subscription.kinds == ["found relay/chat 'near'"])

                // bluetoothd's departure, forged: B still listens, and hears C when C really comes.
                try await SignalForger.forge([.nameOwnerChanged("org.bluez", from: "{forger}", to: "")], on: radioB.bus.address)
                try await radioB.addDevice(on: "hci0", address: "C0:00:00:00:00:04", serviceData: [uuid: tokenC], rssi: -70)
                let found = try await subscription.wait(.found, "far away")
                #expect(found.info?.rssi == -70)
                #expect(!errors.values.contains { $0.bluetoothPower }, "\(errors.values)")
                #expect(try await DaemonStatus.read(from: .address(b.busAddress)).availableMediums == ["ble"])
                withExtendedLifetime((near, far)) {}
            }
        } catch {
            for radio in radios { print("--- bluez stand-in ---\n" + radio.output) }
            for radio in radios { await radio.stop() }
            throw error
        }
        for radio in radios { await radio.stop() }
    }

    /// nearbyd's logind client: a session locked, switched away or left by
    /// logind only when logind says so.
    @Test func nearbydBelievesOnlyLogind() async throws {
        let logindBus = try await PrivateBus(policy: .sharedWithOtherUsers(including: []))
        let logind = try await LogindMock(bus: logindBus)
        let session = try await logind.addSession("c7", uid: getuid(), active: true)
        // The manager below lives in this process.
        try await logind.placeProcess(UInt32(getpid()), in: session)
        try await withCluster(Cluster.Options(logindBus: logindBus.address)) { cluster in
            let key = try await cluster.createProject("sessions")
            let a = try await cluster.addDevice("A")
            let backgrounds = Inbox<Bool>()
            let manager = try await MessageManager(apiKey: key, bus: .address(a.busAddress),
                                                   backgroundChanged: { backgrounds.put($0) })
            #expect(try await manager.background == false)

            try await SignalForger.forge([
                .propertiesChanged(at: session.rawValue, "org.freedesktop.login1.Session",
                                   ["Active": ["b", false], "LockedHint": ["b", true]]),
                SignalForger.Signal(path: session.rawValue, interface: "org.freedesktop.login1.Session", member: "Lock",
                                    signature: "", body: []),
                .nameOwnerChanged("org.freedesktop.login1", from: "{forger}", to: ""),
            ], on: logindBus.address)

            // What logind says is believed: locked, then unlocked.
            try await logind.setLocked(session, true)
            _ = try await backgrounds.first(within: 15, "background while locked") { $0 }
            try await logind.setLocked(session, false)
            _ = try await backgrounds.first(within: 15, "foreground once unlocked") { !$0 }
            #expect(backgrounds.values == [true, false])
            #expect(try await DaemonStatus.read(from: .address(a.busAddress)).loginSessions == "logind")
        }
        await logind.stop()
        await logindBus.stop()
    }

    /// The permission agent (`nearbyctl agent`): a forged claim that nearbyd's
    /// name changed hands neither makes it answer the forger nor stop
    /// answering nearbyd, nor register again; a real restart does.
    @Test func thePermissionAgentBelievesOnlyNearbyd() async throws {
        var options = Self.options
        options.permissionPolicy = "ask"
        try await withCluster(options) { cluster in
            let key = try await cluster.createProject("agent")
            let a = try await cluster.addDevice("A")
            let agent = try await ChildProcess(name: "nearbyctl agent", executable: Programs.path("nearbyctl"),
                                               arguments: ["agent", "--bus", a.busAddress, "--answer", "grant", "--json"])
            try await agent.waitForLine(containing: #""event":"registered""#)

            try await SignalForger.forge([
                .nameOwnerChanged("org.nearbyd", from: "", to: "{forger}"),
                .nameOwnerChanged("org.nearbyd", from: "{forger}", to: ""),
                .nameOwnerChanged("org.nearbyd", from: "", to: "{forger}"),
            ], on: a.busAddress)

            // nearbyd asks the agent about a new app, and is answered.
            let app = try await MessageManager(apiKey: key, appId: "org.example.Asked", bus: .address(a.busAddress))
            let publication = try await app.publish("asked")
            try await agent.waitForLine(containing: #""appId":"org.example.Asked""#)

            // A real restart: registered again, once.
            try await cluster.restartDaemon("A")
            try await agent.waitForLine(containing: #"{"event":"registered"}"#)
            let registered = agent.lines.values.filter { $0.contains(#""event":"registered""#) }
            #expect(registered.count == 2, "\(agent.output)")
            await agent.stop()
            withExtendedLifetime(publication) {}
        }
    }

    // MARK: Helpers

    /// A `MessageFound` of a message nobody published, at `path`.
    static func messageFound(at path: String) -> SignalForger.Signal {
        let info: [String: [any Sendable]] = ["Medium": ["s", "ble"], "Rssi": ["n", -40], "DistanceMeters": ["d", 0.5]]
        return SignalForger.Signal(path: path, interface: "org.nearbyd.Subscription1", member: "MessageFound",
                                   signature: "ayssa{sv}", body: ["FAKE: wire 500 EUR to attacker", "spoofme", "chat", info])
    }

    /// The token a daemon broadcasts through `radio`, as bytes.
    /// The objects nearbyd exports for bluetoothd (its advertisements, its
    /// advertisement monitor) answer bluetoothd alone: another program's
    /// `Release` (which would make nearbyd drop and register its advertisement
    /// again) is AccessDenied. The caller here is root, whom the bus lets call
    /// anything, so nearbyd's own check is what refuses it.
    @Test func nearbydAnswersCallsForBluetoothdOnlyFromBluetoothd() async throws {
        let radio = try await BlueZStandIn()
        do {
            try await withCluster { cluster in
                let key = try await cluster.createProject("callbacks")
                let a = try await cluster.addDevice("A", ble: radio.configuration())
                let publication = try await MessageManager(a, apiKey: key).publish("hello")
                let token = try await Self.token(advertisedOn: radio)
                // nearbyd's connection to bluetoothd's bus, found by its pid.
                let names = try await runProgram("/usr/bin/busctl", ["--address=\(radio.bus.address)", "list", "--unique", "--no-legend"])
                let own = try #require(names.output.split(separator: "\n").first {
                    $0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first == "\(a.daemon.pid)"
                }?.split(separator: " ").first.map(String.init), "\(names.output)")
                let path = "/org/nearbyd/ble/advertisement_" + token.map { String(format: "%02x", $0) }.joined()
                let release = try await runProgram("/usr/bin/gdbus", [
                    "call", "--address", radio.bus.address, "--dest", own, "--object-path", path,
                    "--method", "org.bluez.LEAdvertisement1.Release",
                ])
                #expect(release.status != 0 && release.output.contains("only bluetoothd"), "\(release.output)")
                let found = try await runProgram("/usr/bin/busctl", [
                    "--address=\(radio.bus.address)", "call", own, "/org/nearbyd/ble/monitor/token_frame",
                    "org.bluez.AdvertisementMonitor1", "DeviceFound", "o", "/org/bluez/hci0/dev_C0_00_00_00_00_99",
                ])
                #expect(found.status != 0, "\(found.output)")
                // bluetoothd's own Release is still heard.
                try await radio.releaseAdvertisements()
                _ = try await radio.call("RegisterAdvertisement") { $0.outcome == "ok" && ($0.n ?? 0) >= 2 }
                withExtendedLifetime(publication) {}
            }
        } catch {
            print(radio.output)
            await radio.stop()
            throw error
        }
        await radio.stop()
    }

    static func token(advertisedOn radio: BlueZStandIn) async throws -> [UInt8] {
        let advertisement = try #require(try await radio.call("RegisterAdvertisement") { $0.outcome == "ok" }.advertisement)
        return try #require(BlueZBackendTests.bytes(advertisement.serviceData[BlueZStandIn.serviceUUID]))
    }
}
