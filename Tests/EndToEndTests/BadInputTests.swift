import DBus
import Foundation
import Testing
import TestSupport

/// A client speaking raw D-Bus to nearbyd.
@BusActor
struct RawClient {
    let connection: BusConnection

    init(_ address: String) throws {
        connection = try BusConnection(.address(address))
    }

    func call(_ path: ObjectPath, _ interface: String, _ member: String,
              _ arguments: @escaping @BusActor (MessageWriter) throws(DBusError) -> Void = { _ in }) async throws(DBusError) -> ObjectPath? {
        try await connection.call(destination: "org.nearbyd", path: path, interface: interface, member: member,
                                  arguments: arguments) { reader throws(DBusError) in
            reader.isAtEnd ? nil : try? reader.read(ObjectPath.self)
        }
    }

    func createManager(_ key: String, _ params: [String: DBusValue] = [:]) async throws(DBusError) -> ObjectPath {
        let path = try await call("/org/nearbyd", "org.nearbyd.Nearby1", "CreateManager") { writer throws(DBusError) in
            try writer.append(key)
            try writer.append(params.mapValues(Variant.init))
        }
        return path ?? "/"
    }

    func publish(_ manager: ObjectPath, _ content: [UInt8], _ type: String, _ params: [String: DBusValue] = [:]) async throws(DBusError) -> ObjectPath {
        let path = try await call(manager, "org.nearbyd.Manager1", "Publish") { writer throws(DBusError) in
            try writer.append(content)
            try writer.append(type)
            try writer.append(params.mapValues(Variant.init))
        }
        return path ?? "/"
    }

    func subscribe(_ manager: ObjectPath, _ params: [String: DBusValue]) async throws(DBusError) -> ObjectPath {
        let path = try await call(manager, "org.nearbyd.Manager1", "Subscribe") { writer throws(DBusError) in
            try writer.append(params.mapValues(Variant.init))
        }
        return path ?? "/"
    }

    func get(_ path: ObjectPath, _ interface: String, _ property: String) async throws(DBusError) -> DBusValue {
        try await connection.call(destination: "org.nearbyd", path: path, interface: "org.freedesktop.DBus.Properties",
                                  member: "Get", arguments: { writer throws(DBusError) in
                                      try writer.append(interface)
                                      try writer.append(property)
                                  }) { reader throws(DBusError) in try reader.read(Variant.self).value }
    }
}

/// The error name a call failed with, or "success".
@BusActor
func outcome(_ body: () async throws(DBusError) -> Void) async -> String {
    let failed = await failure(body)
    return failed.isEmpty ? "success" : String(failed.prefix { $0 != ":" })
}

/// The error a call failed with, name and message, or "" when it succeeded.
@BusActor
func failure(_ body: () async throws(DBusError) -> Void) async -> String {
    do {
        try await body()
        return ""
    } catch {
        return "\(error.name): \(error.message)"
    }
}

@Suite(.serialized) struct BadInputTests {
    static let invalid = "org.nearbyd.Error.InvalidArguments"
    static let notSupported = "org.nearbyd.Error.NotSupported"
    static let dbusInvalid = "org.freedesktop.DBus.Error.InvalidArgs"

