import DBus
import NearbyBusContract

/// The user's permission dialog for every app of their session: nearbyd asks
/// it whether an app without a decision may use Nearby (an exported
/// `org.nearbyd.PermissionAgent1`, registered with `RegisterPermissionAgent`).
/// nearbyd asks the agent registered from the app's login session (without
/// logind, of the app's user); the answer is kept as the user's decision for
/// the app (``AppPermission/Source/agent``).
///
/// The agent stays registered until ``unregister()`` or deallocation, and is
/// registered again when nearbyd restarts. One agent per process and bus.
public final class PermissionAgent: Sendable {
    /// One question nearbyd puts to the agent.
    public struct Request: Sendable, Equatable {
        /// The app asking.
        public var appId: String
        /// The mediums it wants (`ble`, `audio`).
        public var mediums: [String]
        /// The app's user (uid), when nearbyd said.
        public var user: UInt32?
        /// The app's process, when known.
        public var processId: UInt32?
        /// The app's unique bus name, when nearbyd said.
        public var client: String?
        /// Why the app uses the microphone and Bluetooth, as it said.
        public var usageDescriptions: UsageDescriptions

        public init(appId: String, mediums: [String], user: UInt32? = nil, processId: UInt32? = nil, client: String? = nil,
                    usageDescriptions: UsageDescriptions = UsageDescriptions()) {
            self.appId = appId
            self.mediums = mediums
            self.user = user
            self.processId = processId
            self.client = client
            self.usageDescriptions = usageDescriptions
        }

        /// From RequestPermission's arguments.
        init(appId: String, mediums: [String], details: [String: DBusValue]) {
            typealias Key = NearbyBusContract.PermissionDetailKey
            self.init(appId: appId, mediums: mediums, user: details[Key.user.name]?.uint32,
                      processId: details[Key.processId.name]?.uint32, client: details[Key.client.name]?.string,
                      usageDescriptions: UsageDescriptions(microphone: details[Key.microphoneUsageDescription.name]?.string,
                                                           bluetooth: details[Key.bluetoothUsageDescription.name]?.string))
        }
    }

    /// The agent's object on this process's connection.
    public var path: ObjectPath { registration.callee.path }
    private let registration: AgentRegistration

    /// Exports the agent and registers it with the nearbyd on `bus`. `answer`
    /// gets one request at a time, in the order nearbyd sent them, and returns
    /// true to allow the app. nearbyd waits a limited time: a request answered
    /// after that counts as denied for that one request (and is not kept).
    /// `registeredAgain` runs (on the bus thread) each time the agent is
    /// registered with a restarted nearbyd.
    public init(bus address: BusAddress = .system, registeredAgain: @escaping @Sendable () -> Void = {},
                answer: @escaping @Sendable (Request) async -> Bool) async throws {
        let bus = try await NearbyBus.shared(address)
        registration = try await AgentRegistration.start(on: bus, registeredAgain: registeredAgain, answer: answer)
    }

    deinit {
        Task { @BusActor [registration] in registration.end(unregistering: true) }
    }

    /// Unregisters the agent and takes it off the bus; nearbyd decides by its
    /// default policy from now on, unless another agent is registered.
    public func unregister() async throws {
        try await registration.unregister()
    }
}

/// A registered agent: its object, and the watch that registers it again when
/// nearbyd restarts (a new nearbyd knows no agents).
@BusActor
private final class AgentRegistration {
    let callee: DaemonCallee<PermissionAgent.Request>
    private let bus: NearbyBus
    /// Follows nearbyd's name to the next nearbyd (as the bus says, never a forger).
    private var daemonRestarts: OwnerObservation?
    private var ended = false

    private init(bus: NearbyBus, callee: DaemonCallee<PermissionAgent.Request>) {
        self.bus = bus
        self.callee = callee
    }

    static func start(on bus: NearbyBus, registeredAgain: @escaping @Sendable () -> Void,
                      answer: @escaping @Sendable (PermissionAgent.Request) async -> Bool) async throws -> AgentRegistration {
        let registration = AgentRegistration(bus: bus, callee: DaemonCallee(bus: bus, kind: "permission_agent", answer: answer))
        do {
            try registration.callee.export(CalleeInterfaces.agent)
            registration.daemonRestarts = bus.nearbyd.onOwnerChange { [weak registration] owner in
                guard owner != nil, let registration else { return }
                Task {
                    // A failure leaves nothing to do: a later nearbyd brings a later try.
                    guard (try? await registration.register()) != nil else { return }
                    registeredAgain()
                }
            }
            try await registration.register()
        } catch let error as DBusError {
            registration.end(unregistering: false)
            throw NearbyMessagesError(error)
        } catch {
            registration.end(unregistering: false)
            throw error
        }
        return registration
    }

    func register() async throws {
        try await bus.call(RootPath.manager, NearbyBusContract.nearby.name, NearbyBusContract.Nearby1.registerPermissionAgent.name) {
            [path = callee.path] writer throws(DBusError) in
            try writer.append(path)
        } decode: { _ throws(DBusError) in () }
    }

    func unregister() async throws {
        defer { end(unregistering: false) }
        try await bus.call(RootPath.manager, NearbyBusContract.nearby.name, NearbyBusContract.Nearby1.unregisterPermissionAgent.name) {
            [path = callee.path] writer throws(DBusError) in
            try writer.append(path)
        } decode: { _ throws(DBusError) in () }
    }

    /// Stops answering; with `unregistering`, tells nearbyd without waiting.
    func end(unregistering: Bool) {
        guard !ended else { return }
        ended = true
        daemonRestarts = nil
        callee.unexport()
        guard unregistering else { return }
        bus.sendAndForget(RootPath.manager, NearbyBusContract.nearby.name, NearbyBusContract.Nearby1.unregisterPermissionAgent.name) {
            [path = callee.path] writer throws(DBusError) in
            try writer.append(path)
        }
    }
}
