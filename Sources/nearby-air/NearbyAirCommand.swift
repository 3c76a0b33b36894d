import ArgumentParser
import Foundation
import Logging
import NearbyAir
import ServiceLifecycle
import SystemdService

@main
struct NearbyAirCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nearby-air",
        abstract: "A simulated radio space shared by nearbyd daemons on one host.",
        discussion: """
            nearby-air stands in for the antennas of several devices so that nearbyd
            daemons on one machine can find each other. Each daemon attaches as a
            device with a position (metres); what one broadcasts reaches the others
            that listen on the same medium, with a signal strength from the
            log-distance path-loss model

                RSSI = txPower - 10 * n * log10(distance)

            and devices whose RSSI would fall below the sensitivity hear nothing.
            Positions can be changed while everything runs with 'nearby-air move'.

            The space speaks a line protocol (one JSON object per line) on a Unix
            socket, by default $XDG_RUNTIME_DIR/nearby-air.sock (or
            /run/nearby-air.sock when XDG_RUNTIME_DIR is unset).
            """,
        subcommands: [Serve.self, Move.self, List.self],
        defaultSubcommand: Serve.self
    )
}

/// The socket option every subcommand shares.
struct SocketOption: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Unix socket of the space.", valueName: "path"))
    var socket: String = SocketOption.defaultPath

    static var defaultPath: String {
        if let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], !runtime.isEmpty {
            return runtime + "/nearby-air.sock"
        }
        return "/run/nearby-air.sock"
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the space.",
        discussion: """
            Listens on the socket until SIGTERM or SIGINT. Once it accepts
            connections it prints the line "nearby-air: listening on PATH" and
            notifies systemd (Type=notify). With --noise, each hearing gets Gaussian noise from
            a generator seeded with --seed, so a noisy run can be repeated exactly.
            """
    )

    @OptionGroup var socket: SocketOption

    @Option(help: ArgumentHelp("Path-loss exponent n: 2 is free space, 2.7 to 3.5 indoors.", valueName: "n"))
    var pathLossExponent: Double = 2.0

    @Option(help: ArgumentHelp("Weakest signal still heard, in dBm; sets the range.", valueName: "dBm"))
    var sensitivity: Double = -90

    @Option(help: ArgumentHelp("Standard deviation of the RSSI noise, in dB.", valueName: "dB"))
    var noise: Double = 0

    @Option(help: ArgumentHelp("Seed of the noise generator.", valueName: "n"))
    var seed: UInt64 = 1

    @Option(help: ArgumentHelp("Seconds between repeats of every broadcast (the advertising interval).", valueName: "seconds"))
    var interval: Double = 0.1

    @Option(help: ArgumentHelp("Log level: trace, debug, info, notice, warning, error or critical.", valueName: "level"))
    var logLevel: Logger.Level = .info

    func validate() throws {
        guard pathLossExponent > 0, pathLossExponent.isFinite else { throw ValidationError("--path-loss-exponent must be positive") }
        guard noise >= 0, noise.isFinite else { throw ValidationError("--noise must not be negative") }
        guard interval >= 0.01, interval <= 10 else { throw ValidationError("--interval must be within 0.01..10 seconds") }
        guard sensitivity.isFinite else { throw ValidationError("--sensitivity must be a number") }
    }

    func run() async throws {
        ServiceLogging.bootstrap(identifier: "nearby-air", level: logLevel)
        let parameters = AirParameters(pathLossExponent: pathLossExponent, sensitivity: sensitivity,
                                       noiseSigma: noise, seed: seed, interval: interval)
        let logger = Logger(label: "nearby-air")
        let service = AirService(server: AirServer(parameters: parameters, logger: logger), socketPath: socket.socket)
        let group = ServiceGroup(services: [service], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await group.run()
        try? FileManager.default.removeItem(atPath: socket.socket)
    }
}

struct Move: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Move a device.",
        discussion: "Daemons near the new position hear it at once; ones now out of range stop hearing it and report it lost after their lost timeout."
    )

    @OptionGroup var socket: SocketOption

    @Argument(help: "The device's name, as it attached.")
    var device: String

    @Argument(help: "New x, y (and optionally z) in metres.")
    var coordinates: [Double]

    func validate() throws {
        guard (2...3).contains(coordinates.count), coordinates.allSatisfy(\.isFinite) else {
            throw ValidationError("give x y or x y z in metres")
        }
    }

    func run() async throws {
        let client = try await AirClient(socketPath: socket.socket)
        defer { client.close() }
        let position = Position(x: coordinates[0], y: coordinates[1], z: coordinates.count == 3 ? coordinates[2] : 0)
        try await client.request(.move(device: device, position: position))
    }
}

struct List: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the attached devices.")

    @OptionGroup var socket: SocketOption

    @Flag(help: "Print JSON instead of a table.")
    var json = false

    func run() async throws {
        let client = try await AirClient(socketPath: socket.socket)
        defer { client.close() }
        guard case .devices(_, let devices) = try await client.request(.list) else { return }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(devices), as: UTF8.self))
            return
        }
        print("DEVICE\tPOSITION\tBROADCASTS\tSCANNING")
        for device in devices {
            print("\(device.name)\t\(device.position)\t\(device.broadcasts)\t\(device.scanning.map(\.rawValue).joined(separator: ","))")
        }
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

/// The space as a service of the process: runs until a shutdown signal.
struct AirService: Service {
    let server: AirServer
    let socketPath: String

    func run() async throws {
        let path = socketPath
        do {
            try await cancelWhenGracefulShutdown {
                try await server.run(socketPath: path) {
                    FileHandle.standardOutput.write(Data("nearby-air: listening on \(path)\n".utf8))
                    ServiceNotifier.ready(status: "listening on \(path)")
                }
            }
        } catch is CancellationError {
            // The graceful shutdown this service waits for.
        }
        ServiceNotifier.stopping()
    }
}
