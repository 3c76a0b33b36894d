import ArgumentParser
import Foundation
import Logging
import NearbyServer
import SystemdService

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve the HTTP and WebSocket API (the default command).",
        discussion: """
            Reads the configuration file (default \(ServerConfiguration.defaultPath); a missing \
            default file means built-in defaults, a missing file named with --config is an error), \
            applies the command-line overrides, opens the database (a SQLite file is created, with \
            its directory, when missing; a PostgreSQL database must exist) and listens.

            Once listening it prints exactly one line to standard output:

              nearby-server: listening on http://HOST:PORT

            (https:// when [http] has a certificate and private key: then the API is served over \
            TLS 1.2 or newer only) with the real port (--listen 127.0.0.1:0 picks a free one), and \
            tells systemd it is ready (Type=notify). When [xmpp] has a certificate it also listens for application \
            servers (the XMPP connection server) and prints

              nearby-server: xmpp on HOST:PORT

            The connection limits ([http] max-connections, [xmpp] max-connections) must fit the \
            file descriptors the process may open: it raises its soft RLIMIT_NOFILE to what they \
            need, and refuses to start, saying the sum, when the hard limit (systemd's \
            LimitNOFILE=) is lower. [http] max-connections left at its default (\(ServerConfiguration.HTTP.defaultMaxConnections)) is instead \
            lowered to fit, with a notice in the log.

            SIGTERM or SIGINT shut it down gracefully: application servers are told \
            CONNECTION_DRAINING and given 3 seconds, open streams are closed, requests in flight \
            finish, and it exits with status 0.

            Logs go to the systemd journal when stderr is connected to it, to stderr otherwise.
            """
    )

    @OptionGroup var storage: StorageOptions

    @Option(name: .long, help: ArgumentHelp("Address to listen on; overrides [http] listen. IPv6 in brackets: [::1]:8080.",
                                            valueName: "host:port"))
    var listen: String?

    @Option(name: .long, help: ArgumentHelp("Address of the XMPP endpoint; overrides [xmpp] listen.", valueName: "host:port"))
    var xmppListen: String?

    @Option(name: .long, help: ArgumentHelp("trace, debug, info, notice, warning, error or critical.", valueName: "level"))
    var logLevel: String = "info"

    func validate() throws {
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level must be one of: \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))")
        }
    }

    func run() async throws {
        var configuration = try storage.load()
        if let listen {
            configuration.listen = try ListenAddress(parsing: listen, what: "--listen")
        }
        if let xmppListen {
            configuration.xmpp.listen = try ListenAddress(parsing: xmppListen, what: "--xmpp-listen")
        }
        // Before anything opens a descriptor: the connection limits must fit the process's.
        let lowered = DescriptorBudget.fittingDefault(configuration, hardLimit: try DescriptorBudget.hardLimit())
        if let lowered { configuration = lowered.configuration }
        let descriptors = try DescriptorBudget(configuration).apply()
        ServiceLogging.bootstrap(identifier: "nearby-server", level: Logger.Level(rawValue: logLevel) ?? .info)
        let logger = Logger(label: "nearby-server")
        if let lowered { logger.notice("\(lowered)") }
        let server = try await NearbyServer.open(configuration: configuration, logger: logger)
        let databaseName = configuration.databaseName
        let scheme = configuration.http.usesTLS ? "https" : "http"
        try await server.run(
            onListening: { address in
                // Unbuffered, so a parent waiting on the pipe sees the line at once.
                FileHandle.standardOutput.write(Data("nearby-server: listening on \(scheme)://\(address)\n".utf8))
                ServiceNotifier.ready(status: "listening on \(address)")
                logger.info("listening", metadata: ["address": "\(scheme)://\(address)", "database": "\(databaseName)",
                                                    "descriptors": "\(descriptors)"])
            },
            onXMPPListening: { address in
                FileHandle.standardOutput.write(Data("nearby-server: xmpp on \(address)\n".utf8))
                logger.info("XMPP endpoint listening", metadata: ["address": "\(address)"])
            },
            onShutdown: {
                ServiceNotifier.stopping()
                logger.info("shutting down")
            },
            onOverdue: {
                // A part that does not return when cancelled is a bug; the
                // process must still end when it says it will. _exit, as
                // other threads are still running and atexit's work could
                // wait on them.
                logger.error("shutdown did not finish within \(NearbyServer.shutdownDeadline); exiting with status 1")
                _exit(1)
            }
        )
    }
}
