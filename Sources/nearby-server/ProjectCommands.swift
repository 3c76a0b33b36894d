import ArgumentParser
import Foundation
import Logging
import NearbyServer
import SystemdService

struct ProjectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "project",
        abstract: "Create, list and delete projects, issue their admin and server keys, and see and clean their devices.",
        discussion: """
            A project is one application's world: its API keys, its devices and their publications \
            and subscriptions, its beacons and their attachments. Messages never cross projects. A \
            project's namespace is its name: what an empty namespace in a publication or subscription \
            stands for, and where its beacon attachments go.

            These commands work on the database directly and may run while the server runs.
            """,
        subcommands: [Create.self, List.self, Delete.self, AdminKey.self, ServerKey.self, Devices.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a project and print its API key, admin key and server key.",
            discussion: """
                NAME is 1 to 63 characters of a-z, 0-9 and '-', starting with a letter or digit; it is \
                also the project's namespace. The keys are printed once and stored only as SHA-256 \
                hashes: keep them, they cannot be shown again. Devices register with the API key \
                (POST /v1/devices, header X-Api-Key) and look up beacons with it; the admin key \
                manages the project's beacons (/v1beta1/..., header Authorization: Bearer KEY); the \
                server key is the password of the project's application servers on the XMPP \
                connection server, where they log in (SASL PLAIN) as NAME@DOMAIN.

                Output:
                  project: NAME
                  api-key: KEY
                  admin-key: KEY
                  server-key: KEY
                or with --json: {"adminKey":"KEY","apiKey":"KEY","namespace":"NAME","project":"NAME","serverKey":"KEY"}

                A name that is taken is an error (exit status 1).
                """
        )

        @Argument(help: "The project's name and namespace.")
        var name: String

        @OptionGroup var storage: StorageOptions

        @Flag(help: "Print JSON instead of text.")
        var json = false

        func run() async throws {
            let created = try await admin(storage, creating: true).create(name: name)
            if json {
                try printJSON(created)
            } else {
                print("project: \(created.project)\napi-key: \(created.apiKey)\nadmin-key: \(created.adminKey)\nserver-key: \(created.serverKey)")
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List projects.",
            discussion: """
                One line per project: name, namespace, number of devices, creation time (UTC). \
                With --json: an array of {"project","namespace","devices","createdAtMs"}.
                """
        )

        @OptionGroup var storage: StorageOptions

        @Flag(help: "Print JSON instead of text.")
        var json = false

        func run() async throws {
            let projects = try await admin(storage).list()
            if json {
                try printJSON(projects.map {
                    ListedProject(project: $0.project.name, namespace: $0.project.namespace, devices: $0.deviceCount,
                                  createdAtMs: $0.project.createdAtMs)
                })
            } else if projects.isEmpty {
                print("no projects")
            } else {
                let formatter = ISO8601DateFormatter()
                for summary in projects {
                    let created = formatter.string(from: Date(timeIntervalSince1970: Double(summary.project.createdAtMs) / 1000))
                    print("\(summary.project.name)\tnamespace=\(summary.project.namespace)\tdevices=\(summary.deviceCount)\tcreated=\(created)")
                }
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a project with everything it has.",
            discussion: """
                Deletes the project's API keys, admin key, devices, tokens, publications and \
                subscriptions, its namespace, and its beacons with their attachments (the ids of its \
                decommissioned beacons stay retired). A running server notices within a second: the \
                devices' streams are closed and their sightings dropped. Deleting a project that does \
                not exist is an error (exit status 1).
                """
        )

        @Argument(help: "The project to delete.")
        var name: String

        @OptionGroup var storage: StorageOptions

        func run() async throws {
            try await admin(storage).delete(name: name)
            print("deleted project \(name)")
        }
    }

    struct AdminKey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "admin-key",
            abstract: "Issue a new admin key for a project, replacing the one it had.",
            discussion: """
                The admin key manages the project's beacons, attachments and namespaces over HTTP \
                (/v1beta1/..., header Authorization: Bearer KEY). A project has one: the key it had \
                stops working at once, also for a running server. Projects created before the beacon \
                registry have none until this is run. The key is printed once and stored only as a \
                SHA-256 hash.

                Output:
                  project: NAME
                  admin-key: KEY
                or with --json: {"adminKey":"KEY","project":"NAME"}

                A project that does not exist is an error (exit status 1).
                """
        )

        @OptionGroup var arguments: IssuedKeyArguments

        func run() async throws {
            let issued = try await admin(arguments.storage).issueAdminKey(name: arguments.name)
            try arguments.show(issued, project: issued.project, label: "admin-key", key: issued.adminKey)
        }
    }

    struct ServerKey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "server-key",
            abstract: "Issue a new server key for a project, replacing the one it had.",
            discussion: """
                The server key is the password of the project's application servers on the XMPP \
                connection server (SASL PLAIN as NAME@DOMAIN). A project has one: new logins need the \
                new key at once; connections already logged in stay. The key is printed once and \
                stored only as a SHA-256 hash.

                Output:
                  project: NAME
                  server-key: KEY
                or with --json: {"project":"NAME","serverKey":"KEY"}

                A project that does not exist is an error (exit status 1).
                """
        )

        @OptionGroup var arguments: IssuedKeyArguments

        func run() async throws {
            let issued = try await admin(arguments.storage).issueServerKey(name: arguments.name)
            try arguments.show(issued, project: issued.project, label: "server-key", key: issued.serverKey)
        }
    }
}

