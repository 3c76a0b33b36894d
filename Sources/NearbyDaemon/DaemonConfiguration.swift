import AudioModem
import BluetoothHCI
import ConfigFile
import DaemonCore
import DBus
import Foundation
import Logging
import Mediums
import NearbyAir
import NearbyCore
import Upstream

/// Everything nearbyd can be told, from /etc/nearbyd/nearbyd.conf and then its
/// command line. doc/configuration.md describes each key.
public struct DaemonConfiguration: Sendable {
    public static let defaultPath = "/etc/nearbyd/nearbyd.conf"

    /// Which backend drives a medium.
    public enum Backend: String, Sendable, CaseIterable {
        /// The medium is disabled: asking for it is NotSupported.
        case off
        /// The antenna or speaker is nearby-air's simulated space.
        case sim
        /// BLE through bluetoothd on the system bus.
        case bluez
        /// BLE through a raw HCI socket, for hosts without bluetoothd.
        case hci
        /// Audio through libasound.
        case alsa
    }

    /// `[daemon] bus`: system, session, or a D-Bus address.
    public var bus: BusConnection.Address = .system
    /// `[daemon] state-directory`: device credentials and other state that outlives a restart.
    public var stateDirectory = "/var/lib/nearbyd"
    /// `[daemon] log-level`.
    public var logLevel: Logger.Level = .info
    /// `[daemon] registration-retention-days`: a device registration with
    /// nearby-server not used this long is dropped (and the server told).
    public var registrationRetentionDays = 90.0
    /// `[limits] max-registrations-per-user`, `max-registrations`: device
    /// registrations kept, the least recently used dropped beyond them.
    public var maxRegistrationsPerUser = 32
    public var maxRegistrations = 4096
    /// `[daemon] logind-bus`: where logind is (the system bus but in tests); nil
    /// (`"none"`) when login sessions are not followed.
    public var logindBus: BusConnection.Address? = .system

    /// What answers a permission request that nobody can be asked about.
    public enum PermissionPolicy: String, Sendable, CaseIterable {
        /// Refuse the call (NotPermitted) without recording a decision: the next call asks again.
        case ask
        /// Grant, and record it as the policy's decision.
        case grant
        /// Deny, and record it as the policy's decision.
        case deny
    }

    /// `[permissions] default-policy`.
    public var permissionPolicy = PermissionPolicy.ask
    /// `[permissions] request-timeout`, seconds: how long an agent or an app's
    /// handler has to answer; no answer is a deny.
    public var permissionTimeout = 60.0
    /// `[permissions] max-decisions-per-user`.
    public var maxDecisionsPerUser = 1000
    /// `[permissions] max-decisions`: of all users.
    public var maxDecisions = 100_000

    /// `[publications] directory`: static publications, published from start-up.
    public var staticPublicationsDirectory = "/etc/nearbyd/publications.d"
    /// `[publications] max-files`.
    public var maxStaticPublications = 64

    /// `[server] url`: base URLs of nearby-server, replicas of one service,
    /// tried in this order (``maxServerURLs`` at most).
    public var serverURLs = ["http://127.0.0.1:8080"]
    /// The most URLs `[server] url` may list: enough for any set of replicas,
    /// few enough that a round of them all stays short.
    public static let maxServerURLs = 16
    /// `[server] ca-file`: PEM file of the CAs an `https://` server's
    /// certificate must chain to, in place of the system's CA store.
    public var serverCAFile: String?
    /// `[server] reconnect-initial-delay` and `reconnect-max-delay`, seconds: the
    /// backoff after the server cannot be reached doubles from the first to the second.
    public var reconnectInitialDelay = 0.2
    public var reconnectMaxDelay = 30.0
    /// `[server] request-timeout`, seconds.
    public var requestTimeout = 10.0
    /// `[server] refused-key-retry`, seconds: how long an API key the server
    /// refused is not offered to it again.
    public var refusedKeyRetry = 600.0
    /// `[server] refused-change-retry`, seconds: how long a publication or
    /// subscription the server refused (its limits were reached) waits before
    /// it is offered again.
    public var refusedChangeRetry = 30.0
    /// `[server] batch-delay`, seconds: how long publication and subscription
    /// changes wait for more before going to the server together. What is made
    /// and ended within it never reaches the server at all.
    public var batchDelay = 0.01

