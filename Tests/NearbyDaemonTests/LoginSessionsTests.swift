import DBus
import Foundation
import Logging
import Testing
import TestSupport
@testable import NearbyDaemon

/// ``LoginSessions`` against dbusmock's logind on a private bus: the test
/// process is the client, its own connection the client's.
@BusActor
final class LoginSessionsFixture {
    let bus: PrivateBus
    let logind: BusConnection
    let client: BusConnection
    let sessions: LoginSessions
    let statuses = Inbox<LogindStatus>()
    var mock: LogindMock?

    init(withLogind: Bool) async throws {
        bus = try await PrivateBus()
        if withLogind { mock = try await LogindMock(bus: bus) }
        logind = try BusConnection(.address(bus.address))
        client = try BusConnection(.address(bus.address))
        sessions = LoginSessions(logind: logind, clients: client, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        sessions.onStatusChange = { [statuses] in statuses.put($0) }
        await sessions.start()
    }

    var pid: UInt32 { UInt32(getpid()) }
    var uid: UInt32 { getuid() }

    /// The match rules the bus holds for the connection that talks to logind.
    /// Asked on that connection, so a match it just dropped is gone by then.
    func matchRules() async throws -> UInt32 {
        let stats = try await logind.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus.Debug.Stats",
            member: "GetConnectionStats", arguments: { [logind] writer throws(DBusError) in try writer.append(logind.uniqueName) }
        ) { reader throws(DBusError) in try reader.read([String: Variant].self) }
        guard case .uint32(let count) = stats["MatchRules"]?.value else { throw DBusError.failed("no MatchRules in \(stats)") }
        return count
    }

    func finish() async {
        logind.close()
        client.close()
        await mock?.stop()
        await bus.stop()
    }
}

/// One state a watcher was told, numbered from 1 in the order told.
struct Told: Equatable, Sendable {
    let number: Int
    let state: SessionState
}

/// A watcher's handler that puts what it is told into `inbox`, numbered.
@BusActor func recording(into inbox: Inbox<Told>) -> @BusActor (SessionState) -> Void {
    var number = 0
    return { state in
        number += 1
        inbox.put(Told(number: number, state: state))
    }
}

@Suite(.serialized) @BusActor
struct LoginSessionsTests {
    static let here = SessionState(active: true, locked: false)

