import DBus
import Foundation
import Testing
import TestSupport

/// A private bus with a service that owns a well-known name, a client that
/// follows it with ``BusService``, and a forger: another connection on the
/// same bus that sends the client signals addressed to it alone.
@BusActor
final class ServiceFixture {
    static let name = "org.nearbyd.test.Service"
    static let interface = "org.nearbyd.test.Service1"

    let bus: PrivateBus
    let owner: BusConnection
    let client: BusConnection
    let forger: BusConnection
    /// The words of the `Said` signals the client believed, in order.
    let heard = Inbox<String>()

    init(ownerTakesTheName: Bool = true) async throws {
        bus = try await PrivateBus()
        owner = try BusConnection(.address(bus.address))
        client = try BusConnection(.address(bus.address))
        forger = try BusConnection(.address(bus.address))
        if ownerTakesTheName { try await Self.take(Self.name, on: owner) }
    }

    /// A `Said(word)` signal of the service's interface, from `connection`, to
    /// the client alone (a unicast signal, as a forger sends it) or to everyone.
    func say(_ word: String, from connection: BusConnection, unicast: Bool = true) throws {
        try connection.emitSignal(path: "/org/nearbyd/test", interface: Self.interface, member: "Said",
                                  destination: unicast ? client.uniqueName : nil) { writer throws(DBusError) in
            try writer.append(word)
        }
    }

    /// Records the words of the service's `Said` signals that `service` lets through.
    func listen(through service: BusService) async throws -> SignalSubscription {
        try await service.addMatch("interface='\(Self.interface)',member='Said'") { [heard] signal in
            heard.put((try? signal.arguments.read(String.self)) ?? "?")
        }
    }

    /// Returns once every message `connection` sent before is in its
    /// recipients' queues: the bus daemon routes a connection's messages in
    /// order, and answers this call after routing what came before it.
    func flush(_ connection: BusConnection) async throws {
        _ = try await connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                      interface: "org.freedesktop.DBus", member: "GetId") { reader throws(DBusError) in
            try reader.read(String.self)
        }
    }

    /// A forged `NameOwnerChanged` for the service's name, sent by `connection` to the client.
    func forgeOwnerChange(to newOwner: String, from connection: BusConnection) throws {
        try connection.emitSignal(path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                                  destination: client.uniqueName) { [owner] writer throws(DBusError) in
            try writer.append(Self.name)
            try writer.append(owner.uniqueName)
            try writer.append(newOwner)
        }
    }

    /// Takes `name` (RequestName without flags: fails when it is owned).
    static func take(_ name: String, on connection: BusConnection) async throws {
        let result = try await connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                               interface: "org.freedesktop.DBus", member: "RequestName",
                                               arguments: { writer throws(DBusError) in
                                                   try writer.append(name)
                                                   try writer.append(UInt32(0))
                                               }) { reader throws(DBusError) in try reader.read(UInt32.self) }
        guard result == 1 else { throw DBusError.failed("RequestName answered \(result)") }
    }

    static func release(_ name: String, on connection: BusConnection) async throws {
        _ = try await connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                      interface: "org.freedesktop.DBus", member: "ReleaseName",
                                      arguments: { writer throws(DBusError) in try writer.append(name) }) { reader throws(DBusError) in
            try reader.read(UInt32.self)
        }
    }

    func finish() async {
        owner.close()
        client.close()
        forger.close()
        await bus.stop()
    }
}

@Suite(.serialized, .timeLimit(.minutes(2))) @BusActor
struct BusServiceTests {
    /// What the project's clients did before BusService, and why it is needed:
    /// a rule naming the service's well-known name as sender lets another
    /// connection's unicast signal through.
    @Test func aPlainMatchOnTheWellKnownNameBelievesAForger() async throws {
        let fixture = try await ServiceFixture()
        let heard = Inbox<String>()
        let match = try await fixture.client.addMatch(
            "type='signal',sender='\(ServiceFixture.name)',interface='\(ServiceFixture.interface)'"
        ) { signal in heard.put((try? signal.arguments.read(String.self)) ?? "?") }
        try fixture.say("forged", from: fixture.forger)
        _ = try await heard.first(within: 10, "the forged signal") { $0 == "forged" }
        match.cancel()
        await fixture.finish()
    }

    @Test func onlyTheOwnersSignalsAreBelieved() async throws {
        let fixture = try await ServiceFixture()
        let service = try await BusService(ServiceFixture.name, on: fixture.client)
        #expect(service.owner == fixture.owner.uniqueName)
        let subscription = try await fixture.listen(through: service)

        try fixture.say("forged", from: fixture.forger)
        try fixture.say("forged broadcast", from: fixture.forger, unicast: false)
        try await fixture.flush(fixture.forger)
        try fixture.say("real", from: fixture.owner)
        try fixture.say("real broadcast", from: fixture.owner, unicast: false)
        _ = try await fixture.heard.first(within: 10, "the owner's broadcast") { $0 == "real broadcast" }
        #expect(fixture.heard.values == ["real", "real broadcast"])
        subscription.cancel()
        await fixture.finish()
    }

