import DBus
import Foundation
import Testing
import TestSupport

/// A private bus with a service connection exporting ``EchoService`` at /test and a client connection.
@BusActor
final class EchoFixture {
    let bus: PrivateBus
    let service: BusConnection
    let client: BusConnection
    let echo = EchoService()

    init(access: (_ client: String) -> Access = { _ in .anyone }) async throws {
        bus = try await PrivateBus()
        service = try BusConnection(.address(bus.address))
        client = try BusConnection(.address(bus.address))
        try echo.export(on: service, at: "/test", access: access(client.uniqueName))
    }

    func call<T: Sendable>(_ member: String, on connection: BusConnection? = nil, interface: String = EchoService.interfaceName,
                           arguments: @BusActor (MessageWriter) throws(DBusError) -> Void = { _ in },
                           decode: @escaping @BusActor (MessageReader) throws(DBusError) -> T) async throws(DBusError) -> T {
        try await (connection ?? client).call(destination: service.uniqueName, path: "/test", interface: interface,
                                              member: member, arguments: arguments, decode: decode)
    }

    func echoed(_ value: DBusValue) async throws -> DBusValue {
        try await call("Echo", arguments: { writer throws(DBusError) in try writer.append(Variant(value)) }) { reader throws(DBusError) in
            try reader.read(Variant.self).value
        }
    }

    func finish() async {
        service.close()
        client.close()
        await bus.stop()
    }
}

@BusActor private func expectError(_ name: String, _ body: () async throws -> Void) async {
    do {
        try await body()
        Issue.record("expected \(name), got success")
    } catch let error as DBusError {
        #expect(error.name == name, "\(error)")
    } catch {
        Issue.record("expected \(name), got \(error)")
    }
}

@Suite(.serialized) struct BusTests {
    static let samples: [DBusValue] = [
        .byte(7), .bool(true), .bool(false), .int16(-3), .uint16(65535), .int32(.min), .uint32(.max),
        .int64(.min), .uint64(.max), .double(3.25), .string("héllo ✓"), .string(""),
        .objectPath("/org/nearbyd/client1"), .signature("a{sv}"),
        .array(element: "i", [.int32(1), .int32(-2)]), .array(element: "s", []), .bytes([0, 1, 255]), .bytes([]),
        .array(element: "ay", [.bytes([1]), .bytes([])]), .strings([]),
        .vardict(["Mediums": .strings(["ble"]), "TTL": .uint32(300), "Nested": .vardict(["x": .double(1)])]),
        .dictionary(key: "u", value: "as", [DictEntry(.uint32(1), .strings(["a", "b"]))]),
        .dictionary(key: "s", value: "v", []),
        .structure([.int32(1), .string("x"), .variant(.bool(false))]),
        .array(element: "(is)", [.structure([.int32(1), .string("one")]), .structure([.int32(2), .string("two")])]),
        .variant(.variant(.uint32(1))),
        .dictionary(key: "o", value: "a{sv}", [DictEntry(.objectPath("/a"), .vardict(["k": .int16(-1)]))]),
    ]

    @Test @BusActor func everyTypeSurvivesARoundTrip() async throws {
        let fixture = try await EchoFixture()
        for value in Self.samples {
            #expect(try await fixture.echoed(value) == value, "round trip of \(value.signature)")
        }
        await fixture.finish()
    }