    @Test func aWatcherSeesTheSessionGoAwayAndComeBack() async throws {
        let fixture = try await LoginSessionsFixture(withLogind: true)
        let mock = try #require(fixture.mock)
        let path = try await mock.addSession("c1", uid: 1000, active: true)
        try await mock.placeProcess(fixture.pid, in: path)
        #expect(fixture.sessions.status == .available)
        #expect(fixture.sessions.status.description == "logind")

        let session = try await fixture.sessions.session(of: fixture.client.uniqueName)
        #expect(session == LoginSession(path: path, id: "c1"))

        let told = Inbox<Told>()
        let watch = await fixture.sessions.watch(path, onChange: recording(into: told))
        // The state as first read, before watch returns.
        #expect(told.values == [Told(number: 1, state: Self.here)])

        try await mock.setLocked(path, true)
        _ = try await told.first(within: 20, "the lock") { $0.number == 2 }
        try await mock.setLocked(path, false)
        _ = try await told.first(within: 20, "the unlock") { $0.number == 3 }
        try await mock.setActive(path, false)
        _ = try await told.first(within: 20, "the switch to another session") { $0.number == 4 }
        try await mock.setActive(path, true)
        _ = try await told.first(within: 20, "the switch back") { $0.number == 5 }
        #expect(told.values.map(\.state) == [
            Self.here, SessionState(active: true, locked: true), Self.here,
            SessionState(active: false, locked: false), Self.here,
        ])
        #expect(told.values.map(\.state.away) == [false, true, false, true, false])
        #expect(fixture.sessions.state(of: path) == Self.here)
        watch.cancel()
        await fixture.finish()
    }

    /// Another connection sends nearbyd's logind connection a session change and
    /// logind's departure, addressed to it alone (which the bus delivers
    /// whatever the match rules): neither is believed; logind's own is.
    @Test func signalsOnlyFromLogindItselfAreBelieved() async throws {
        let fixture = try await LoginSessionsFixture(withLogind: true)
        let mock = try #require(fixture.mock)
        let path = try await mock.addSession("c1", uid: 1000, active: true)
        let told = Inbox<Told>()
        let watch = await fixture.sessions.watch(path, onChange: recording(into: told))

        let forger = try BusConnection(.address(fixture.bus.address))
        try forger.emitSignal(path: path, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                              destination: fixture.logind.uniqueName) { writer throws(DBusError) in
            try writer.append(LoginSessions.sessionInterface)
            try writer.append(["Active": Variant(.bool(false))])
            try writer.append([String]())
        }
        try forger.emitSignal(path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                              destination: fixture.logind.uniqueName) { writer throws(DBusError) in
            try writer.append(LoginSessions.service)
            try writer.append(":1.1")
            try writer.append("")
        }
        // Answered once the bus has queued what the forger sent before, ahead of logind's change below.
        _ = try await forger.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                  interface: "org.freedesktop.DBus", member: "GetId") { reader throws(DBusError) in
            try reader.read(String.self)
        }
        try await mock.setLocked(path, true)
        let locked = try await told.first(within: 20, "the lock") { $0.number == 2 }
        #expect(locked.state == SessionState(active: true, locked: true))
        #expect(fixture.sessions.status == .available)
        #expect(fixture.statuses.values.allSatisfy { $0 == .available })
        watch.cancel()
        forger.close()
        await fixture.finish()
    }

    @Test func watchersOfASessionShareOneMatchThatGoesWithTheLast() async throws {
        let fixture = try await LoginSessionsFixture(withLogind: true)
        let mock = try #require(fixture.mock)
        let path = try await mock.addSession("c1", uid: 1000, active: true)
        let before = try await fixture.matchRules()

        let first = Inbox<Told>()
        let second = Inbox<Told>()
        let firstWatch = await fixture.sessions.watch(path, onChange: recording(into: first))
        #expect(try await fixture.matchRules() == before + 1)
        let secondWatch = await fixture.sessions.watch(path, onChange: recording(into: second))
        #expect(try await fixture.matchRules() == before + 1)
        // The second is told the state known already.
        #expect(first.values.map(\.state) == [Self.here] && second.values.map(\.state) == [Self.here])

        try await mock.setLocked(path, true)
        _ = try await first.first(within: 20, "the lock (first watcher)") { $0.number == 2 }
        _ = try await second.first(within: 20, "the lock (second watcher)") { $0.number == 2 }

        firstWatch.cancel()
        #expect(try await fixture.matchRules() == before + 1)
        try await mock.setLocked(path, false)
        let unlocked = try await second.first(within: 20, "the unlock (second watcher)") { $0.number == 3 }
        #expect(unlocked.state == Self.here)
        // Watchers are told in one pass: had the first still been watching, it would have been told by now.
        #expect(first.values.count == 2)

        secondWatch.cancel()
        #expect(try await fixture.matchRules() == before)
        #expect(fixture.sessions.state(of: path) == nil)
        await fixture.finish()
    }

    @Test func aProcessInNoSessionHasNone() async throws {
        let fixture = try await LoginSessionsFixture(withLogind: true)
        let mock = try #require(fixture.mock)
        let path = try await mock.addSession("c1", uid: 1000, active: true)
        try await mock.placeProcess(fixture.pid + 1, in: path)
        // Nor has its user (no session of its uid), so there is no display session to fall back on.
        #expect(try await fixture.sessions.session(of: fixture.client.uniqueName) == nil)
        await fixture.finish()
    }

    @Test func aProcessOutsideSessionsBelongsToItsUsersDisplaySession() async throws {
        let fixture = try await LoginSessionsFixture(withLogind: true)
        let mock = try #require(fixture.mock)
        let path = try await mock.addSession("c2", uid: fixture.uid, active: true)
        try await mock.placeProcess(fixture.pid + 1, in: path)
        // A user with a session but no display session: still none.
        #expect(try await fixture.sessions.session(of: fixture.client.uniqueName) == nil)
        try await mock.setDisplay(of: fixture.uid, to: path, id: "c2")
        #expect(try await fixture.sessions.session(of: fixture.client.uniqueName) == LoginSession(path: path, id: "c2"))
        await fixture.finish()
    }

    @Test func aClientThatLeftTheBusIsAnError() async throws {
        let fixture = try await LoginSessionsFixture(withLogind: true)
        await #expect(throws: DBusError.self) {
            _ = try await fixture.sessions.session(of: ":1.9999")
        }
        await fixture.finish()
    }

    @Test func withoutLogindEverythingIsUnavailableUntilItComes() async throws {
        let fixture = try await LoginSessionsFixture(withLogind: false)
        #expect(fixture.sessions.status == .unavailable("org.freedesktop.login1 is not on the bus"))
        #expect(try await fixture.sessions.session(of: fixture.client.uniqueName) == nil)
        let path: ObjectPath = "/org/freedesktop/login1/session/c1"
        let told = Inbox<Told>()
        let watch = await fixture.sessions.watch(path, onChange: recording(into: told))
        #expect(told.values.isEmpty)

        // logind arrives; its session changes, and the watcher learns the whole state.
        let mock = try await LogindMock(bus: fixture.bus)
        fixture.mock = mock
        _ = try await fixture.statuses.first(within: 20, "logind to be found") { $0 == .available }
        _ = try await mock.addSession("c1", uid: 1000, active: true)
        try await mock.setActive(path, false)
        let away = try await told.first(within: 20, "the session's state") { !$0.state.active }.state
        #expect(away == SessionState(active: false, locked: false))

        // logind leaves: unavailable again, the last state stands.
        fixture.statuses.clear()
        await mock.stop()
        fixture.mock = nil
        let gone = try await fixture.statuses.first(within: 20, "logind to leave") { $0 != .available }
        #expect(gone == .unavailable("logind left the bus"))
        #expect(fixture.sessions.state(of: path) == away)
        watch.cancel()
        await fixture.finish()
    }

    @Test func turnedOffItAsksNobody() async throws {
        let bus = try await PrivateBus()
        let client = try BusConnection(.address(bus.address))
        let sessions = LoginSessions(logind: nil, clients: client, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        await sessions.start()
        #expect(sessions.status == .unavailable("disabled in the configuration"))
        #expect(sessions.status.description == "unavailable: disabled in the configuration")
        #expect(try await sessions.session(of: client.uniqueName) == nil)
        let unreachable = LoginSessions(logind: nil, clients: client, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() },
                                        whyNoBus: "cannot connect to the system bus")
        #expect(unreachable.status == .unavailable("cannot connect to the system bus"))
        client.close()
        await bus.stop()
    }
}