    /// Each malformed Publish and Subscribe, with the error it must get.
    static let publishCases: [(String, [UInt8], String, [String: DBusValue], String)] = [
        ("empty content", [], "chat", [:], invalid),
        ("content over 100 KiB", [UInt8](repeating: 1, count: 102_401), "chat", [:], invalid),
        ("type of 33 characters", [1], String(repeating: "t", count: 33), [:], invalid),
        ("type with '*'", [1], "ch*t", [:], invalid),
        ("type with a control character", [1], "a\u{7}b", [:], invalid),
        ("namespace with a space", [1], "chat", ["Namespace": .string("my space")], invalid),
        ("reserved namespace", [1], "chat", ["Namespace": .string("__reserved_namespace")], invalid),
        ("unknown option", [1], "chat", ["Colour": .string("red")], invalid),
        ("Namespace of the wrong type", [1], "chat", ["Namespace": .uint32(1)], invalid),
        ("Strategy that is not a dictionary", [1], "chat", ["Strategy": .string("fast")], invalid),
        ("unknown Strategy key", [1], "chat", ["Strategy": .vardict(["Speed": .uint32(1)])], invalid),
        ("TTL of the wrong type", [1], "chat", ["Strategy": .vardict(["TTL": .int32(5)])], invalid),
        ("TTL 0 on a publication", [1], "chat", ["Strategy": .vardict(["TTL": .uint32(0)])], invalid),
        ("TTL above a day", [1], "chat", ["Strategy": .vardict(["TTL": .uint32(86_401)])], invalid),
        ("unknown medium", [1], "chat", ["Strategy": .vardict(["Mediums": .strings(["nfc"])])], invalid),
        ("medium twice", [1], "chat", ["Strategy": .vardict(["Mediums": .strings(["ble", "ble"])])], invalid),
        ("no medium", [1], "chat", ["Strategy": .vardict(["Mediums": .strings([])])], invalid),
        ("unknown mode", [1], "chat", ["Strategy": .vardict(["Mode": .string("shout")])], invalid),
        ("earshot without audio", [1], "chat", ["Strategy": .vardict(["Mediums": .strings(["ble"]), "Distance": .string("earshot")])], invalid),
        ("background on audio alone", [1], "chat", ["Strategy": .vardict(["Mediums": .strings(["audio"]), "AllowInBackground": .bool(true)])], invalid),
        ("audio, disabled in this daemon", [1], "chat", ["Strategy": .vardict(["Mediums": .strings(["audio"])])], notSupported),
        ("earshot, with audio disabled", [1], "chat", ["Strategy": .vardict(["Distance": .string("earshot")])], notSupported),
    ]

    static let subscribeCases: [(String, [String: DBusValue], String)] = [
        ("type of 33 characters", ["Type": .string(String(repeating: "t", count: 33))], invalid),
        ("type with '*'", ["Type": .string("*")], invalid),
        ("no device type", ["DeviceTypes": .strings([])], invalid),
        ("unknown device type", ["DeviceTypes": .strings(["toaster"])], invalid),
        ("BeaconStrategy without beacons", ["BeaconStrategy": .vardict(["IncludeIBeacons": .bool(false)])], invalid),
        ("unknown BeaconStrategy key", ["DeviceTypes": .strings(["ble-beacon"]), "BeaconStrategy": .vardict(["Loud": .bool(true)])], invalid),
        ("RawBeacons of the wrong type", ["DeviceTypes": .strings(["ble-beacon"]), "BeaconStrategy": .vardict(["RawBeacons": .string("yes")])], invalid),
        ("a device type twice", ["DeviceTypes": .strings(["ble-beacon", "ble-beacon"])], invalid),
        ("TTL above a day", ["Strategy": .vardict(["TTL": .uint32(90_000)])], invalid),
        ("contradictory strategy", ["Strategy": .vardict(["Mediums": .strings(["ble"]), "Distance": .string("earshot")])], invalid),
        ("unknown option", ["Colour": .string("red")], invalid),
    ]