    @Test @BusActor func fileDescriptorsArePassed() async throws {
        let fixture = try await EchoFixture()
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]) }
        let sent = UnixFileDescriptor(taking: fds[1])
        guard case .unixFD(let received) = try await fixture.echoed(.unixFD(sent)) else {
            Issue.record("no descriptor came back")
            await fixture.finish()
            return
        }
        var mine = stat(), theirs = stat()
        fstat(sent.rawValue, &mine)
        fstat(received.rawValue, &theirs)
        #expect(received.rawValue != sent.rawValue)
        #expect(mine.st_ino == theirs.st_ino)
        await fixture.finish()
    }

    /// A descriptor read as part of a value is closed once the value is dropped:
    /// a peer cannot make this process accumulate descriptors.
    @Test @BusActor func receivedDescriptorsAreClosedWithTheirValue() async throws {
        let fixture = try await EchoFixture()
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let sent = try UnixFileDescriptor(duplicating: fds[1])
        // Counted by inode, not in total: tests running alongside open descriptors of their own.
        let before = try descriptors(sharingInodeWith: fds[1])
        for _ in 0..<20 {
            _ = try await fixture.echoed(.vardict(["fd": .unixFD(sent)]))
        }
        #expect(try descriptors(sharingInodeWith: fds[1]) == before)
        #expect(before == 3, "both ends of the pipe and the duplicate")
        await fixture.finish()
    }

    @Test @BusActor func typedArgumentsAreDecoded() async throws {
        let fixture = try await EchoFixture()
        let summary = try await fixture.call("Describe", arguments: { writer throws(DBusError) in
            try writer.append([UInt8](repeating: 1, count: 102_400))
            try writer.append("chat")
            try writer.append(["TTL": Variant(.uint32(5)), "Mediums": Variant(.strings(["ble"]))])
        }) { reader throws(DBusError) in try reader.read(String.self) }
        #expect(summary == "102400 bytes of chat; Mediums,TTL")
        await fixture.finish()
    }

    @Test @BusActor func wrongSignaturesAreRefused() async throws {
        let fixture = try await EchoFixture()
        // sd-bus checks the call's signature against the vtable...
        await expectError("org.freedesktop.DBus.Error.InvalidArgs") {
            try await fixture.call("Echo", arguments: { writer throws(DBusError) in try writer.append("not a variant") }) { _ throws(DBusError) in () }
        }
        await expectError("org.freedesktop.DBus.Error.InvalidArgs") {
            try await fixture.call("Describe", arguments: { writer throws(DBusError) in try writer.append("s") }) { _ throws(DBusError) in () }
        }
        // ...and the reader checks each value against what the handler asks for.
        await expectError("org.freedesktop.DBus.Error.InvalidArgs") {
            try await fixture.call("Misread", arguments: { writer throws(DBusError) in try writer.append(Variant(.string("x"))) }) { _ throws(DBusError) in () }
        }
        // A reply read as the wrong type fails on the client side too.
        await expectError("org.freedesktop.DBus.Error.InvalidArgs") {
            _ = try await fixture.call("Echo", arguments: { writer throws(DBusError) in try writer.append(Variant(.uint32(1))) }) { reader throws(DBusError) in
                try reader.read(String.self)
            }
        }
        await fixture.finish()
    }

    @Test @BusActor func handlerErrorsReachTheCaller() async throws {
        let fixture = try await EchoFixture()
        do {
            try await fixture.call("Fail") { _ throws(DBusError) in () }
            Issue.record("Fail succeeded")
        } catch {
            #expect(error == DBusError("test.Error.Custom", "failed on purpose"))
        }
        await expectError("org.freedesktop.DBus.Error.UnknownMethod") {
            try await fixture.call("NoSuchMethod") { _ throws(DBusError) in () }
        }
        // A method with outputs whose handler answers nothing fails; one without gets an empty reply.
        do {
            try await fixture.call("Silent") { _ throws(DBusError) in () }
            Issue.record("Silent succeeded")
        } catch {
            #expect(error == .failed("Silent sent no reply"))
        }
        try await fixture.call("Keep") { _ throws(DBusError) in () }
        await fixture.finish()
    }

    @Test @BusActor func deferredRepliesDoNotBlockTheBus() async throws {
        let fixture = try await EchoFixture()
        let waiting = Task { @BusActor in
            try await fixture.call("Wait") { reader throws(DBusError) in try reader.read(UInt32.self) }
        }
        // Wait is parked; the service keeps answering, and Release answers Wait.
        #expect(try await fixture.echoed(.string("still serving")) == .string("still serving"))
        while fixture.echo.waiting.isEmpty { await Task.yield() }
        try await fixture.call("Release", arguments: { writer throws(DBusError) in try writer.append(UInt32(42)) }) { _ throws(DBusError) in () }
        #expect(try await waiting.value == 42)
        await fixture.finish()
    }

    @Test @BusActor func callsInFlightFailWhenTheirConnectionCloses() async throws {
        let fixture = try await EchoFixture()
        let waiting = Task { @BusActor in
            try await fixture.call("Wait") { reader throws(DBusError) in try reader.read(UInt32.self) }
        }
        while fixture.echo.waiting.isEmpty { await Task.yield() }
        fixture.client.close()
        do {
            _ = try await waiting.value
            Issue.record("a call on a closed connection returned")
        } catch let error as DBusError {
            #expect(error.name == "org.freedesktop.DBus.Error.Disconnected")
        }
        await fixture.finish()
    }

    @Test @BusActor func propertiesCanBeReadWrittenAndWatched() async throws {
        let fixture = try await EchoFixture()
        let changes = Inbox<[String: DBusValue]>()
        let signatures = Inbox<String>()
        let match = try await fixture.client.addMatch(
            "type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path='/test'"
        ) { signal in
            signatures.put(signal.arguments.signature.rawValue)
            guard (try? signal.arguments.read(String.self)) == EchoService.interfaceName,
                  let changed = try? signal.arguments.read([String: Variant].self) else { return }
            changes.put(changed.mapValues(\.value))
        }
        let properties = "org.freedesktop.DBus.Properties"
        let label = try await fixture.call("Get", interface: properties, arguments: { writer throws(DBusError) in
            try writer.append(EchoService.interfaceName); try writer.append("Label")
        }) { reader throws(DBusError) in try reader.read(Variant.self).value }
        #expect(label == .string("initial"))

        try await fixture.call("Set", interface: properties, arguments: { writer throws(DBusError) in
            try writer.append(EchoService.interfaceName); try writer.append("Label"); try writer.append(Variant(.string("renamed")))
        }) { _ throws(DBusError) in () }
        let changed = try await changes.first(within: 10, "PropertiesChanged") { _ in true }
        #expect(changed == ["Label": .string("renamed")])
        #expect(signatures.values == ["sa{sv}as"])

        let all = try await fixture.call("GetAll", interface: properties, arguments: { writer throws(DBusError) in
            try writer.append(EchoService.interfaceName)
        }) { reader throws(DBusError) in try reader.read([String: Variant].self).mapValues(\.value) }
        #expect(all == ["Label": .string("renamed"), "Version": .uint32(7)])

        await expectError("org.freedesktop.DBus.Error.PropertyReadOnly") {
            try await fixture.call("Set", interface: properties, arguments: { writer throws(DBusError) in
                try writer.append(EchoService.interfaceName); try writer.append("Version"); try writer.append(Variant(.uint32(1)))
            }) { _ throws(DBusError) in () }
        }
        await expectError("org.freedesktop.DBus.Error.InvalidArgs") {
            try await fixture.call("Set", interface: properties, arguments: { writer throws(DBusError) in
                try writer.append(EchoService.interfaceName); try writer.append("Label"); try writer.append(Variant(.uint32(1)))
            }) { _ throws(DBusError) in () }
        }
        match.cancel()
        await fixture.finish()
    }

    @Test @BusActor func introspectionDescribesTheInterface() async throws {
        let fixture = try await EchoFixture()
        let xml = try await fixture.call("Introspect", interface: "org.freedesktop.DBus.Introspectable") { reader throws(DBusError) in
            try reader.read(String.self)
        }
        #expect(xml.contains(#"<interface name="test.Echo">"#))
        #expect(xml.contains(#"<method name="Describe">"#))
        #expect(xml.contains(#"<arg type="ay" name="content" direction="in"/>"#))
        #expect(xml.contains(#"<arg type="s" name="summary" direction="out"/>"#))
        #expect(xml.contains(#"<property name="Label" type="s" access="readwrite">"#))
        #expect(xml.contains(#"<signal name="Announced">"#))
        #expect(xml.contains("org.freedesktop.DBus.Peer"))
        await fixture.finish()
    }

    @Test @BusActor func ownedObjectsAnswerOnlyTheirOwner() async throws {
        let denied = DBusError("test.Error.AccessDenied", "not yours")
        let fixture = try await EchoFixture { client in .owner(client, denied: denied) }
        let stranger = try BusConnection(.address(fixture.bus.address))
        #expect(try await fixture.echoed(.uint32(1)) == .uint32(1))
        await expectError(denied.name) {
            _ = try await fixture.call("Echo", on: stranger, arguments: { writer throws(DBusError) in try writer.append(Variant(.uint32(1))) }) { _ throws(DBusError) in () }
        }
        await expectError(denied.name) {
            _ = try await fixture.call("Get", on: stranger, interface: "org.freedesktop.DBus.Properties", arguments: { writer throws(DBusError) in
                try writer.append(EchoService.interfaceName); try writer.append("Label")
            }) { _ throws(DBusError) in () }
        }
        stranger.close()
        await fixture.finish()
    }

    @Test @BusActor func signalsOfOwnedObjectsAreUnicast() async throws {
        let fixture = try await EchoFixture { client in .owner(client, denied: .failed("not yours")) }
        let stranger = try BusConnection(.address(fixture.bus.address))
        let public_ = EchoService()
        try public_.export(on: fixture.service, at: "/public")
        let ownerHeard = Inbox<String>(), strangerHeard = Inbox<String>()
        let rule = "type='signal',interface='test.Echo',member='Announced'"
        let ownerMatch = try await fixture.client.addMatch(rule) { ownerHeard.put((try? $0.arguments.read(String.self)) ?? "?") }
        let strangerMatch = try await stranger.addMatch(rule) { strangerHeard.put((try? $0.arguments.read(String.self)) ?? "?") }

        try await fixture.call("Announce", arguments: { writer throws(DBusError) in try writer.append("private") }) { _ throws(DBusError) in () }
        // The broadcast marker follows the private signal from the same sender; messages
        // from one sender arrive in order, so once the marker is here the private one would be too.
        try await stranger.call(destination: fixture.service.uniqueName, path: "/public", interface: "test.Echo",
                                member: "Announce", arguments: { writer throws(DBusError) in try writer.append("marker") })
        _ = try await ownerHeard.first(within: 10, "owner hears the marker") { $0 == "marker" }
        _ = try await strangerHeard.first(within: 10, "stranger hears the marker") { $0 == "marker" }
        #expect(ownerHeard.values == ["private", "marker"])
        #expect(strangerHeard.values == ["marker"])
        ownerMatch.cancel()
        strangerMatch.cancel()
        stranger.close()
        await fixture.finish()
    }

    @Test @BusActor func peersLeavingTheBusAreNoticed() async throws {
        let fixture = try await EchoFixture()
        let leaving = try BusConnection(.address(fixture.bus.address))
        let gone = Inbox<String>()
        let watch = try PeerWatch(fixture.service, name: leaving.uniqueName) { gone.put("gone") }
        leaving.close()
        _ = try await gone.first(within: 10, "the peer to be noticed leaving") { _ in true }
        watch.cancel()
        await fixture.finish()
    }

    @Test @BusActor func callerCredentialsComeFromTheBus() async throws {
        let fixture = try await EchoFixture()
        #expect(try await fixture.service.unixUser(of: fixture.client.uniqueName) == getuid())
        await fixture.finish()
    }

    @Test @BusActor func unregisteredObjectsStopAnswering() async throws {
        let fixture = try await EchoFixture()
        fixture.echo.exported?.unregister()
        await expectError("org.freedesktop.DBus.Error.UnknownObject") {
            _ = try await fixture.echoed(.uint32(1))
        }
        await fixture.finish()
    }

    /// Calls find their object by the whole path, however long (the table is
    /// searched with sd-bus's own string, not a copy), and a path is free again
    /// once its object is gone.
    @Test @BusActor func objectsAreFoundByTheirWholePath() async throws {
        let fixture = try await EchoFixture()
        let long: ObjectPath = "/org/nearbyd/client_1_23/manager7/publication123456"
        let (first, second, again) = (EchoService(), EchoService(), EchoService())
        try first.export(on: fixture.service, at: long)
        try second.export(on: fixture.service, at: long.child("x"))
        func label(at path: ObjectPath) async throws(DBusError) -> DBusValue {
            try await fixture.client.call(destination: fixture.service.uniqueName, path: path,
                                          interface: "org.freedesktop.DBus.Properties", member: "Get",
                                          arguments: { writer throws(DBusError) in
                                              try writer.append(EchoService.interfaceName); try writer.append("Label")
                                          }) { reader throws(DBusError) in try reader.read(Variant.self).value }
        }
        first.label = "first"
        second.label = "second"
        #expect(try await label(at: long) == .string("first"))
        #expect(try await label(at: long.child("x")) == .string("second"))
        #expect(throws: DBusError.self) { try EchoService().export(on: fixture.service, at: long) }
        first.exported?.unregister()
        await expectError("org.freedesktop.DBus.Error.UnknownObject") { _ = try await label(at: long) }
        #expect(try await label(at: long.child("x")) == .string("second"))
        again.label = "again"
        try again.export(on: fixture.service, at: long)
        #expect(try await label(at: long) == .string("again"))
        await fixture.finish()
    }

    /// An object of several interfaces answers on each, and an export that
    /// fails on one of them leaves none of the others behind.
    @Test @BusActor func anObjectOfSeveralInterfacesAnswersOnEachAndGoesWhole() async throws {
        let fixture = try await EchoFixture()
        let echo = EchoService()
        echo.label = "two"
        let path: ObjectPath = "/test/two"
        func get(_ interface: String, _ property: String, at path: ObjectPath = path) async throws(DBusError) -> DBusValue {
            try await fixture.client.call(destination: fixture.service.uniqueName, path: path,
                                          interface: "org.freedesktop.DBus.Properties", member: "Get",
                                          arguments: { writer throws(DBusError) in
                                              try writer.append(interface); try writer.append(property)
                                          }) { reader throws(DBusError) in try reader.read(Variant.self).value }
        }
        echo.exported = try fixture.service.export([EchoService.interface.bind(echo), Self.second.bind(echo)], at: path)
        #expect(try await get(EchoService.interfaceName, "Label") == .string("two"))
        #expect(try await get("test.Second", "Name") == .string("second of two"))
        let changes = Inbox<String>()
        let match = try await fixture.client.addMatch(
            "type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path='\(path)'"
        ) { signal in
            guard let interface = try? signal.arguments.read(String.self),
                  let changed = try? signal.arguments.read([String: Variant].self) else { return }
            changes.put("\(interface) \(changed.mapValues(\.value))")
        }
        try echo.exported?.emitPropertiesChanged(interface: "test.Second", ["Name"])
        let change = try await changes.first(within: 10, "PropertiesChanged of test.Second") { _ in true }
        #expect(change == "test.Second \(["Name": DBusValue.string("second of two")])")
        match.cancel()

        // The second interface is taken at the new path already: the first is not left there.
        let clash: ObjectPath = "/test/clash"
        _ = try fixture.service.export([Self.second.bind(EchoService())], at: clash)
        #expect(throws: DBusError.self) {
            try fixture.service.export([EchoService.interface.bind(echo), Self.second.bind(echo)], at: clash)
        }
        // The object that held the path keeps it.
        #expect(try await get("test.Second", "Name", at: clash) == .string("second of initial"))
        // sd-bus's answer for an interface the path's object lacks.
        await expectError("org.freedesktop.DBus.Error.UnknownProperty") { _ = try await get(EchoService.interfaceName, "Label", at: clash) }

        echo.exported?.unregister()
        await expectError("org.freedesktop.DBus.Error.UnknownObject") { _ = try await get(EchoService.interfaceName, "Label") }
        await expectError("org.freedesktop.DBus.Error.UnknownObject") { _ = try await get("test.Second", "Name") }
        await fixture.finish()
    }

    /// A connection serves one definition of an interface name: a second is
    /// refused, and the first keeps serving.
    @Test @BusActor func aSecondDefinitionOfAnInterfaceIsRefused() async throws {
        let fixture = try await EchoFixture()
        let rival = Interface<EchoService>(EchoService.interfaceName, methods: [Method("Echo") { _, _ in }])
        #expect(throws: DBusError.failed("two different definitions of \(EchoService.interfaceName) cannot be exported on one connection")) {
            try fixture.service.export([rival.bind(EchoService())], at: "/test/rival")
        }
        #expect(try await fixture.echoed(.uint32(3)) == .uint32(3))
        await fixture.finish()
    }

    @BusActor private static let second = Interface<EchoService>(
        "test.Second",
        properties: [Property("Name", "s") { echo, _ in .string("second of \(echo.label)") }]
    )

    /// A handler that keeps its call object, against the rule, keeps it to
    /// itself: the object the bus reuses for the next call is never one held
    /// elsewhere.
    @Test @BusActor func aCallObjectKeptByItsHandlerServesNoOtherCall() async throws {
        let fixture = try await EchoFixture()
        let echo = EchoService()
        try echo.export(on: fixture.service, at: "/test/keep")
        for _ in 0..<3 {
            try await fixture.client.call(destination: fixture.service.uniqueName, path: "/test/keep",
                                          interface: EchoService.interfaceName, member: "Keep")
            let value = try await fixture.client.call(destination: fixture.service.uniqueName, path: "/test/keep",
                                                      interface: EchoService.interfaceName, member: "Echo",
                                                      arguments: { writer throws(DBusError) in try writer.append(Variant(.uint32(9))) }) {
                reader throws(DBusError) in try reader.read(Variant.self).value
            }
            #expect(value == .uint32(9))
        }
        #expect(echo.kept.count == 3)
        #expect(Set(echo.kept.map(ObjectIdentifier.init)).count == 3, "each kept call is an object of its own")
        await fixture.finish()
    }

    @Test @BusActor func wellKnownNamesAreExclusive() async throws {
        let fixture = try await EchoFixture()
        try fixture.service.requestName("org.nearbyd.Test")
        await expectError("org.freedesktop.DBus.Error.AddressInUse") {
            try fixture.client.requestName("org.nearbyd.Test")
        }
        await fixture.finish()
    }
}

/// How many of this process's descriptors refer to the same file as `fd`.
private func descriptors(sharingInodeWith fd: Int32) throws -> Int {
    var target = stat()
    fstat(fd, &target)
    return try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count { name in
        var info = stat()
        guard let number = Int32(name), fstat(number, &info) == 0 else { return false }
        return info.st_ino == target.st_ino && info.st_dev == target.st_dev
    }
}
