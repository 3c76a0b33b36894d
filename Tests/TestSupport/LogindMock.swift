import DBus
import Foundation

/// python-dbusmock's logind template on a private bus, completed and driven
/// through dbusmock's own `org.freedesktop.DBus.Mock` interface.
@BusActor
public final class LogindMock {
    static let mockInterface = "org.freedesktop.DBus.Mock"
    static let service = "org.freedesktop.login1"
    static let managerPath: ObjectPath = "/org/freedesktop/login1"
    static let managerInterface = "org.freedesktop.login1.Manager"
    static let sessionInterface = "org.freedesktop.login1.Session"
    static let userInterface = "org.freedesktop.login1.User"
    static let propertiesInterface = "org.freedesktop.DBus.Properties"

    public let process: ChildProcess
    let control: BusConnection

    /// Starts the mock and returns once it owns logind's name.
    public init(bus: PrivateBus) async throws {
        control = try BusConnection(.address(bus.address))
        let owned = Inbox<String>()
        let subscription = try await control.addMatch(
            "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='\(Self.service)'"
        ) { signal in
            _ = try? signal.arguments.read(String.self)
            _ = try? signal.arguments.read(String.self)
            if let owner = try? signal.arguments.read(String.self), !owner.isEmpty { owned.put(owner) }
        }
        process = try await ChildProcess(name: "dbusmock logind", executable: "/usr/bin/python3",
                                         arguments: ["-m", "dbusmock", "--system", "--template", "logind"],
                                         environment: ["DBUS_SYSTEM_BUS_ADDRESS": bus.address])
        _ = try await owned.first(within: 30, "dbusmock to own \(Self.service)") { _ in true }
        subscription.cancel()
        // The template's GetUser joins a string and an integer, which Python refuses; and it knows no NoSuchUser.
        try await addManagerMethod("GetUser", in: "u", out: "o", code: """
            path = "/org/freedesktop/login1/user/%d" % args[0]
            if path not in objects:
                raise dbus.exceptions.DBusException("No user %d known or logged in" % args[0], name="org.freedesktop.login1.NoSuchUser")
            ret = path
            """)
    }

    /// Adds a session (and its seat and user) as logind would have it.
    public func addSession(_ id: String, uid: UInt32, active: Bool) async throws -> ObjectPath {
        let path = try await control.call(
            destination: Self.service, path: Self.managerPath, interface: Self.mockInterface,
            member: "AddSession",
            arguments: { writer throws(DBusError) in
                try writer.append(id)
                try writer.append("seat0")
                try writer.append(uid)
                try writer.append("user\(uid)")
                try writer.append(active)
            }
        ) { reader throws(DBusError) in try reader.read(String.self) }
        return try ObjectPath(path)
    }

    /// Gives logind the GetSessionByPID the template lacks: `pid` is in
    /// `session`, every other process in none.
    public func placeProcess(_ pid: UInt32, in session: ObjectPath) async throws {
        try await placeProcesses([pid], in: session)
    }

    /// Likewise for several processes, all in `session`.
    public func placeProcesses(_ pids: [UInt32], in session: ObjectPath) async throws {
        try await addManagerMethod("GetSessionByPID", in: "u", out: "o", code: """
            if args[0] not in (\(pids.map(String.init).joined(separator: ", ")),):
                raise dbus.exceptions.DBusException("PID %d does not belong to any known session" % args[0], name="org.freedesktop.login1.NoSessionForPID")
            ret = "\(session)"
            """)
    }

    public func setActive(_ session: ObjectPath, _ active: Bool) async throws {
        try await updateProperties(of: session, ["Active": Variant(.bool(active))])
    }

    /// As a screen locker tells logind.
    public func setLocked(_ session: ObjectPath, _ locked: Bool) async throws {
        try await control.call(destination: Self.service, path: session, interface: Self.sessionInterface,
                               member: "SetLockedHint", arguments: { writer throws(DBusError) in try writer.append(locked) })
    }

    /// Makes `session` the display session of user `uid` (who must have a session).
    /// A plain Set: dbusmock's UpdateProperties cannot wrap a structure.
    public func setDisplay(of uid: UInt32, to session: ObjectPath, id: String) async throws {
        try await control.call(destination: Self.service, path: ObjectPath("/org/freedesktop/login1/user/\(uid)"),
                               interface: Self.propertiesInterface, member: "Set",
                               arguments: { writer throws(DBusError) in
                                   try writer.append(Self.userInterface)
                                   try writer.append("Display")
                                   try writer.append(Variant(.structure([.string(id), .objectPath(session)])))
                               })
    }

    public func stop() async {
        control.close()
        await process.stop()
    }

    private func updateProperties(of path: ObjectPath, _ properties: [String: Variant]) async throws {
        try await control.call(destination: Self.service, path: path, interface: Self.mockInterface,
                               member: "UpdateProperties", arguments: { writer throws(DBusError) in
                                   try writer.append("")
                                   try writer.append(properties)
                               })
    }

    private func addManagerMethod(_ name: String, in inSignature: String, out outSignature: String, code: String) async throws {
        try await control.call(destination: Self.service, path: Self.managerPath, interface: Self.mockInterface,
                               member: "AddMethod", arguments: { writer throws(DBusError) in
                                   try writer.append(Self.managerInterface)
                                   try writer.append(name)
                                   try writer.append(inSignature)
                                   try writer.append(outSignature)
                                   try writer.append(code)
                               })
    }
}
