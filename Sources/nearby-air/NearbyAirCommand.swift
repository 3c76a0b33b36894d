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
        abstract: "A simulated radio and acoustic space shared by nearbyd daemons on one host.",
        discussion: """
            nearby-air stands in for the antennas of several devices so that nearbyd
            daemons on one machine can find each other. Each daemon attaches as a
            device with a position (metres); what one broadcasts reaches the others
            that listen on the same medium, with a signal strength from the
            log-distance path-loss model

                RSSI = txPower - 10 * n * log10(distance)

            and devices whose RSSI would fall below the sensitivity hear nothing.
            Positions can be changed while everything runs with 'nearby-air move'.

            The space also carries sound. A device that opens an audio link has a
            speaker and a microphone: 48000 Hz mono Float32 samples (full scale
            +-1), in blocks of 960 samples (20 ms). While any link is open a clock
            ticks every 20 ms of wall-clock time (block n is due n * 20 ms after
            it started; a late tick makes up the blocks it missed, up to 1 s, and
            older ones are skipped with a warning). Each tick every speaker plays
            the next 960 samples it was given (silence when it has none) and every
            microphone hears, sample by sample,

                sum over the speakers of gain * sample + noise
                gain(d) = (1 m / max(d, 0.1 m)) * 10^(-absorption * max(d - 1 m, 0) / 20)

            spherical spreading (the 20 * log10(d) law) plus air absorption in dB
            per metre (--absorption). A device hears its own speaker with gain 1,
            as loud as a device 1 m away. The noise is white and Gaussian with
            an RMS of --audio-noise dBFS (0 dBFS is an RMS of 1), one stream per
            listener seeded from --seed. The mixing is linear and sample-exact:
            no resampling, no compression, no clipping of the sum. A speaker
            holds at most 10 s of samples not played yet, and what a device plays
            is heard from the next tick on.

            The space speaks a line protocol (one JSON object per line) on a Unix
            socket, by default $XDG_RUNTIME_DIR/nearby-air.sock (or
            /run/nearby-air.sock when XDG_RUNTIME_DIR is unset). A connection
            whose first line is {"id":1,"op":"audio","device":"NAME"}, for a
            device attached by another connection, becomes that device's audio
            link: after the reply {"id":1,"ok":true} it carries binary frames
            both ways, each a little-endian UInt32 sample count n (1 to 48000)
            and n little-endian Float32 samples: the device's frames are speaker
            samples, the air's are microphone blocks. A bad frame, a non-finite
            sample or a full speaker queue closes the link (with a warning in the
            log); so does the device detaching. A device that does not read its
            blocks loses the oldest beyond 1 s.
            """,
        subcommands: [Serve.self, Move.self, List.self, Beacon.self],
        defaultSubcommand: Serve.self
    )
}

/// The socket option every subcommand shares.
struct SocketOption: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Unix socket of the space.", valueName: "path"))
    var socket: String = AirSocket.defaultPath()
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the space.",
        discussion: """
            Listens on the socket until SIGTERM or SIGINT. Once it accepts \
            connections it prints the line "nearby-air: listening on PATH" and \
            notifies systemd (Type=notify). With --noise, each hearing gets Gaussian \
            noise from a generator seeded with --seed, so a noisy run can be repeated \
            exactly; the microphones' noise (--audio-noise) is seeded with --seed too.
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

    @Option(parsing: .unconditional,
            help: ArgumentHelp("RMS of every microphone's white noise, in dBFS (-200 to 0).", valueName: "dBFS"))
    var audioNoise: Double = -50

    @Option(help: ArgumentHelp("Absorption of sound by the air beyond the first metre, in dB per metre (0 to 10).",
                               valueName: "dB/m"))
    var absorption: Double = 0.5

    @Option(help: ArgumentHelp("Log level: trace, debug, info, notice, warning, error or critical.", valueName: "level"))
    var logLevel: Logger.Level = .info

    func validate() throws {
        guard pathLossExponent > 0, pathLossExponent.isFinite else { throw ValidationError("--path-loss-exponent must be positive") }
        guard noise >= 0, noise.isFinite else { throw ValidationError("--noise must not be negative") }
        guard interval >= 0.01, interval <= 10 else { throw ValidationError("--interval must be within 0.01..10 seconds") }
        guard sensitivity.isFinite else { throw ValidationError("--sensitivity must be a number") }
        guard AirParameters.audioNoiseRange.contains(audioNoise) else {
            throw ValidationError("--audio-noise must be within -200...0 dBFS")
        }
        guard AirParameters.absorptionRange.contains(absorption) else {
            throw ValidationError("--absorption must be within 0...10 dB/m")
        }
    }

    func run() async throws {
        ServiceLogging.bootstrap(identifier: "nearby-air", level: logLevel)
        let parameters = AirParameters(pathLossExponent: pathLossExponent, sensitivity: sensitivity,
                                       noiseSigma: noise, seed: seed, interval: interval,
                                       audioNoise: audioNoise, absorption: absorption)
        let logger = Logger(label: "nearby-air")
        let service = AirService(server: AirServer(parameters: parameters, logger: logger), socketPath: socket.socket)
        let group = ServiceGroup(services: [service], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await group.run()
        try? FileManager.default.removeItem(atPath: socket.socket)
    }
}

struct Move: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Move a device or a beacon.",
        discussion: "Daemons near the new position hear it at once; ones now out of range stop hearing it and report it lost after their lost timeout."
    )

    @OptionGroup var socket: SocketOption

    @Argument(help: "The device's name, as it attached, or the beacon's.")
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
        print("moved \(device) to \(position)")
    }
}

struct List: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the attached devices and the beacons.")

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
        print("DEVICE\tPOSITION\tBROADCASTS\tSCANNING\tAUDIO\tBEACON")
        for device in devices {
            let scanning = device.scanning.map(\.rawValue).joined(separator: ",")
            print("\(device.name)\t\(device.position)\t\(device.broadcasts)\t\(scanning)\t\(device.audio ? "yes" : "no")\t\(device.beacon ? "yes" : "no")")
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
