import ArgumentParser
import Foundation
import NearbyServer
import SystemdService

struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Copy a SQLite database into a new, empty PostgreSQL database.",
        discussion: """
            Moves a deployment from its SQLite file to PostgreSQL (to run several replicas, say). \
            Every table is copied as it is: projects with their API, admin and server keys; \
            namespaces; devices with their secrets' hashes and last-seen times; tokens, \
            publications and subscriptions; beacons with their attachments and the retired \
            beacon ids; upstream messages with their verdicts, downstream messages and \
            receipts; deleted devices and the logs of deletions. Devices and application \
            servers authenticate as before, pending messages are still delivered, and new rows \
            are numbered after the copied ones.

            Before: stop the server, and create an empty PostgreSQL database with a role that \
            owns it. The SQLite file must not be open in another process (a running server is \
            refused, by its process id); it is only read, under its write lock, and never \
            changed, so it stays there to go back to. It must be at this nearby-server's schema \
            version: one an older nearby-server wrote is brought up to date by running this one \
            on it once (nearby-server project list --database PATH).

            The PostgreSQL database must be empty: one that holds another application's \
            tables, or nearby-server's with rows (the first such table is named), is refused. \
            Its schema is created first, as the server creates it at start; then the rows are \
            copied in one transaction, 1000 at a time, so that after a failure it holds no row \
            and the command may run again.

            After: set [database] url to the same URL and start the server.

            --to defaults to [database] url of the configuration file (with the password of \
            [database] password-file, when the URL has none), which keeps a password off the \
            command line, where other users can read it in the process list. A URL without a \
            password, and no password-file, takes PGPASSWORD's, as libpq does.

            Output: one line per table as it is copied, TABLE: ROWS, then

              migrated N rows in T tables from PATH to URL in S s

            with the URL without its password.

            Exit status: 0 when everything was copied; 1, with one line on standard error, when \
            nothing was (the file missing, unreadable, in use, not a nearby-server database or \
            of another schema version; the PostgreSQL database unreachable, refusing the role \
            or its password, or not empty); 64 for command-line usage errors.
            """
    )

    @Option(name: .long, help: ArgumentHelp("The SQLite database to copy.", valueName: "sqlite:path"))
    var from: String

    @Option(name: .long, help: ArgumentHelp("The PostgreSQL database to fill (default: [database] url).",
                                            valueName: "postgres://url"))
    var to: String?

    @Option(name: .long, help: ArgumentHelp("Configuration file, where --to's default is.", valueName: "path"))
    var config: String?

    private static let sqlitePrefix = "sqlite:"

    func validate() throws {
        guard from.hasPrefix(Self.sqlitePrefix), from.count > Self.sqlitePrefix.count else {
            throw ValidationError("--from must be sqlite:PATH, the SQLite database file")
        }
        if let to, !to.hasPrefix("postgres://"), !to.hasPrefix("postgresql://") {
            throw ValidationError("--to must be a postgres:// URL")
        }
    }

    func run() async throws {
        let (url, password) = try to.map { ($0, ProcessInfo.processInfo.environment["PGPASSWORD"]) } ?? configuredURL()
        ServiceLogging.bootstrap(identifier: "nearby-server", level: .warning)
        let path = String(from.dropFirst(Self.sqlitePrefix.count))
        let clock = ContinuousClock()
        let started = clock.now
        let summary = try await DatabaseMigration(sqlitePath: path, postgresURL: url, password: password).run { table in
            // Unbuffered: the operator sees each table as it is done.
            FileHandle.standardOutput.write(Data("\(table.name): \(table.rows)\n".utf8))
        }
        let elapsed = (clock.now - started).components
        let seconds = Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18
        print("migrated \(summary.rows) rows in \(summary.tables.count) tables from \(path) to \(summary.target) in "
            + String(format: "%.1f s", seconds))
    }

    /// `[database] url` of the configuration file, and its password when
    /// the URL has none (`password-file`, or `PGPASSWORD`).
    private func configuredURL() throws -> (String, String?) {
        let path = config ?? ServerConfiguration.defaultPath
        let configuration = try ServerConfiguration.load(path: path, required: config != nil)
        guard let url = configuration.databaseURL else {
            throw ValidationError("no --to, and \(path) has no [database] url")
        }
        return (url, try configuration.databasePassword())
    }
}
