import DBus
import Foundation
import Logging
import NearbyBusContract
import NearbyCore

/// Whether an app may use Nearby, and asking when nobody has decided: the
/// app's own dialog (`PermissionRequest1`) if the request names one, else the
/// permission agent of the caller's login session (`PermissionAgent1`), else
/// the configured default policy. Decisions are kept per (uid, AppId).
@BusActor
final class PermissionBroker {
    /// Who is asking, and what to show the person who decides.
    struct Request {
        let key: PermissionKey
        let mediums: Set<Medium>
        /// The app's own dialog, an object on its connection.
        let handler: ObjectPath?
        let caller: Caller
        /// The app's usage descriptions, by details key (`MicrophoneUsageDescription`…).
        let descriptions: [String: String]
    }

    /// A connection on the bus, as far as the daemon knows it.
    struct Caller: Sendable {
        let busName: String
        let uid: UInt32
        let pid: UInt32?
        /// The logind session object path, where logind knows one.
        let session: ObjectPath?
        /// The app the system says the caller is (Flatpak, systemd app unit), if any.
        var app: RealApp? = nil
    }

    private struct Agent {
        let path: ObjectPath
        let caller: Caller
        /// Registration order: the latest of several candidates is asked.
        let number: UInt64
    }

    private var store: PermissionStore
    private let files = StateFile.Writer()
    /// Decisions in force and not yet on disk, with what the file holds for
    /// each: put back if the write fails.
    private var unwritten: [PermissionKey: PermissionDecision?] = [:]
    /// Those waiting for the decisions in force to be on disk.
    private var waitingForDisk: [CheckedContinuation<NearbyError?, Never>] = []
    private var writing = false
    private let connection: BusConnection
    private let policy: DaemonConfiguration.PermissionPolicy
    private let timeout: Duration
    private let logger: Logger
    /// Registered agents, by the bus name that registered them.
    private var agents: [String: Agent] = [:]
    private var agentsRegistered: UInt64 = 0
    /// Questions on their way: later requests for the same app wait for the same answer.
    private var asking: [PermissionKey: Task<Void, any Error>] = [:]
    /// When decisions are made.
    private let clock: any WallClock
    /// Called after a decision changes, so the app's managers hear of it.
    var decisionChanged: (PermissionKey) -> Void = { _ in }

    init(configuration: DaemonConfiguration, connection: BusConnection, clock: any WallClock, logger: Logger) {
        store = PermissionStore(stateDirectory: configuration.stateDirectory, maxDecisionsPerUser: configuration.maxDecisionsPerUser,
                                maxDecisions: configuration.maxDecisions, logger: logger)
        self.connection = connection
        self.clock = clock
        policy = configuration.permissionPolicy
        timeout = .milliseconds(Int64(configuration.permissionTimeout * 1000))
        self.logger = logger
    }

    func decision(for key: PermissionKey) -> PermissionDecision? {
        store.decision(for: key)
    }

    func isGranted(_ key: PermissionKey) -> Bool {
        store.decision(for: key)?.granted ?? false
    }

    /// Every decision of `uid`, or of everyone for nil, by user and app.
    func decisions(of uid: UInt32?) -> [(key: PermissionKey, decision: PermissionDecision)] {
        store.decisions.filter { uid == nil || $0.key.uid == uid }
            .map { (key: $0.key, decision: $0.value) }
            .sorted { ($0.key.uid, $0.key.appId) < ($1.key.uid, $1.key.appId) }
    }

    /// Records a decision and returns once it is on disk. It is in force at
    /// once (the app's managers hear of it when it changes whether the app may
    /// run); `Failed` when the file cannot take it, and then it is undone.
    func decide(_ key: PermissionKey, granted: Bool, by source: DecisionSource) async throws(NearbyError) {
        try record(key, granted: granted, by: source)
        if let error = await withCheckedContinuation({ waitingForDisk.append($0) }) { throw error }
    }

    /// Puts a decision in force at once and writes it soon after, for the
    /// `PermissionGranted` setter, which must answer before anything is
    /// written. Should the write fail, it is undone (and logged).
    func record(_ key: PermissionKey, granted: Bool, by source: DecisionSource) throws(NearbyError) {
        let before = isGranted(key)
        // The store's unit, and `DecidedAt`'s, is the microsecond.
        let previous = try store.record(PermissionDecision(granted: granted, decidedBy: source, decidedAt: clock.nowMs * 1000),
                                        for: key)
        if unwritten[key] == nil { unwritten[key] = .some(previous) }
        logger.notice("permission \(granted ? "granted" : "denied")",
                      metadata: ["user": "\(key.uid)", "app": "\(key.appId)", "by": "\(source.rawValue)"])
        if before != granted || previous == nil { decisionChanged(key) }
        writeSoon()
    }

