import ArgumentParser
import Foundation
import Logging
import NearbyServer
import SystemdService

@main
struct NearbyServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nearby-server",
        abstract: "The nearbyd backend: devices, tokens, and matching publications to subscriptions nearby.",
        discussion: """
            nearby-server registers devices with a project's API key, issues the short-lived tokens \
            they broadcast over BLE and audio, takes their reports of tokens heard, and pushes found \
            and lost to the subscribing devices over a WebSocket stream. It also keeps a registry of \
            each project's BLE beacons and the data attached to them, and is the connection server \
            between apps on devices and their application servers (XMPP, in the shape of Firebase \
            Cloud Messaging's). State lives in one SQLite file by default, or in a PostgreSQL \
            database ([database] url), which several nearby-server processes may serve together \
            as replicas; 'migrate' moves an SQLite deployment there.

            Without a subcommand, 'serve' runs. Errors are reported as one line on standard error \
            with a non-zero exit status.

            See doc/nearby-server.md for the configuration file and doc/server-api/openapi.yaml for \
            the API.
            """,
        subcommands: [Serve.self, ProjectCommand.self, BeaconCommand.self, NamespaceCommand.self, CertificateCommand.self,
                      MigrateCommand.self, ReplicasCommand.self],
        defaultSubcommand: Serve.self
    )

    /// ArgumentParser's own errors and requests (usage, --help) keep their
    /// format and exit status; any other failure becomes one line on stderr
    /// and exit status 1.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch where String(reflecting: type(of: error)).hasPrefix("ArgumentParser.") {
            exit(withError: error)
        } catch {
            FileHandle.standardError.write(Data("nearby-server: \(error)\n".utf8))
            Foundation.exit(1)
        }
    }
}

/// Options every command that opens the database takes.
struct StorageOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Configuration file.", valueName: "path"))
    var config: String?

    @Option(name: .long, help: ArgumentHelp("SQLite database file, or a postgres:// URL; overrides [database].",
                                            valueName: "path-or-url"))
    var database: String?

    /// The file's configuration (defaults when the default file is missing),
    /// with the command line's overrides.
    func load() throws -> ServerConfiguration {
        var configuration = try ServerConfiguration.load(path: config ?? ServerConfiguration.defaultPath,
                                                         required: config != nil)
        if let database {
            if database.hasPrefix("postgres://") || database.hasPrefix("postgresql://") {
                configuration.databaseURL = database
            } else {
                configuration.databasePath = database
                configuration.databaseURL = nil
                configuration.databasePasswordFile = nil
            }
        }
        try configuration.validate()
        return configuration
    }
}