    @Test @BusActor func malformedCallsGetNamedErrorsAndTheDaemonKeepsServing() async throws {
        try await withCluster(Cluster.Options(extraConfiguration: "[limits]\nmax-managers-per-client = 2\nmax-objects-per-manager = 3\n")) { cluster in
            let device = try await cluster.addDevice("A", at: (0, 0))
            let client = try RawClient(device.busAddress)
            let manager = try await client.createManager("key")

            for (name, content, type, params, expected) in Self.publishCases {
                let got = await outcome { () async throws(DBusError) in _ = try await client.publish(manager, content, type, params) }
                #expect(got == expected, "Publish with \(name)")
            }
            for (name, params, expected) in Self.subscribeCases {
                let got = await outcome { () async throws(DBusError) in _ = try await client.subscribe(manager, params) }
                #expect(got == expected, "Subscribe with \(name)")
            }
            let createCases: [(String, String, [String: DBusValue], String)] = [
                ("empty API key", "", [:], Self.invalid),
                ("API key with a space", "a key", [:], Self.invalid),
                ("unknown option", "key", ["Colour": .string("red")], Self.invalid),
                ("AppId of the wrong type", "key", ["AppId": .uint32(7)], Self.invalid),
                ("empty AppId", "key", ["AppId": .string("")], Self.invalid),
                ("DebugLogging of the wrong type", "key", ["DebugLogging": .string("yes")], Self.invalid),
            ]
            for (name, key, params, expected) in createCases {
                let got = await outcome { () async throws(DBusError) in _ = try await client.createManager(key, params) }
                #expect(got == expected, "CreateManager with \(name)")
            }

            // Wrong signatures are refused by the bus layer before any handler runs.
            let wrongSignature = await outcome { () async throws(DBusError) in
                _ = try await client.call(manager, "org.nearbyd.Manager1", "Publish") { writer throws(DBusError) in
                    try writer.append("not bytes"); try writer.append("chat"); try writer.append([String: Variant]())
                }
            }
            #expect(wrongSignature == Self.dbusInvalid)
            let missingArguments = await outcome { () async throws(DBusError) in
                _ = try await client.call("/org/nearbyd", "org.nearbyd.Nearby1", "CreateManager")
            }
            #expect(missingArguments == Self.dbusInvalid)

            // SendMessage's data: 4096 bytes of keys and values together, as dbus-api.md says.
            for size in [4095, 4096] {
                let message = await failure { () async throws(DBusError) in
                    _ = try await client.call(manager, "org.nearbyd.Upstream1", "SendMessage") { writer throws(DBusError) in
                        try writer.append(["k": String(repeating: "v", count: size)])
                        try writer.append("shop@nearby.test")
                        try writer.append("data-\(size)")
                        try writer.append(Int64(60))
                    }
                }
                if size == 4095 {
                    #expect(!message.contains("larger") && !message.contains("longer"), "4096 bytes: \(message)")
                } else {
                    #expect(message == "\(Self.invalid): data is larger than 4096 bytes (its keys and values together)")
                }
            }

            // Limits: two managers per client, three objects per manager.
            _ = try await client.createManager("key")
            let third = await outcome { () async throws(DBusError) in _ = try await client.createManager("key") }
            #expect(third == "org.nearbyd.Error.LimitExceeded")
            for index in 0..<3 { _ = try await client.publish(manager, [UInt8(index)], "chat") }
            let fourth = await outcome { () async throws(DBusError) in _ = try await client.publish(manager, [9], "chat") }
            #expect(fourth == "org.nearbyd.Error.LimitExceeded")

            // After all that, the daemon still serves a well-formed request.
            let fresh = try RawClient(device.busAddress)
            let other = try await fresh.createManager("key")
            #expect(try await fresh.get(other, "org.nearbyd.Manager1", "PermissionGranted") == .bool(true))
            #expect(device.daemon.isRunning)
        }
    }

    @Test @BusActor func theNumberOfClientsIsLimited() async throws {
        try await withCluster(Cluster.Options(extraConfiguration: "[limits]\nmax-clients = 1\n")) { cluster in
            let device = try await cluster.addDevice("A", at: (0, 0))
            let first = try RawClient(device.busAddress)
            let second = try RawClient(device.busAddress)
            _ = try await first.createManager("key")
            let refused = await outcome { () async throws(DBusError) in _ = try await second.createManager("key") }
            #expect(refused == "org.nearbyd.Error.LimitExceeded")
            // A second manager of the same client is no new client.
            _ = try await first.createManager("key")
            // Once the first client leaves, there is room again.
            let departures = Inbox<String>()
            let watch = try await second.connection.addMatch(
                "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='\(first.connection.uniqueName)'"
            ) { _ in departures.put("gone") }
            first.connection.close()
            _ = try await departures.first(within: 10, "the first client to leave") { _ in true }
            _ = try await second.createManager("key")
            watch.cancel()
        }
    }