    /// `[discovery] lost-timeout`, seconds: a device not heard for this long is gone.
    public var lostTimeout = 3.0
    /// `[discovery] refresh-interval`, seconds: how often a token still heard is
    /// reported again (the server drops sightings it is not told of for 30 s).
    public var refreshInterval = 10.0

    /// `[limits]`.
    public var limits = RegistryLimits()
    /// `[limits] oversized-call-share`: the share of the bus thread's time that
    /// reading oversized calls (several MiB each) may take; beyond it they are
    /// refused, and the refusals held back (``OversizedCallBudget``).
    public var oversizedCallShare = 0.02

    /// `[ble] backend` and `tx-power` (dBm at one metre).
    public var ble = Backend.bluez
    public var bleTxPower = -59
    /// `[ble] adapter`: the controller (`hci0`); nil for BlueZ's first powered
    /// one, or hci0 for the HCI backend.
    public var bleAdapter: String?
    /// `[ble] hci-channel`: how the HCI backend reaches its controller.
    public var hciChannel = HCIMedium.Channel.raw
    /// `[ble] bluez-bus`: where bluetoothd is (the system bus but in tests).
    public var bluezBus: BusConnection.Address = .system
    /// `[audio] backend`: off by default, so the microphone is opened only
    /// where the administrator asked for it.
    public var audio = Backend.off
    /// `[audio] capture-pcm`, `playback-pcm`: ALSA PCM names.
    public var capturePCM = "default"
    public var playbackPCM = "default"
    /// `[audio] alsa-config`: an ALSA configuration file read over the system's.
    public var alsaConfig: String?
    /// `[audio] volume`, dBFS: the peak level of a burst.
    public var audioVolume = -6.0
    /// `[audio] reference-level`, dBFS: how loud a burst at `volume` is heard
    /// from one metre, for distance estimates.
    public var audioReferenceLevel = -6.0
    /// `[audio] interval`, seconds: mean time between bursts.
    public var audioInterval = 2.0
    /// `[audio] lost-timeout`, seconds: a device not heard over audio for this
    /// long is gone (several intervals: bursts may collide).
    public var audioLostTimeout = 8.0
    /// `[audio] threshold`: the modem's detection threshold.
    public var audioThreshold = TokenDemodulator.defaultThreshold

    /// `[beacons] lost-timeout`, seconds: a beacon not heard for this long is gone.
    public var beaconLostTimeout = 10.0
    /// `[beacons] cache-ttl`, seconds: how long the server's answer about a
    /// beacon's attachments is kept before it is asked again.
    public var beaconCacheTTL = 300.0
    /// `[beacons] signal-interval`, seconds: at most one `DistanceChanged` and
    /// one `BleSignalChanged` per message per interval.
    public var beaconSignalInterval = 1.0
    /// `[beacons] max-beacons`: beacons tracked at once; more are ignored.
    public var maxBeacons = 1024

    /// `[upstream] max-pending`: upstream messages one app may have waiting.
    public var maxPendingUpstream = 1000
    /// `[upstream] max-per-user`: messages and untold verdicts one user's apps may keep in all.
    public var maxUpstreamPerUser = 5000
    /// `[upstream] max-total`: messages and untold verdicts of every user.
    public var maxUpstreamTotal = 50_000
    /// `[upstream] verdict-retention-days`: how long a verdict waits for its app to come back.
    public var verdictRetentionDays = 7.0

    /// `[sim] air-socket`, `device`, `position`: how the daemon appears in nearby-air.
    public var airSocket = AirSocket.defaultPath()
    public var simDevice = ProcessInfo.processInfo.hostName
    public var simPosition = Position(x: 0, y: 0)

    public init() {}

    /// How many device registrations are kept, and for how long unused.
    var registrationLimits: CredentialStore.Limits {
        CredentialStore.Limits(perUser: maxRegistrationsPerUser, total: maxRegistrations,
                               retention: .milliseconds(Int64(registrationRetentionDays * 86_400_000)))
    }

    /// What the upstream outbox keeps, per app, per user and in all, and for how long.
    public var outboxLimits: Outbox.Limits {
        Outbox.Limits(pendingPerApp: maxPendingUpstream, rowsPerUser: maxUpstreamPerUser, rows: maxUpstreamTotal,
                      retentionMs: UInt64(verdictRetentionDays * 86_400_000))
    }

    /// The mediums whose backend is not `off`.
    public var enabledMediums: Set<Medium> {
        var mediums: Set<Medium> = []
        if ble != .off { mediums.insert(.ble) }
        if audio != .off { mediums.insert(.audio) }
        return mediums
    }

