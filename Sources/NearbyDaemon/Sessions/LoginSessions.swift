import DBus
import Logging

/// A logind session: its object path, and its `Id` for logs.
struct LoginSession: Hashable, Sendable {
    let path: ObjectPath
    let id: String
}

/// What nearbyd follows of a login session.
struct SessionState: Equatable, Sendable {
    var active: Bool
    var locked: Bool

    /// The user is not at this session: another one is in the foreground, or
    /// its screen is locked. A client's managers go to the background meanwhile.
    var away: Bool { !active || locked }
}

/// Whether logind can be asked, as the daemon shows it.
enum LogindStatus: Equatable, Sendable, CustomStringConvertible {
    case available
    case unavailable(String)

    var description: String {
        switch self {
        case .available: "logind"
        case .unavailable(let why): "unavailable: \(why)"
        }
    }
}

/// The login sessions of nearbyd's clients, from systemd-logind over D-Bus (what
/// sd-login reads from /run, asked of logind instead so that it works on any
/// bus the configuration names): which session a client belongs to, and
/// whether that session is active and unlocked.
///
/// Nothing here blocks or fails hard when logind is absent: callers get no
/// session and no state, and ``status`` says why. When logind comes (back) on
/// the bus, the sessions being watched are read again.
@BusActor
final class LoginSessions {
    static let service = "org.freedesktop.login1"
    static let managerPath: ObjectPath = "/org/freedesktop/login1"
    static let managerInterface = "org.freedesktop.login1.Manager"
    static let sessionInterface = "org.freedesktop.login1.Session"
    static let userInterface = "org.freedesktop.login1.User"
    static let propertiesInterface = "org.freedesktop.DBus.Properties"
    /// logind answers at once; a stuck one must not hold a client's request for
    /// sd-bus's default of 25 s.
    static let callTimeoutMicroseconds: UInt64 = 5_000_000

    /// One session being followed, shared by everyone watching it.
    @BusActor
    private final class Watched {
        struct Watcher {
            let onChange: @BusActor (SessionState) -> Void
            /// What this watcher was last told, so it hears each state once.
            var told: SessionState?
        }

        let path: ObjectPath
        var state: SessionState?
        var subscription: SignalSubscription?
        var watchers: [UInt64: Watcher] = [:]
        /// The first match and read; new watchers wait for it before they are told the state.
        var ready: Task<Void, Never>?

        init(path: ObjectPath) {
            self.path = path
        }

        /// Tells every watcher the state it has not heard yet. A watcher may
        /// cancel others (or itself) from its handler, hence the snapshot.
        func tell() {
            guard let state else { return }
            for id in Array(watchers.keys) where watchers[id] != nil && watchers[id]?.told != state {
                watchers[id]?.told = state
                watchers[id]?.onChange(state)
            }
        }
    }

    private let logind: BusConnection?
    private let clients: BusConnection
    private let logger: Logger
    /// logind on its bus: its name's owner, the only sender believed.
    private var logindService: BusService?
    private var ownerChanges: OwnerObservation?
    private var watched: [ObjectPath: Watched] = [:]
    private var lastWatcherID: UInt64 = 0

    /// Whether logind answers; ``unavailable`` with the reason otherwise.
    private(set) var status: LogindStatus
    /// Runs when ``status`` changes.
    var onStatusChange: (@BusActor (LogindStatus) -> Void)?

    /// `logind` is the bus logind is on (the system bus in production), nil
    /// when there is none for `whyNoBus` (turned off, or it could not be
    /// reached); `clients` is the bus nearbyd's clients call it on, which knows
    /// their process ids.
    init(logind: BusConnection?, clients: BusConnection, logger: Logger,
         whyNoBus: String = "disabled in the configuration") {
        self.logind = logind
        self.clients = clients
        self.logger = logger
        status = .unavailable(logind == nil ? whyNoBus : "not checked yet")
    }

    /// Follows logind coming and going on its bus and checks whether it answers
    /// now. Called once, before the daemon serves clients.
    func start() async {
        guard let logind else { return }
        logind.onDisconnect { [weak self] in self?.setStatus(.unavailable("the connection to its bus was lost")) }
        let service: BusService
        do {
            service = try await BusService(Self.service, on: logind)
        } catch {
            setStatus(.unavailable("cannot follow logind on its bus: \(error)"))
            return
        }
        logindService = service
        // A change before this is in what checkStatus reads below.
        ownerChanges = service.onOwnerChange { [weak self] owner in
            guard let self else { return }
            if owner == nil {
                setStatus(.unavailable("logind left the bus"))
            } else {
                Task { await self.logindAppeared(on: logind) }
            }
        }
        await checkStatus(on: logind)
    }

