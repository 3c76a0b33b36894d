import ArgumentParser
import ConfigFile
import Foundation
import Logging
import NearbyDaemon
import ServiceLifecycle
import SystemdService

@main
struct NearbydCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nearbyd",
        abstract: "The Nearby Messages daemon.",
        discussion: """
            nearbyd lets programs on this device publish small messages to programs on
            devices nearby, and subscribe to theirs: found when the devices come near
            each other, lost when they part. It owns the device's BLE advertiser and
            scanner and its near-ultrasonic audio modem, keeps every client's
            publications and subscriptions, and talks to nearby-server, which turns
            the tokens heard over the air into messages.

            Clients use the D-Bus API org.nearbyd (see doc/dbus-api.md; on a
            running system, busctl introspect org.nearbyd /org/nearbyd shows it).
            nearbyctl and the NearbyMessages Swift library are two such clients.

            BLE goes through bluetoothd (BlueZ) on the system bus by default: nearbyd
            needs access to org.bluez (the bluetooth group; the packaged sysusers file
            makes the nearbyd user a member).
            The [ble] section of the configuration picks an adapter, the raw HCI
            backend for hosts without bluetoothd, or nearby-air's simulated space.

            Audio is off until the [audio] section (or --audio) turns it on: then nearbyd
            plays its tokens as short bursts between 18.5 and 20 kHz through ALSA (the
            PCM "default" unless configured, so PipeWire's and PulseAudio's ALSA plugins
            work) and listens on the microphone while a client subscribes over audio.
            Its user needs the sound devices: the packaged sysusers file makes the
            nearbyd user a member of the audio group.

            Settings come from the configuration file (TOML, see doc/configuration.md),
            then from these options, which override it. The daemon logs to the systemd
            journal when started by systemd and to standard error otherwise, tells
            systemd when it is ready (Type=notify), reads the static publications of
            [publications] directory again on SIGHUP (systemctl reload), and exits
            cleanly on SIGTERM or SIGINT after ending every client's objects.

            EXIT STATUS
              0 after a clean shutdown; 1 when the configuration is invalid or the bus
              or the name org.nearbyd cannot be had.

            FILES
              /etc/nearbyd/nearbyd.conf   configuration
              /var/lib/nearbyd            state (device registrations)
            """
    )

    @Flag(name: .long, help: "Serve on the system bus (the default).")
    var system = false

    @Flag(name: .long, help: "Serve on the session bus (a per-user instance).")
    var session = false

    @Option(name: .long, help: ArgumentHelp("Serve on the bus at this D-Bus address.", valueName: "address"))
    var bus: String?

    @Option(name: .long, help: ArgumentHelp("Configuration file (default /etc/nearbyd/nearbyd.conf; missing is fine unless given here).", valueName: "path"))
    var config: String?

    @Option(name: .long, help: ArgumentHelp("State directory.", valueName: "path"))
    var stateDir: String?

    @Option(name: .long, help: ArgumentHelp(
        "Base URL of nearby-server; given again, another replica of it (\(DaemonConfiguration.maxServerURLs) at most, " +
            "one scheme for all): nearbyd uses the first and moves to the next when one fails. Replaces [server] url.",
        valueName: "url"))
    var server: [String] = []

    @Option(name: .long, help: ArgumentHelp("BLE backend: bluez, hci, sim (nearby-air) or off.", valueName: "backend"))
    var ble: String?

    @Option(name: .long, help: ArgumentHelp("Audio backend: alsa, sim (nearby-air) or off.", valueName: "backend"))
    var audio: String?

    @Option(name: .long, help: ArgumentHelp("nearby-air socket, for the simulated mediums.", valueName: "path"))
    var airSocket: String?

    @Option(name: .long, help: ArgumentHelp("This daemon's device name in nearby-air.", valueName: "name"))
    var deviceName: String?

    @Option(name: .long, help: ArgumentHelp("This daemon's position in nearby-air, metres.", valueName: "x,y[,z]"))
    var position: String?

    @Option(name: .long, help: ArgumentHelp("Log level: trace, debug, info, notice, warning, error or critical.", valueName: "level"))
    var logLevel: String?

    func validate() throws {
        guard [system, session, bus != nil].filter({ $0 }).count <= 1 else {
            throw ValidationError("choose one of --system, --session and --bus")
        }
    }

    func run() async throws {
        let configuration: DaemonConfiguration
        do {
            configuration = try settings()
        } catch {
            FileHandle.standardError.write(Data("nearbyd: \(error.message)\n".utf8))
            throw ExitCode.failure
        }
        ServiceLogging.bootstrap(identifier: "nearbyd", level: configuration.logLevel)
        let logger = Logger(label: "nearbyd")
        let daemon = Daemon(configuration: configuration, logger: logger)
        let group = ServiceGroup(services: [daemon], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        do {
            try await group.run()
        } catch {
            logger.critical("nearbyd failed: \(error)")
            throw ExitCode.failure
        }
    }

    /// The configuration file with these options applied over it.
    private func settings() throws(ConfigurationError) -> DaemonConfiguration {
        let path = config ?? DaemonConfiguration.defaultPath
        var result = try DaemonConfiguration.load(path: path, required: config != nil, validating: false)
        if session { result.bus = .session }
        if system { result.bus = .system }
        if let bus { result.bus = .address(bus) }
        if let stateDir { result.stateDirectory = stateDir }
        if !server.isEmpty { result.serverURLs = server }
        if let ble { result.ble = try Self.backend(ble, of: [.bluez, .hci, .sim, .off], option: "--ble") }
        if let audio { result.audio = try Self.backend(audio, of: [.alsa, .sim, .off], option: "--audio") }
        if let airSocket { result.airSocket = airSocket }
        if let deviceName { result.simDevice = deviceName }
        if let position {
            let values = position.split(separator: ",").compactMap { Double($0.trimmingCharacters(in: .whitespaces)) }
            guard let parsed = DaemonConfiguration.position(values), values.count == position.split(separator: ",").count else {
                throw ConfigurationError("--position must be x,y or x,y,z in metres")
            }
            result.simPosition = parsed
        }
        if let logLevel {
            guard let level = Logger.Level(rawValue: logLevel) else {
                throw ConfigurationError("--log-level must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            result.logLevel = level
        }
        do {
            try result.validate()
        } catch {
            // The default file is optional: name it only when it was read.
            let origin = FileManager.default.fileExists(atPath: path) ? "\(path) with the command line's options" : "the command line's options"
            throw ConfigurationError("\(origin): \(error.message)")
        }
        return result
    }

    private static func backend(_ name: String, of allowed: [DaemonConfiguration.Backend],
                                option: String) throws(ConfigurationError) -> DaemonConfiguration.Backend {
        guard let backend = DaemonConfiguration.Backend(rawValue: name), allowed.contains(backend) else {
            throw ConfigurationError("\(option) must be one of \(allowed.map(\.rawValue).joined(separator: ", "))")
        }
        return backend
    }
}
