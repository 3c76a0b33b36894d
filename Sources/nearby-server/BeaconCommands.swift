import ArgumentParser
import Foundation
import NearbyServer
import ServerAPI

/// What every beacon and namespace command takes: the project it acts as,
/// the database and the output format.
struct RegistryOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The project whose beacons and namespaces these are.", valueName: "name"))
    var project: String

    @OptionGroup var storage: StorageOptions

    @Flag(help: "Print the API's JSON instead of text.")
    var json = false

    func admin() async throws -> BeaconAdmin {
        BeaconAdmin(storage: try await openStorage(storage))
    }
}

/// The commands about one beacon: which, and the rest of ``RegistryOptions``.
struct BeaconTarget: ParsableArguments {
    @Argument(help: ArgumentHelp("beacons/N!HEX or N!HEX.", valueName: "beacon"))
    var beacon: String

    @OptionGroup var options: RegistryOptions
}

/// The exit statuses of the beacon, attachment and namespace commands, for their discussions.
let exitStatuses = """
    Exit status: 0 on success; 1 when the project, beacon or attachment does not exist (another \
    project's beacon counts as not existing), when an id is already registered or was \
    decommissioned, or when a value is invalid, with one line on standard error; 64 for \
    command-line usage errors.
    """

struct BeaconCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "beacon",
        abstract: "Register, list, change and decommission a project's beacons, and manage their attachments.",
        discussion: """
            The beacon registry, as the HTTP API under /v1beta1 (Google's Proximity Beacon API) has it. \
            A beacon is named beacons/N!HEX: N is 3 for Eddystone(-UID), 4 for Eddystone-EID, 1 for \
            iBeacon and 5 for AltBeacon, HEX its id. BEACON arguments take that name with or without \
            'beacons/'. An id can be registered by one project only; a decommissioned id never again.

            Eddystone-EID beacons are registered with the 8-byte ephemeral id they broadcast now: \
            there is no EID key exchange, so a rotating EID beacon must be registered anew.

            These commands work on the database directly and may run while the server runs; the \
            server answers from the database, so changes show at once.
            """,
        subcommands: [Register.self, List.self, Get.self, Activate.self, Deactivate.self, Decommission.self, Delete.self,
                      AttachmentCommand.self]
    )

    /// The text form of one beacon.
    static let beaconOutput = """
        Output, one 'key: value' line each (description and telemetry only when set):
          beacon: beacons/N!HEX
          type: EDDYSTONE | EDDYSTONE_EID | IBEACON | ALTBEACON
          status: ACTIVE | INACTIVE | DECOMMISSIONED
          description: TEXT
          last-telemetry: BASE64 at TIME (UTC)
        or with --json the API's Beacon object.
        """

    /// `--type`: the API's types, in lower case with '-'.
    enum IDType: String, CaseIterable, ExpressibleByArgument {
        case eddystone
        case eddystoneEID = "eddystone-eid"
        case ibeacon
        case altbeacon

        var apiType: AdvertisedIdType {
            switch self {
            case .eddystone: .eddystone
            case .eddystoneEID: .eddystoneEID
            case .ibeacon: .iBeacon
            case .altbeacon: .altBeacon
            }
        }
    }

    struct Register: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Register a beacon of a project.",
            discussion: """
                --id is the advertised id in hex (dashes are skipped, so a UUID may keep them): 16 \
                bytes for eddystone (namespace and instance), 8 for eddystone-eid, 20 for ibeacon \
                (UUID, major, minor) and 20 for altbeacon. The beacon is active unless --inactive: \
                only active beacons are answered to devices (beaconinfo:getforobserved).

                \(beaconOutput)

                \(exitStatuses)
                """
        )

        @Option(help: ArgumentHelp("The kind of advertised id.", valueName: "type"))
        var type: IDType

        @Option(help: ArgumentHelp("The advertised id, hexadecimal.", valueName: "hex"))
        var id: String

        @Option(help: ArgumentHelp("Free text about the beacon.", valueName: "text"))
        var description: String?

        @Flag(help: "Register it inactive.")
        var inactive = false

        @OptionGroup var options: RegistryOptions

        func run() async throws {
            let beacon = try await options.admin().register(project: options.project, type: type.apiType, hex: id,
                                                            description: description, inactive: inactive)
            try printBeacon(beacon, json: options.json)
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List a project's beacons.",
            discussion: """
                --filter takes the API's q: space-separated terms that must all hold, \
                status:active|inactive|decommissioned, type:eddystone|eddystone_eid|ibeacon|altbeacon \
                and description:TEXT (a substring, without regard to case; quote text with spaces: \
                'description:"room 3"').

                Output: one line per beacon, in the order registered: NAME, type, status and \
                description, separated by tabs; 'no beacons' when there are none. With --json: an \
                array of the API's Beacon objects.

                \(exitStatuses)
                """
        )

        @Option(help: ArgumentHelp("Only the beacons that pass this query.", valueName: "query"))
        var filter: String?

        @OptionGroup var options: RegistryOptions

        func run() async throws {
            let beacons = try await options.admin().list(project: options.project, query: filter)
            if options.json {
                try printJSON(beacons)
            } else if beacons.isEmpty {
                print("no beacons")
            } else {
                for beacon in beacons {
                    print([beacon.beaconName ?? "", beacon.advertisedId?.type.rawValue ?? "", beacon.status?.rawValue ?? "",
                           beacon.description ?? ""].joined(separator: "\t"))
                }
            }
        }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show one beacon of a project.",
            discussion: """
                \(beaconOutput)

                \(exitStatuses)
                """
        )

        @OptionGroup var target: BeaconTarget

        func run() async throws {
            let options = target.options
            try printBeacon(try await options.admin().beacon(project: options.project, beacon: target.beacon), json: options.json)
        }
    }

    struct Activate: BeaconActionCommand {
        static let action = BeaconAction.activate
        static let configuration = actionConfiguration(
            abstract: "Make a beacon active: answered to devices again.",
            detail: "Activating an active beacon changes nothing; a decommissioned beacon cannot be activated.")
        @OptionGroup var target: BeaconTarget
    }

    struct Deactivate: BeaconActionCommand {
        static let action = BeaconAction.deactivate
        static let configuration = actionConfiguration(
            abstract: "Make a beacon inactive: registered, but not answered to devices.",
            detail: "Deactivating an inactive beacon changes nothing; a decommissioned beacon cannot be deactivated.")
        @OptionGroup var target: BeaconTarget
    }

    struct Decommission: BeaconActionCommand {
        static let action = BeaconAction.decommission
        static let configuration = actionConfiguration(
            abstract: "Decommission a beacon, for good.",
            detail: """
                The beacon stays listed, DECOMMISSIONED, and is never answered to devices again; \
                its id can never be registered again, by any project, even after the beacon or \
                its project is deleted.
                """)
        @OptionGroup var target: BeaconTarget
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a beacon with its attachments.",
            discussion: """
                The id may be registered again afterwards, unless the beacon was decommissioned. \
                Output: 'deleted beacons/N!HEX'.

                \(exitStatuses)
                """
        )

        @OptionGroup var target: BeaconTarget

        func run() async throws {
            try await target.options.admin().delete(project: target.options.project, beacon: target.beacon)
            print("deleted \(target.beacon.hasPrefix("beacons/") ? target.beacon : "beacons/\(target.beacon)")")
        }
    }
}