    /// Writes what is in force, on the writer's thread: every decision made
    /// while a write is on its way goes in the next one, so a flood of
    /// decisions costs one write at a time and never the bus thread.
    private func writeSoon() {
        guard !writing else { return }
        writing = true
        Task { @BusActor in
            while !unwritten.isEmpty {
                let batch = unwritten
                let waiting = waitingForDisk
                unwritten.removeAll()
                waitingForDisk.removeAll()
                var failure: NearbyError?
                do {
                    try await files.replace(store.path, with: try store.contents())
                } catch {
                    failure = .failed("cannot store the permission decision in \(store.path): \(error)")
                    logger.error("cannot write the permission decisions; the last ones are undone", metadata: ["error": "\(error)"])
                    undo(batch)
                }
                for waiter in waiting { waiter.resume(returning: failure) }
            }
            writing = false
        }
    }

    /// Puts back what the file holds for decisions it could not take. One
    /// decided again meanwhile stays in force, and its next write is undone
    /// to the file's value too.
    private func undo(_ batch: [PermissionKey: PermissionDecision?]) {
        for (key, onDisk) in batch {
            if unwritten[key] != nil {
                unwritten[key] = .some(onDisk)
                continue
            }
            let before = isGranted(key)
            store.restore(onDisk, for: key)
            if before != isGranted(key) || onDisk == nil { decisionChanged(key) }
        }
    }

    /// Returns when the app may use Nearby; asks when nobody has decided.
    /// NotPermitted when it is denied, now or by an earlier decision, or when
    /// nobody answers in time (a timeout is not recorded: the next call asks again).
    func authorize(_ request: Request) async throws(NearbyError) {
        if let decision = store.decision(for: request.key) {
            guard decision.granted else { throw Self.denied(request.key, decision) }
            return
        }
        let task: Task<Void, any Error>
        if let running = asking[request.key] {
            task = running
        } else {
            task = Task { @BusActor in try await self.ask(request) }
            asking[request.key] = task
        }
        do {
            try await task.value
        } catch let error as NearbyError {
            throw error
        } catch {
            throw .failed("\(error)")
        }
    }

    private func ask(_ request: Request) async throws(NearbyError) {
        defer { asking[request.key] = nil }
        let mediums = request.mediums.map(\.rawValue).sorted()
        let answer: Bool
        let source: DecisionSource
        if let handler = request.handler {
            source = .app
            answer = try await call(request.caller.busName, handler, NearbyBusContract.permissionRequest.name,
                                    NearbyBusContract.PermissionRequest1.request.name,
                                    what: "the app's permission dialog") { writer throws(DBusError) in
                try writer.append(mediums)
            }
        } else if let agent = agent(for: request.caller) {
            source = .agent
            typealias Key = NearbyBusContract.PermissionDetailKey
            var details: [String: DBusValue] = [
                Key.user.name: .uint32(request.caller.uid), Key.client.name: .string(request.caller.busName),
            ]
            if let pid = request.caller.pid { details[Key.processId.name] = .uint32(pid) }
            for (key, text) in request.descriptions { details[key] = .string(text) }
            answer = try await call(agent.caller.busName, agent.path, NearbyBusContract.permissionAgent.name,
                                    NearbyBusContract.PermissionAgent1.requestPermission.name,
                                    what: "the permission agent") { writer throws(DBusError) in
                try writer.append(request.key.appId)
                try writer.append(mediums)
                try writer.append(DBusValue.vardict(details))
            }
        } else {
            switch policy {
            case .ask:
                throw .notPermitted("nobody to ask whether app '\(request.key.appId)' may use Nearby: no permission agent is "
                    + "registered for the caller's session; run one (nearbyctl agent) or grant it (nearbyctl permission grant)")
            case .grant:
                (answer, source) = (true, .policy)
            case .deny:
                (answer, source) = (false, .policy)
            }
        }
        try await decide(request.key, granted: answer, by: source)
        if !answer, let decision = store.decision(for: request.key) { throw Self.denied(request.key, decision) }
    }