    @Test func aForgedNameOwnerChangedIsIgnored() async throws {
        let fixture = try await ServiceFixture()
        let service = try await BusService(ServiceFixture.name, on: fixture.client)
        let changes = Inbox<String>()
        let observation = service.onOwnerChange { changes.put($0 ?? "none") }
        let subscription = try await fixture.listen(through: service)

        // The forger claims the name went to it, then that it has no owner.
        try fixture.forgeOwnerChange(to: fixture.forger.uniqueName, from: fixture.forger)
        try fixture.say("forged after the claim", from: fixture.forger)
        try fixture.forgeOwnerChange(to: "", from: fixture.forger)
        try await fixture.flush(fixture.forger)
        try fixture.say("real", from: fixture.owner)
        _ = try await fixture.heard.first(within: 10, "the owner's signal") { $0 == "real" }
        #expect(fixture.heard.values == ["real"])
        #expect(service.owner == fixture.owner.uniqueName)
        #expect(changes.values.isEmpty)
        observation.cancel()
        subscription.cancel()
        await fixture.finish()
    }

    @Test func theNameChangingHandsIsFollowed() async throws {
        let fixture = try await ServiceFixture()
        let service = try await BusService(ServiceFixture.name, on: fixture.client)
        let changes = Inbox<String>()
        let observation = service.onOwnerChange { changes.put($0 ?? "none") }
        let subscription = try await fixture.listen(through: service)

        // The owner lets the name go but stays on the bus: what it says now is not the service's.
        try await ServiceFixture.release(ServiceFixture.name, on: fixture.owner)
        _ = try await changes.first(within: 10, "the name to have no owner") { $0 == "none" }
        #expect(service.owner == nil)
        try fixture.say("former owner", from: fixture.owner)
        try await fixture.flush(fixture.owner)

        // A new owner (a restarted service) is believed from the moment it has the name.
        let successor = try BusConnection(.address(fixture.bus.address))
        let successorName = successor.uniqueName
        try await ServiceFixture.take(ServiceFixture.name, on: successor)
        _ = try await changes.first(within: 10, "the new owner") { $0 == successorName }
        #expect(service.owner == successorName)
        try fixture.say("successor", from: successor)
        _ = try await fixture.heard.first(within: 10, "the new owner's signal") { $0 == "successor" }
        #expect(fixture.heard.values == ["successor"])
        #expect(changes.values == ["none", successorName])

        // A cancelled observation hears no more (the bus sends NameOwnerChanged
        // before it answers ReleaseName, so it is on its way before the flush).
        observation.cancel()
        try await ServiceFixture.release(ServiceFixture.name, on: successor)
        try await fixture.flush(fixture.client)
        #expect(service.owner == nil)
        #expect(changes.values == ["none", successorName])
        successor.close()
        subscription.cancel()
        await fixture.finish()
    }

    @Test func aServiceThatIsNotRunningYetIsBelievedOnceItComes() async throws {
        let fixture = try await ServiceFixture(ownerTakesTheName: false)
        let service = try await BusService(ServiceFixture.name, on: fixture.client)
        #expect(service.owner == nil)
        let changes = Inbox<String>()
        let observation = service.onOwnerChange { changes.put($0 ?? "none") }
        let subscription = try await fixture.listen(through: service)
        try fixture.say("before", from: fixture.owner)
        try await fixture.flush(fixture.owner)

        let ownerName = fixture.owner.uniqueName
        try await ServiceFixture.take(ServiceFixture.name, on: fixture.owner)
        _ = try await changes.first(within: 10, "the owner") { $0 == ownerName }
        try fixture.say("after", from: fixture.owner)
        _ = try await fixture.heard.first(within: 10, "the owner's signal") { $0 == "after" }
        #expect(fixture.heard.values == ["after"])
        observation.cancel()
        subscription.cancel()
        await fixture.finish()
    }

    /// The name changes hands again and again while clients start following it:
    /// whatever arrives while GetNameOwner is on its way, and right behind its
    /// answer, each ends up knowing the owner the bus knows. (The clients of
    /// earlier rounds stay, and their handlers make the client read more
    /// messages per turn: an answer applied after the caller resumes, rather
    /// than as sd-bus dispatches it, then misses the changes read with it.)
    @Test func theOwnerIsRightWhenTheNameChangesWhileItIsAsked() async throws {
        let fixture = try await ServiceFixture(ownerTakesTheName: false)
        let contenders = [fixture.owner, try BusConnection(.address(fixture.bus.address))]
        var services: [BusService] = []
        for round in 0..<60 {
            let contender = contenders[round % 2]
            // A burst of changes, sent without waiting for answers, while a client
            // asks: it ends with the name taken, and no change comes after it.
            for step in 0..<401 {
                let member = step % 2 == 0 ? "RequestName" : "ReleaseName"
                try contender.send(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                   interface: "org.freedesktop.DBus", member: member) { writer throws(DBusError) in
                    try writer.append(ServiceFixture.name)
                    if member == "RequestName" { try writer.append(UInt32(0)) }
                }
            }
            services.append(try await BusService(ServiceFixture.name, on: fixture.client))
            // Answered after the burst.
            try await fixture.flush(contender)
            // Answered after every NameOwnerChanged the bus sent the client before it.
            let now = try await fixture.client.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                                    interface: "org.freedesktop.DBus", member: "GetNameOwner",
                                                    arguments: { writer throws(DBusError) in try writer.append(ServiceFixture.name) }
            ) { reader throws(DBusError) in try reader.read(String.self) }
            #expect(now == contender.uniqueName)
            for (index, service) in services.enumerated() {
                #expect(service.owner == now, "client \(index) in round \(round)")
            }
            try await ServiceFixture.release(ServiceFixture.name, on: contender)
        }
        contenders[1].close()
        await fixture.finish()
    }
}