/// activate, deactivate and decommission: the same command but for the action.
protocol BeaconActionCommand: AsyncParsableCommand {
    static var action: BeaconAction { get }
    var target: BeaconTarget { get }
}

extension BeaconActionCommand {
    static func actionConfiguration(abstract: String, detail: String) -> CommandConfiguration {
        CommandConfiguration(abstract: abstract, discussion: """
            \(detail)

            \(BeaconCommand.beaconOutput)

            \(exitStatuses)
            """)
    }

    func run() async throws {
        let options = target.options
        try printBeacon(try await options.admin().perform(Self.action, project: options.project, beacon: target.beacon),
                        json: options.json)
    }
}

private func printBeacon(_ beacon: Beacon, json: Bool) throws {
    if json {
        try printJSON(beacon)
        return
    }
    var lines = ["beacon: \(beacon.beaconName ?? "")", "type: \(beacon.advertisedId?.type.rawValue ?? "")",
                 "status: \(beacon.status?.rawValue ?? "")"]
    if let description = beacon.description { lines.append("description: \(description)") }
    if let telemetry = beacon.lastTelemetry, let time = beacon.lastTelemetryTimeMs.flatMap(Double.init) {
        let when = ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: time / 1000))
        lines.append("last-telemetry: \(telemetry.base64EncodedString()) at \(when)")
    }
    print(lines.joined(separator: "\n"))
}