    @Test @BusActor func objectsAnswerOnlyTheClientThatMadeThem() async throws {
        try await withCluster { cluster in
            let device = try await cluster.addDevice("A", at: (0, 0))
            let owner = try RawClient(device.busAddress)
            let stranger = try RawClient(device.busAddress)
            let manager = try await owner.createManager("key")
            let publication = try await owner.publish(manager, [1, 2, 3], "chat")
            let subscription = try await owner.subscribe(manager, [:])
            let denied = "org.nearbyd.Error.AccessDenied"

            #expect(await outcome { () async throws(DBusError) in _ = try await stranger.publish(manager, [1], "chat") } == denied)
            #expect(await outcome { () async throws(DBusError) in _ = try await stranger.subscribe(manager, [:]) } == denied)
            #expect(await outcome { () async throws(DBusError) in _ = try await stranger.call(manager, "org.nearbyd.Manager1", "Release") } == denied)
            #expect(await outcome { () async throws(DBusError) in _ = try await stranger.call(publication, "org.nearbyd.Publication1", "Unpublish") } == denied)
            #expect(await outcome { () async throws(DBusError) in _ = try await stranger.call(subscription, "org.nearbyd.Subscription1", "Unsubscribe") } == denied)
            #expect(await outcome { () async throws(DBusError) in _ = try await stranger.get(publication, "org.nearbyd.Publication1", "Status") } == denied)
            #expect(await outcome { () async throws(DBusError) in _ = try await stranger.get(manager, "org.nearbyd.Manager1", "PermissionGranted") } == denied)
            // The owner is still served, and its objects are intact.
            #expect(try await owner.get(publication, "org.nearbyd.Publication1", "Type") == .string("chat"))
            // Introspection answers anyone (dbus-api.md): busctl's own connection sees the
            // interfaces, but plain `busctl introspect` reads the properties too, and is refused.
            let xml = try await runProgram("/usr/bin/busctl", ["--address=\(device.busAddress)", "introspect", "--xml-interface",
                                                               "org.nearbyd", publication.rawValue])
            #expect(xml.status == 0 && xml.output.contains("org.nearbyd.Publication1"), "\(xml.output)")
            let plain = try await runProgram("/usr/bin/busctl", ["--address=\(device.busAddress)", "introspect", "org.nearbyd",
                                                                 publication.rawValue])
            #expect(plain.status != 0 && plain.output.contains("this object belongs to another client"), "\(plain.output)")

            // After Release nothing of the manager answers anyone.
            _ = try await owner.call(manager, "org.nearbyd.Manager1", "Release")
            let gone = "org.freedesktop.DBus.Error.UnknownObject"
            #expect(await outcome { () async throws(DBusError) in _ = try await owner.publish(manager, [1], "chat") } == gone)
            #expect(await outcome { () async throws(DBusError) in _ = try await owner.call(publication, "org.nearbyd.Publication1", "Unpublish") } == gone)
            #expect(await outcome { () async throws(DBusError) in _ = try await owner.get(subscription, "org.nearbyd.Subscription1", "Status") } == gone)
        }
    }

    @Test @BusActor func aClientsObjectsGoTheMomentItLeavesTheBus() async throws {
        try await withCluster { cluster in
            let device = try await cluster.addDevice("A", at: (0, 0))
            let leaving = try RawClient(device.busAddress)
            let manager = try await leaving.createManager("key")
            let publication = try await leaving.publish(manager, [1], "chat")
            let observer = try RawClient(device.busAddress)
            let departures = Inbox<String>()
            let watch = try await observer.connection.addMatch(
                "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='\(leaving.connection.uniqueName)'"
            ) { _ in departures.put("gone") }
            leaving.connection.close()
            _ = try await departures.first(within: 10, "the bus to announce the departure") { _ in true }
            // The bus told nearbyd before it forwards this call: the objects are already gone.
            let got = await outcome { () async throws(DBusError) in
                _ = try await observer.get(publication, "org.nearbyd.Publication1", "Type")
            }
            #expect(got == "org.freedesktop.DBus.Error.UnknownObject")
            watch.cancel()
        }
    }