    /// Reads a configuration file over the defaults. With `validating` false
    /// the values are checked one by one but not against each other, for a
    /// caller that overrides some (nearbyd's options) and then calls
    /// `validate()` itself: a file's `ca-file` is for the `--server` URLs given.
    public static func load(path: String, required: Bool, validating: Bool = true) throws(ConfigurationError) -> DaemonConfiguration {
        try DaemonConfiguration().applying(ConfigFile(path: path, required: required), validating: validating)
    }

    /// These settings overridden by what `file` sets; `validating` as for `load`.
    public func applying(_ file: ConfigFile, validating: Bool = true) throws(ConfigurationError) -> DaemonConfiguration {
        var result = self
        try file.checkSections(["daemon", "permissions", "publications", "server", "discovery", "limits", "ble", "audio", "beacons", "upstream", "sim"])

        let daemon = try file.section("daemon", keys: ["bus", "state-directory", "log-level", "logind-bus",
                                                       "registration-retention-days"])
        if let days = try daemon.number("registration-retention-days") { result.registrationRetentionDays = days }
        if let bus = try daemon.string("bus") { result.bus = Self.busAddress(bus) }
        if let bus = try daemon.string("logind-bus") { result.logindBus = bus == "none" ? nil : Self.busAddress(bus) }
        if let directory = try daemon.string("state-directory") { result.stateDirectory = directory }
        if let level = try daemon.string("log-level") {
            guard let parsed = Logger.Level(rawValue: level) else {
                throw daemon.invalid("log-level", "must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            result.logLevel = parsed
        }

        let permissions = try file.section("permissions", keys: ["default-policy", "request-timeout", "max-decisions-per-user",
                                                                 "max-decisions"])
        if let policy = try permissions.string("default-policy") {
            guard let parsed = PermissionPolicy(rawValue: policy) else {
                throw permissions.invalid("default-policy", "must be one of \(PermissionPolicy.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            result.permissionPolicy = parsed
        }
        if let timeout = try permissions.number("request-timeout") { result.permissionTimeout = timeout }
        if let count = try permissions.integer("max-decisions-per-user") { result.maxDecisionsPerUser = count }
        if let count = try permissions.integer("max-decisions") { result.maxDecisions = count }
        if try permissions.integer("max-decisions-per-user") == nil {
            result.maxDecisionsPerUser = min(result.maxDecisionsPerUser, result.maxDecisions)
        }

        let publications = try file.section("publications", keys: ["directory", "max-files"])
        if let directory = try publications.string("directory") { result.staticPublicationsDirectory = directory }
        if let count = try publications.integer("max-files") { result.maxStaticPublications = count }

        let server = try file.section("server", keys: ["url", "ca-file", "reconnect-initial-delay", "reconnect-max-delay", "request-timeout",
                                                       "batch-delay", "refused-key-retry", "refused-change-retry"])
        if let delay = try server.number("refused-key-retry") { result.refusedKeyRetry = delay }
        if let delay = try server.number("refused-change-retry") { result.refusedChangeRetry = delay }
        if let urls = try server.stringOrStrings("url") { result.serverURLs = urls }
        if let path = try server.string("ca-file") { result.serverCAFile = path }
        if let delay = try server.number("reconnect-initial-delay") { result.reconnectInitialDelay = delay }
        if let delay = try server.number("reconnect-max-delay") { result.reconnectMaxDelay = delay }
        if let timeout = try server.number("request-timeout") { result.requestTimeout = timeout }
        if let delay = try server.number("batch-delay") { result.batchDelay = delay }

        let discovery = try file.section("discovery", keys: ["lost-timeout", "refresh-interval"])
        if let timeout = try discovery.number("lost-timeout") { result.lostTimeout = timeout }
        if let interval = try discovery.number("refresh-interval") { result.refreshInterval = interval }

        let limits = try file.section("limits", keys: [
            "max-clients-per-user", "max-clients", "max-managers-per-client", "max-managers-per-user", "max-api-keys-per-user",
            "max-objects-per-manager", "max-objects-per-user", "max-objects", "max-registrations-per-user", "max-registrations",
            "oversized-call-share",
        ])
        if let value = try limits.number("oversized-call-share") { result.oversizedCallShare = value }
        if let value = try limits.integer("max-registrations-per-user") { result.maxRegistrationsPerUser = value }
        if let value = try limits.integer("max-registrations") { result.maxRegistrations = value }
        if try limits.integer("max-registrations-per-user") == nil {
            result.maxRegistrationsPerUser = min(result.maxRegistrationsPerUser, result.maxRegistrations)
        }
        if let value = try limits.integer("max-clients-per-user") { result.limits.maxClientsPerUser = value }
        if let value = try limits.integer("max-clients") { result.limits.maxClients = value }
        if let value = try limits.integer("max-managers-per-client") { result.limits.maxManagersPerClient = value }
        if let value = try limits.integer("max-managers-per-user") { result.limits.maxManagersPerUser = value }
        if let value = try limits.integer("max-api-keys-per-user") { result.limits.maxAPIKeysPerUser = value }
        if let value = try limits.integer("max-objects-per-manager") { result.limits.maxObjectsPerManager = value }
        if let value = try limits.integer("max-objects-per-user") { result.limits.maxObjectsPerUser = value }
        if let value = try limits.integer("max-objects") { result.limits.maxObjects = value }
        // A per-user limit left out follows the daemon-wide one it must fit in.
        if try limits.integer("max-clients-per-user") == nil {
            result.limits.maxClientsPerUser = min(result.limits.maxClientsPerUser, result.limits.maxClients)
        }
        if try limits.integer("max-managers-per-user") == nil {
            result.limits.maxManagersPerUser = max(result.limits.maxManagersPerUser, result.limits.maxManagersPerClient)
        }
        if try limits.integer("max-objects-per-user") == nil {
            result.limits.maxObjectsPerUser = min(result.limits.maxObjectsPerUser, result.limits.maxObjects)
        }
        if try limits.integer("max-objects-per-manager") == nil {
            result.limits.maxObjectsPerManager = min(result.limits.maxObjectsPerManager, result.limits.maxObjectsPerUser)
        }

        let ble = try file.section("ble", keys: ["backend", "tx-power", "adapter", "bluez-bus", "hci-channel"])
        if let backend = try ble.string("backend") { result.ble = try Self.backend(backend, of: [.off, .sim, .bluez, .hci], in: ble) }
        if let power = try ble.integer("tx-power") { result.bleTxPower = power }
        if let adapter = try ble.string("adapter") {
            guard Self.isAdapterName(adapter) else { throw ble.invalid("adapter", "must be an adapter name such as hci0") }
            result.bleAdapter = adapter
        }
        if let bus = try ble.string("bluez-bus") { result.bluezBus = Self.busAddress(bus) }
        if let channel = try ble.string("hci-channel") {
            guard let parsed = HCIMedium.Channel(rawValue: channel) else {
                throw ble.invalid("hci-channel", "must be one of \(HCIMedium.Channel.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            result.hciChannel = parsed
        }

        let audio = try file.section("audio", keys: ["backend", "capture-pcm", "playback-pcm", "alsa-config", "volume",
                                                     "reference-level", "interval", "lost-timeout", "threshold"])
        if let backend = try audio.string("backend") { result.audio = try Self.backend(backend, of: [.off, .sim, .alsa], in: audio) }
        if let pcm = try audio.string("capture-pcm") { result.capturePCM = pcm }
        if let pcm = try audio.string("playback-pcm") { result.playbackPCM = pcm }
        if let path = try audio.string("alsa-config") { result.alsaConfig = path }
        if let volume = try audio.number("volume") { result.audioVolume = volume }
        if let level = try audio.number("reference-level") { result.audioReferenceLevel = level }
        if let interval = try audio.number("interval") { result.audioInterval = interval }
        if let timeout = try audio.number("lost-timeout") { result.audioLostTimeout = timeout }
        if let threshold = try audio.number("threshold") { result.audioThreshold = threshold }

        let beacons = try file.section("beacons", keys: ["lost-timeout", "cache-ttl", "signal-interval", "max-beacons"])
        if let timeout = try beacons.number("lost-timeout") { result.beaconLostTimeout = timeout }
        if let ttl = try beacons.number("cache-ttl") { result.beaconCacheTTL = ttl }
        if let interval = try beacons.number("signal-interval") { result.beaconSignalInterval = interval }
        if let count = try beacons.integer("max-beacons") { result.maxBeacons = count }

        let upstream = try file.section("upstream", keys: ["max-pending", "max-per-user", "max-total", "verdict-retention-days"])
        if let count = try upstream.integer("max-pending") { result.maxPendingUpstream = count }
        if let count = try upstream.integer("max-per-user") { result.maxUpstreamPerUser = count }
        if let count = try upstream.integer("max-total") { result.maxUpstreamTotal = count }
        if let days = try upstream.number("verdict-retention-days") { result.verdictRetentionDays = days }
        if try upstream.integer("max-per-user") == nil {
            result.maxUpstreamPerUser = min(result.maxUpstreamPerUser, result.maxUpstreamTotal)
        }
        if try upstream.integer("max-pending") == nil {
            result.maxPendingUpstream = min(result.maxPendingUpstream, result.maxUpstreamPerUser)
        }

        let sim = try file.section("sim", keys: ["air-socket", "device", "position"])
        if let socket = try sim.string("air-socket") { result.airSocket = socket }
        if let device = try sim.string("device") { result.simDevice = device }
        if let position = try sim.numbers("position") {
            guard let parsed = Self.position(position) else { throw sim.invalid("position", "must be [x, y] or [x, y, z] in metres") }
            result.simPosition = parsed
        }

        guard validating else { return result }
        do {
            try result.validate()
        } catch {
            throw ConfigurationError("\(file.source): \(error.message)")
        }
        return result
    }

    /// Checks every value against its range and the values against each other.
    public func validate() throws(ConfigurationError) {
        guard !stateDirectory.isEmpty else { throw ConfigurationError("[daemon] state-directory must not be empty") }
        try validateServerURLs()
        try Self.check(permissionTimeout, in: 0.1...3600, "[permissions] request-timeout")
        try Self.check(Double(maxDecisions), in: 1...10_000_000, "[permissions] max-decisions")
        try Self.check(Double(maxDecisionsPerUser), in: 1...Double(maxDecisions), "[permissions] max-decisions-per-user")
        try Self.check(Double(maxStaticPublications), in: 0...10_000, "[publications] max-files")
        try Self.check(reconnectInitialDelay, in: 0.01...60, "[server] reconnect-initial-delay")
        try Self.check(reconnectMaxDelay, in: reconnectInitialDelay...3600, "[server] reconnect-max-delay")
        try Self.check(requestTimeout, in: 0.1...300, "[server] request-timeout")
        try Self.check(batchDelay, in: 0...1, "[server] batch-delay")
        try Self.check(refusedKeyRetry, in: 1...86_400, "[server] refused-key-retry")
        try Self.check(refusedChangeRetry, in: 0.1...3600, "[server] refused-change-retry")
        try Self.check(lostTimeout, in: 0.2...600, "[discovery] lost-timeout")
        try Self.check(refreshInterval, in: 0.1...25, "[discovery] refresh-interval")
        try Self.check(Double(limits.maxClients), in: 1...100_000, "[limits] max-clients")
        try Self.check(oversizedCallShare, in: 0.001...1, "[limits] oversized-call-share")
        try Self.check(Double(limits.maxClientsPerUser), in: 1...Double(limits.maxClients), "[limits] max-clients-per-user")
        try Self.check(Double(limits.maxManagersPerClient), in: 1...10_000, "[limits] max-managers-per-client")
        try Self.check(Double(limits.maxManagersPerUser), in: Double(limits.maxManagersPerClient)...1_000_000,
                       "[limits] max-managers-per-user")
        try Self.check(Double(limits.maxAPIKeysPerUser), in: 1...1000, "[limits] max-api-keys-per-user")
        try Self.check(Double(maxRegistrations), in: 1...1_000_000, "[limits] max-registrations")
        try Self.check(Double(maxRegistrationsPerUser), in: 1...Double(maxRegistrations), "[limits] max-registrations-per-user")
        try Self.check(registrationRetentionDays, in: 0.01...3650, "[daemon] registration-retention-days")
        try Self.check(Double(limits.maxObjects), in: 1...10_000_000, "[limits] max-objects")
        try Self.check(Double(limits.maxObjectsPerUser), in: 1...Double(limits.maxObjects), "[limits] max-objects-per-user")
        try Self.check(Double(limits.maxObjectsPerManager), in: 1...Double(limits.maxObjectsPerUser), "[limits] max-objects-per-manager")
        try Self.check(Double(bleTxPower), in: -127...20, "[ble] tx-power")
        guard !capturePCM.isEmpty, !playbackPCM.isEmpty else { throw ConfigurationError("[audio] PCM names must not be empty") }
        try Self.check(audioVolume, in: -60...0, "[audio] volume")
        try Self.check(audioReferenceLevel, in: -120...0, "[audio] reference-level")
        try Self.check(audioInterval, in: 0.5...60, "[audio] interval")
        try Self.check(audioLostTimeout, in: 1...600, "[audio] lost-timeout")
        try Self.check(audioThreshold, in: 8...1000, "[audio] threshold")
        try Self.check(beaconLostTimeout, in: 1...600, "[beacons] lost-timeout")
        try Self.check(beaconCacheTTL, in: 1...86_400, "[beacons] cache-ttl")
        try Self.check(beaconSignalInterval, in: 0.1...60, "[beacons] signal-interval")
        try Self.check(Double(maxBeacons), in: 1...100_000, "[beacons] max-beacons")
        try Self.check(Double(maxPendingUpstream), in: 1...100_000, "[upstream] max-pending")
        try Self.check(Double(maxUpstreamPerUser), in: Double(maxPendingUpstream)...1_000_000, "[upstream] max-per-user")
        try Self.check(Double(maxUpstreamTotal), in: Double(maxUpstreamPerUser)...10_000_000, "[upstream] max-total")
        try Self.check(verdictRetentionDays, in: 0.01...365, "[upstream] verdict-retention-days")
        guard !simDevice.isEmpty, simDevice.utf8.count <= 64 else {
            throw ConfigurationError("[sim] device must be 1..64 bytes")
        }
    }

    /// Each URL of `[server] url` on its own, then the list: one scheme for
    /// all, so that moving to another replica never drops TLS and sends the
    /// device's credential in the clear.
    private func validateServerURLs() throws(ConfigurationError) {
        guard (1...Self.maxServerURLs).contains(serverURLs.count) else {
            throw ConfigurationError("[server] url lists \(serverURLs.count) URLs; it takes 1 to \(Self.maxServerURLs)")
        }
        var schemes: Set<String> = []
        for text in serverURLs {
            guard let url = URL(string: text), let scheme = url.scheme, ["http", "https"].contains(scheme), url.host != nil else {
                throw ConfigurationError("[server] url '\(text)' must be an http:// or https:// URL")
            }
            // WSClient names the host in SNI, where an address may not stand (RFC 6066), and refuses to connect.
            if scheme == "https", let host = url.host, host.contains(":") || host.allSatisfy({ $0.isNumber || $0 == "." }) {
                throw ConfigurationError("[server] url '\(text)': over https:// name the server by its host name, as its certificate does, not by an address")
            }
            schemes.insert(scheme)
        }
        guard schemes.count == 1 else {
            throw ConfigurationError("[server] url mixes http:// and https:// URLs; all must use one scheme, so that a move to another never drops TLS")
        }
        let normalized = serverURLs.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
        if let repeated = normalized.enumerated().first(where: { normalized[..<$0.offset].contains($0.element) }) {
            throw ConfigurationError("[server] url lists '\(serverURLs[repeated.offset])' twice")
        }
        if serverCAFile != nil, schemes.first != "https" {
            throw ConfigurationError("[server] ca-file is for an https:// url; '\(serverURLs[0])' is plain HTTP")
        }
    }

    /// `system`, `session`, or a D-Bus server address.
    public static func busAddress(_ text: String) -> BusConnection.Address {
        switch text {
        case "system": .system
        case "session": .session
        default: .address(text)
        }
    }

    /// Parses `[x, y]` or `[x, y, z]`.
    public static func position(_ values: [Double]) -> Position? {
        guard (2...3).contains(values.count), values.allSatisfy(\.isFinite) else { return nil }
        return Position(x: values[0], y: values[1], z: values.count == 3 ? values[2] : 0)
    }

    private static func backend(_ name: String, of allowed: [Backend], in section: Section) throws(ConfigurationError) -> Backend {
        guard let backend = Backend(rawValue: name), allowed.contains(backend) else {
            throw section.invalid("backend", "must be one of \(allowed.map(\.rawValue).joined(separator: ", "))")
        }
        return backend
    }

    /// `hci` and a device number, as the kernel names controllers.
    public static func isAdapterName(_ name: String) -> Bool {
        HCIMedium.Settings.deviceIndex(named: name) != nil
    }

    private static func check(_ value: Double, in range: ClosedRange<Double>, _ name: String) throws(ConfigurationError) {
        guard range.contains(value) else {
            throw ConfigurationError("\(name) is \(value); it must be between \(range.lowerBound) and \(range.upperBound)")
        }
    }
}