    /// Calls a dialog and reads its yes or no. An error or no answer within the
    /// timeout is NotPermitted for this request.
    private func call(_ destination: String, _ path: ObjectPath, _ interface: String, _ member: String, what: String,
                      arguments: @BusActor (MessageWriter) throws(DBusError) -> Void) async throws(NearbyError) -> Bool {
        do {
            return try await connection.call(destination: destination, path: path, interface: interface, member: member,
                                             timeoutMicroseconds: UInt64(timeout / .microseconds(1)),
                                             arguments: arguments) { reader throws(DBusError) in try reader.read(Bool.self) }
        } catch {
            let timedOut = ["org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout"].contains(error.name)
            logger.warning("\(what) did not answer", metadata: ["path": "\(path)", "error": "\(error.name)"])
            throw .notPermitted(timedOut ? "\(what) did not answer within \(timeout); counted as a deny"
                : "\(what) failed (\(error.name): \(error.message)); counted as a deny")
        }
    }

    private static func denied(_ key: PermissionKey, _ decision: PermissionDecision) -> NearbyError {
        .notPermitted("user \(key.uid) has not allowed app '\(key.appId)' to use Nearby (decided by \(decision.decidedBy.rawValue))")
    }

    // MARK: Agents

    /// An agent answers for every app of its user in its session, so it must
    /// be the user's own program: a sandboxed app may not be one (it would be
    /// handed the other apps' requests and answer for them).
    func registerAgent(_ path: ObjectPath, for caller: Caller) throws(NearbyError) {
        if let app = caller.app, app.kind == .flatpak {
            throw .accessDenied("the sandboxed app '\(app.id)' cannot be a permission agent: an agent answers for its user's "
                + "other apps, so it must run outside any app sandbox (nearbyctl agent, or the desktop's own)")
        }
        guard agents[caller.busName] == nil else { throw .invalidArguments("this connection already registered an agent") }
        agentsRegistered += 1
        agents[caller.busName] = Agent(path: path, caller: caller, number: agentsRegistered)
        logger.info("permission agent registered", metadata: ["client": "\(caller.busName)", "user": "\(caller.uid)"])
    }

    func unregisterAgent(_ path: ObjectPath, for busName: String) throws(NearbyError) {
        guard agents[busName]?.path == path else { throw .doesNotExist("no agent \(path) is registered by this connection") }
        agents.removeValue(forKey: busName)
    }

    /// The connection left the bus: its agent goes with it.
    func connectionLeft(_ busName: String) {
        agents.removeValue(forKey: busName)
    }

    /// An agent of the caller's own user, never another uid's, even in the
    /// same login session (su, sudo: the decision is recorded under the
    /// caller's uid, which the agent's user does not speak for). Where logind
    /// knows a session for both, it must be the same one. An agent in the
    /// caller's session goes before one logind knows no session for; of
    /// those alike, the latest registered.
    private func agent(for caller: Caller) -> Agent? {
        func sameSession(_ agent: Agent) -> Int { caller.session != nil && agent.caller.session == caller.session ? 1 : 0 }
        return agents.values.filter { agent in
            guard agent.caller.uid == caller.uid else { return false }
            if let session = caller.session, let agentSession = agent.caller.session { return session == agentSession }
            return true
        }.max { (sameSession($0), $0.number) < (sameSession($1), $1.number) }
    }
}

/// The decisions a caller of `GetPermission`, `SetPermission` or
/// `ListPermissions` reaches. A sandboxed app (a Flatpak: nearbyd reads its
/// control group) reaches its own app's decision alone, as its own dialog and
/// its managers' `PermissionGranted` do: which other apps its user allowed is
/// not its business, and deciding for them would be speaking for them.
struct PermissionReach: Sendable {
    /// The user whose decisions: nil for every user's (root listing).
    let uid: UInt32?
    /// The caller's own AppId, when it is a sandboxed app.
    let onlyApp: String?

    /// The key of `appId`'s decision, or AccessDenied when it is out of reach.
    func key(_ appId: String) throws(NearbyError) -> PermissionKey {
        if let onlyApp, appId != onlyApp {
            throw .accessDenied("the sandboxed app '\(onlyApp)' may see and change its own permission decision only, "
                + "not that of '\(appId)'")
        }
        return PermissionKey(uid: uid ?? 0, appId: appId)
    }

    /// Whether a decision is in reach, for a listing.
    func reaches(_ key: PermissionKey) -> Bool {
        onlyApp.map { key.appId == $0 } ?? true
    }
}