    /// The login session the client `busName` runs in, or nil when it has none
    /// or logind cannot be asked. Throws when the client's process cannot be
    /// told (it left the bus) or logind answers something unexpected.
    func session(of busName: String) async throws(DBusError) -> LoginSession? {
        guard let logind else { return nil }
        let pid = try await clients.unixProcessID(of: busName)
        let path: ObjectPath
        do {
            path = try await managerObject("GetSessionByPID", pid, on: logind)
        } catch where error.name == "org.freedesktop.login1.NoSessionForPID" {
            guard let display = try await displaySession(of: busName, on: logind) else { return nil }
            path = display
        } catch where Self.meansAbsent(error) {
            return nil
        }
        guard case .string(let id) = try await property("Id", of: path, interface: Self.sessionInterface, on: logind) else {
            throw .invalidArgs("logind's session \(path) has an Id that is not a string")
        }
        return LoginSession(path: path, id: id)
    }

    /// Follows the state of `session`: `onChange` runs with it as soon as it is
    /// known (before this returns, when logind answers) and then on every
    /// change, until the returned watch is cancelled or dropped. Watchers of one
    /// session share one match on the bus, removed with the last of them. While
    /// logind is away the last known state stands.
    func watch(_ session: ObjectPath, onChange: @escaping @BusActor (SessionState) -> Void) async -> SessionWatch {
        let entry: Watched
        if let existing = watched[session] {
            entry = existing
        } else {
            entry = Watched(path: session)
            watched[session] = entry
            entry.ready = Task { await self.follow(entry) }
        }
        lastWatcherID += 1
        let id = lastWatcherID
        entry.watchers[id] = Watched.Watcher(onChange: onChange)
        let watch = SessionWatch(sessions: self, session: session, id: id)
        await entry.ready?.value
        entry.tell()
        return watch
    }

    /// The last known state of `session`, if it is watched and logind answered.
    func state(of session: ObjectPath) -> SessionState? {
        watched[session]?.state
    }

    fileprivate func unwatch(_ session: ObjectPath, id: UInt64) {
        guard let entry = watched[session] else { return }
        entry.watchers[id] = nil
        guard entry.watchers.isEmpty else { return }
        watched[session] = nil
        entry.subscription?.cancel()
        entry.subscription = nil
    }

    // MARK: Internals

    private func setStatus(_ new: LogindStatus) {
        guard new != status else { return }
        status = new
        switch new {
        case .available: logger.info("logind found: following the clients' login sessions")
        case .unavailable(let why): logger.warning("logind is unavailable (\(why)): clients' login sessions are not followed")
        }
        onStatusChange?(new)
    }

    private func logindAppeared(on logind: BusConnection) async {
        await checkStatus(on: logind)
        for entry in watched.values { await follow(entry) }
    }

    /// Any property of the Manager shows that logind is there and answers.
    private func checkStatus(on logind: BusConnection) async {
        do {
            _ = try await property("IdleHint", of: Self.managerPath, interface: Self.managerInterface, on: logind)
            setStatus(.available)
        } catch {
            setStatus(.unavailable(Self.meansAbsent(error) ? "\(Self.service) is not on the bus" : "\(error)"))
        }
    }

    /// Subscribes to the session's property changes (unless subscribed) and reads its state.
    private func follow(_ entry: Watched) async {
        guard let logind else { return }
        if entry.subscription == nil {
            // Without logind followed on its bus (it could not be), nobody's changes are believed.
            guard let logindService else { return }
            let rule = "path='\(entry.path)',interface='\(Self.propertiesInterface)',member='PropertiesChanged',"
                + "arg0='\(Self.sessionInterface)'"
            do {
                let subscription = try await logindService.addMatch(rule) { [weak self, weak entry] signal in
                    guard let self, let entry else { return }
                    propertiesChanged(signal, of: entry, on: logind)
                }
                // Every watcher may have gone while the match was being installed.
                guard watched[entry.path] === entry else {
                    subscription.cancel()
                    return
                }
                entry.subscription = subscription
            } catch {
                logger.warning("cannot follow login session \(entry.path): \(error)")
                return
            }
        }
        await read(entry, on: logind)
    }

