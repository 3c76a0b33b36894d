import ArgumentParser
import Beacons
import NearbyAir

struct Beacon: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Place and remove simulated beacons.",
        discussion: """
            A beacon is a device of the space itself: it stays until removed, whoever \
            placed it, broadcasts one BLE advertisement (a real Eddystone or iBeacon \
            frame, at most 31 bytes) every interval, and listens to nothing. Daemons \
            that listen on BLE hear it as they would a real beacon. Move it with \
            'nearby-air move NAME X Y [Z]'; 'nearby-air list' shows it.
            """,
        subcommands: [Add.self, Remove.self]
    )

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Place a beacon, or replace the one of that name.",
            discussion: """
                KIND and ID:
                  eddystone-uid  NAMESPACE/INSTANCE in hex (20 and 12 digits),
                                 or 32 hex digits
                  eddystone-eid  the 16 hex digits of the ephemeral id
                  eddystone-url  an http:// or https:// URL that fits the frame's
                                 17 bytes
                  eddystone-tlm  MILLIVOLTS:CELSIUS:PDUS:SECONDS (battery and
                                 temperature may be empty)
                  ibeacon        UUID/MAJOR/MINOR

                --tx-power is the strength the beacon is heard with at 1 m, as iBeacon's measured \
                power says; an Eddystone frame declares 41 dB more, its power at 0 m. The same \
                figure drives the space's path loss, so a daemon's distance estimate is right.

                On success it prints one line: placed beacon NAME: KIND ID at (X, Y, Z), N dBm at 1 m.

                Exit status: 0 placed; 1 the space refused it (a device of that name is attached) \
                or cannot be reached; 64 a malformed ID.
                """
        )

        @OptionGroup var socket: SocketOption

        @Argument(help: "The beacon's name, unique in the space.")
        var name: String

        @Argument(help: ArgumentHelp("eddystone-uid, eddystone-eid, eddystone-url, eddystone-tlm or ibeacon.", valueName: "kind"))
        var kind: BeaconKind

        @Argument(help: ArgumentHelp("What the beacon broadcasts; see KIND and ID below.", valueName: "id"))
        var id: String

        @Option(name: .customLong("at"), parsing: .upToNextOption,
                help: ArgumentHelp("Position: x y (and optionally z) in metres.", valueName: "x y [z]"))
        var coordinates: [Double] = [0, 0]

        @Option(name: .customLong("tx-power"), parsing: .unconditional,
                help: ArgumentHelp("Signal strength at 1 m, dBm (-100 to 0).", valueName: "dBm"))
        var txPower = -59

        func validate() throws {
            guard (2...3).contains(coordinates.count), coordinates.allSatisfy(\.isFinite) else {
                throw ValidationError("--at takes x y or x y z in metres")
            }
            guard (-100...0).contains(txPower) else { throw ValidationError("--tx-power must be within -100...0 dBm") }
            _ = try frame()
        }

        /// The frame ID describes; a malformed ID is a usage error.
        private func frame() throws -> BeaconFrame {
            do {
                return try BeaconFrame(kind: kind, text: id, powerAtOneMetre: Int8(txPower))
            } catch {
                throw ValidationError("\(error)")
            }
        }

        func run() async throws {
            let frame = try frame()
            let client = try await AirClient(socketPath: socket.socket)
            defer { client.close() }
            let position = Position(x: coordinates[0], y: coordinates[1], z: coordinates.count == 3 ? coordinates[2] : 0)
            try await client.request(.placeBeacon(name: name, position: position, payload: frame.advertisingData,
                                                  txPower: txPower))
            print("placed beacon \(name): \(kind.name) \(id) at \(position), \(txPower) dBm at 1 m")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove a beacon.",
            discussion: "Daemons that heard it report it lost after their lost timeout. On success it prints " +
                "'removed beacon NAME'. Exit status 1 when there is no beacon of that name."
        )

        @OptionGroup var socket: SocketOption

        @Argument(help: "The beacon's name.")
        var name: String

        func run() async throws {
            let client = try await AirClient(socketPath: socket.socket)
            defer { client.close() }
            try await client.request(.removeBeacon(name: name))
            print("removed beacon \(name)")
        }
    }
}

/// KIND by its lower-case name, as `eddystone-uid`.
extension BeaconKind: ExpressibleByArgument {
    public init?(argument: String) {
        self.init(name: argument)
    }

    public static var allValueStrings: [String] { allCases.map(\.name) }
}