    /// A hostile program's 30 MiB arguments, from dbus-next (python/big_call.py): each is
    /// refused with a named error as soon as it is found too large, without a decoded copy
    /// of it, and what the daemon took to read them is given back.
    @Test func oversizedArgumentsAreRefusedAndCostNoLastingMemory() async throws {
        // The whole bus thread for oversized calls: each of these is refused for what it
        // holds, never for the budget (the next test's).
        try await withCluster(Cluster.Options(extraConfiguration: "[limits]\noversized-call-share = 1\n")) { cluster in
            let device = try await cluster.addDevice("A", at: (0, 0))
            let before = try Self.residentMiB(device.daemon.pid)
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("python/big_call.py").path
            let result = try await runProgram("/usr/bin/python3", [script, device.busAddress, "\(30 << 20)"])
            var outcomes: [String: (name: String, message: String)] = [:]
            for line in result.output.split(separator: "\n") {
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String],
                      let call = object["call"] else { continue }
                outcomes[call] = (object["outcome"] ?? "", object["message"] ?? "")
            }
            #expect(outcomes["done"] != nil, "\(result.output)")
            let expected = [
                "create-junk": "unknown key 'Junk'", "create-strings": "unknown key 'Junk'",
                "publish": "content is 31457280 bytes", "subscribe-deep": "Subscribe params", "send-data": "data",
            ]
            for (call, text) in expected {
                #expect(outcomes[call]?.name == Self.invalid, "\(call): \(String(describing: outcomes[call]))")
                #expect(outcomes[call]?.message.contains(text) == true, "\(call): \(String(describing: outcomes[call]))")
            }
            // Given back once the burst is over (nearbyd looks every five seconds and says when it
            // gives some back). Counted before reading, so a return in between is not missed.
            let given = "freed memory given back"
            let returns = device.daemon.lineCount(containing: given)
            var after = try Self.residentMiB(device.daemon.pid)
            if after - before >= 24 {
                try await device.daemon.waitForLine(containing: given, occurrence: returns + 1, within: 20)
                after = try Self.residentMiB(device.daemon.pid)
            }
            #expect(after - before < 24, "resident \(before) MiB before, \(after) MiB after")
        }
    }

    /// A program that sends 30 MiB calls one after another (python/oversized_flood.py,
    /// dbus-next) is held to `[limits] oversized-call-share`: once the budget is spent its
    /// calls are refused with LimitExceeded, each answer held back until the budget
    /// would have covered it, while an app's calls beside it are answered as usual.
    @Test func oversizedCallsBeyondTheirShareAreRefusedAndAnsweredLate() async throws {
        // 5 ms of reading a second: a refused call owes at least the 1 ms an oversized
        // message costs, so its answer waits at least 0.2 s.
        try await withCluster(Cluster.Options(extraConfiguration: "[limits]\noversized-call-share = 0.005\n")) { cluster in
            let device = try await cluster.addDevice("A", at: (0, 0))
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("python/oversized_flood.py").path
            let result = try await runProgram("/usr/bin/python3", [script, device.busAddress, "\(30 << 20)", "6"])
            var flood: [(outcome: String, message: String, seconds: Double)] = []
            var app: [String] = []
            for line in result.output.split(separator: "\n") {
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                      let who = object["who"] as? String else { continue }
                let outcome = object["outcome"] as? String ?? ""
                if who == "flood" {
                    flood.append((outcome, object["message"] as? String ?? "", object["seconds"] as? Double ?? 0))
                } else if who == "app" {
                    app.append(outcome)
                }
            }
            #expect(result.output.contains("\"who\": \"done\""), "\(result.output)")
            #expect(flood.count == 6, "\(result.output)")
            // The first finds the budget unspent: refused for what it holds.
            #expect(flood.first?.outcome == Self.invalid, "\(result.output)")
            let refused = flood.filter { $0.outcome == "org.nearbyd.Error.LimitExceeded" }
            #expect(!refused.isEmpty, "no call was refused for the budget: \(result.output)")
            for call in refused {
                #expect(call.message.contains("[limits] oversized-call-share"), "\(call.message)")
                #expect(call.seconds >= 0.2, "answered after \(call.seconds) s")
            }
            #expect(flood.allSatisfy { $0.outcome == Self.invalid || $0.outcome == "org.nearbyd.Error.LimitExceeded" },
                    "\(result.output)")
            #expect(!app.isEmpty && app.allSatisfy { $0 == "ok" }, "the app's calls: \(app)")
        }
    }

    /// A process's resident memory (VmRSS), MiB.
    static func residentMiB(_ pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
        return (Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0) / 1024
    }
}