    private func read(_ entry: Watched, on logind: BusConnection) async {
        do {
            let properties = try await logind.call(
                destination: Self.service, path: entry.path, interface: Self.propertiesInterface, member: "GetAll",
                timeoutMicroseconds: Self.callTimeoutMicroseconds,
                arguments: { writer throws(DBusError) in try writer.append(Self.sessionInterface) }
            ) { reader throws(DBusError) in try reader.read([String: Variant].self) }
            guard case .bool(let active) = properties["Active"]?.value,
                  case .bool(let locked) = properties["LockedHint"]?.value else {
                throw DBusError.invalidArgs("Active and LockedHint are missing or not booleans")
            }
            entry.state = SessionState(active: active, locked: locked)
            entry.tell()
        } catch {
            logger.warning("cannot read login session \(entry.path): \(error)")
        }
    }

    private func propertiesChanged(_ signal: ReceivedSignal, of entry: Watched, on logind: BusConnection) {
        let changed: [String: Variant]
        let invalidated: [String]
        do {
            _ = try signal.arguments.read(String.self)
            changed = try signal.arguments.read([String: Variant].self)
            invalidated = try signal.arguments.read([String].self)
        } catch {
            logger.warning("ignoring a malformed PropertiesChanged of login session \(entry.path): \(error)")
            return
        }
        // A change to a state not read yet (or only named, not sent) needs the whole state.
        guard var state = entry.state, !invalidated.contains("Active"), !invalidated.contains("LockedHint") else {
            Task { await self.read(entry, on: logind) }
            return
        }
        for (name, value) in changed {
            switch (name, value.value) {
            case ("Active", .bool(let active)): state.active = active
            case ("LockedHint", .bool(let locked)): state.locked = locked
            case ("Active", _), ("LockedHint", _):
                logger.warning("ignoring login session \(entry.path)'s \(name) of type '\(value.value.signature)'")
            default: break
            }
        }
        entry.state = state
        entry.tell()
    }

    /// A method of logind's Manager that takes a pid or uid and answers an object.
    private func managerObject(_ member: String, _ id: UInt32, on logind: BusConnection) async throws(DBusError) -> ObjectPath {
        try await logind.call(
            destination: Self.service, path: Self.managerPath, interface: Self.managerInterface,
            member: member, timeoutMicroseconds: Self.callTimeoutMicroseconds,
            arguments: { writer throws(DBusError) in try writer.append(id) }
        ) { reader throws(DBusError) in try reader.read(ObjectPath.self) }
    }

    /// A process outside any session (desktops start apps as systemd user units)
    /// belongs, as sd-login's callers take it, to its user's display session.
    private func displaySession(of busName: String, on logind: BusConnection) async throws(DBusError) -> ObjectPath? {
        let uid = try await clients.unixUser(of: busName)
        let user: ObjectPath
        do {
            user = try await managerObject("GetUser", uid, on: logind)
        } catch where error.name == "org.freedesktop.login1.NoSuchUser" {
            return nil
        }
        // Display is (so): the session's id and path, with path "/" for none.
        guard case .structure(let fields) = try await property("Display", of: user, interface: Self.userInterface, on: logind),
              fields.count == 2, case .objectPath(let path) = fields[1] else {
            throw .invalidArgs("logind's user \(user) has a Display that is not (so)")
        }
        return path == .root ? nil : path
    }

    private func property(_ name: String, of path: ObjectPath, interface: String,
                          on logind: BusConnection) async throws(DBusError) -> DBusValue {
        try await logind.call(
            destination: Self.service, path: path, interface: Self.propertiesInterface, member: "Get",
            timeoutMicroseconds: Self.callTimeoutMicroseconds,
            arguments: { writer throws(DBusError) in
                try writer.append(interface)
                try writer.append(name)
            }
        ) { reader throws(DBusError) in try reader.read(Variant.self).value }
    }

    /// Whether a call failed because nobody owns logind's name.
    private static func meansAbsent(_ error: DBusError) -> Bool {
        error.name == "org.freedesktop.DBus.Error.ServiceUnknown" || error.name == "org.freedesktop.DBus.Error.NameHasNoOwner"
    }
}

/// A watcher of a login session (``LoginSessions/watch(_:onChange:)``): `cancel()`
/// or dropping it stops the calls.
@BusActor
final class SessionWatch {
    private weak var sessions: LoginSessions?
    let session: ObjectPath
    private let id: UInt64

    fileprivate init(sessions: LoginSessions, session: ObjectPath, id: UInt64) {
        self.sessions = sessions
        self.session = session
        self.id = id
    }

    func cancel() {
        sessions?.unwatch(session, id: id)
        sessions = nil
    }

    isolated deinit {
        cancel()
    }
}