extension ProjectCommand {
    struct Devices: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List a project's devices, and remove those that have gone quiet.",
            discussion: """
                A device is registered by an install of an app with the project's API key, which \
                ships inside the app: anyone may register one. Each device's last-seen time is when \
                it last authenticated (written at most once an hour). The server deletes devices \
                that have not been seen for [limits] device-idle-days by itself (90 by default); \
                this command shows them and removes them sooner.

                Without options, lists every device of the project. With --stale-days N, only the \
                devices not seen for N days or more. With --remove-stale as well, removes those \
                devices, with their tokens, publications and subscriptions; a running server notices \
                within a second (their credentials stop working, their streams close, subscribers \
                lose what they published). --remove-stale without --stale-days takes [limits] \
                device-idle-days from the configuration.

                Output: one line per device, tab-separated: the device id, created=TIME and \
                last-seen=TIME (UTC), then with --remove-stale a line 'removed N devices'. With \
                --json: an array of {"device","createdAtMs","lastSeenAtMs"}, the devices listed \
                (and removed, with --remove-stale).

                A project that does not exist is an error (exit status 1).
                """
        )

        @Argument(help: "The project.")
        var name: String

        @Option(help: ArgumentHelp("Only devices not seen for this many days or more.", valueName: "days"))
        var staleDays: Int?

        @Flag(help: "Remove the stale devices listed.")
        var removeStale = false

        @OptionGroup var storage: StorageOptions

        @Flag(help: "Print JSON instead of text.")
        var json = false

        func validate() throws {
            if let staleDays, !(0...36_500).contains(staleDays) {
                throw ValidationError("--stale-days must be between 0 and 36500")
            }
        }

        func run() async throws {
            let configuration = try storage.load()
            let admin = ProjectAdmin(storage: try await openStorage(storage))
            let days = staleDays ?? (removeStale ? configuration.limits.deviceIdleDays : nil)
            let devices = try await admin.devices(project: name, staleDays: days)
            if removeStale {
                try await admin.remove(devices: devices.map(\.device))
            }
            if json {
                try printJSON(devices)
                return
            }
            let formatter = ISO8601DateFormatter()
            func time(_ ms: UInt64) -> String { formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000)) }
            for device in devices {
                print("\(device.device)\tcreated=\(time(device.createdAtMs))\tlast-seen=\(time(device.lastSeenAtMs))")
            }
            if removeStale { print("removed \(devices.count) devices") }
        }
    }
}

/// What the commands that issue a project a new key take, and how they print it.
struct IssuedKeyArguments: ParsableArguments {
    @Argument(help: "The project.")
    var name: String

    @OptionGroup var storage: StorageOptions

    @Flag(help: "Print JSON instead of text.")
    var json = false

    /// `project: NAME` and `LABEL: KEY`, or `issued` as JSON.
    func show(_ issued: some Encodable, project: String, label: String, key: String) throws {
        if json {
            try printJSON(issued)
        } else {
            print("project: \(project)\n\(label): \(key)")
        }
    }
}

private struct ListedProject: Encodable {
    var project: String
    var namespace: String
    var devices: Int
    var createdAtMs: UInt64
}

private func admin(_ options: StorageOptions, creating: Bool = false) async throws -> ProjectAdmin {
    ProjectAdmin(storage: try await openStorage(options, creating: creating))
}

/// The database the options name, for the commands that work on it directly.
/// A SQLite file that does not exist is made only when `creating` (`project
/// create`, as `serve` does): a command that reads or changes what is there
/// leaves no empty database behind where none was.
func openStorage(_ options: StorageOptions, creating: Bool = false) async throws -> any ServerStorage {
    let configuration = try options.load()
    if !creating, configuration.databaseURL == nil, !FileManager.default.fileExists(atPath: configuration.databasePath) {
        throw MissingDatabase(path: configuration.databasePath, named: options.database != nil ? "--database" : "[database] path")
    }
    ServiceLogging.bootstrap(identifier: "nearby-server", level: .warning)
    return try await configuration.openStorage()
}

/// A command other than `serve` and `project create` named a SQLite file that is not there.
struct MissingDatabase: Error, CustomStringConvertible {
    let path: String
    let named: String
    var description: String {
        "no database at \(path) (\(named)): `nearby-server serve` or `project create` makes it; "
            + "to use another, give --database PATH or --config FILE"
    }
}

func printJSON(_ value: some Encodable) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    print(String(decoding: try encoder.encode(value), as: UTF8.self))
}
