import Foundation
@testable import NearbyServer
import TestSupport
import Testing

/// The real `nearby-server` under a small descriptor limit (prlimit, as
/// systemd's LimitNOFILE= sets it), attacked as the report did.
@Suite(.enabled(if: executable != nil, "needs the nearby-server executable (swift build --build-tests builds it)"),
       .timeLimit(.minutes(3)))
struct DescriptorLimitTests {
    /// The report's attack: connections that send `GET /v1/hea` and stop, more
    /// than the process has descriptors, took /v1/health down. Within the
    /// connection limit, sized to the descriptors, the oldest idle make room.
    @Test func halfSentHeadsBeyondTheDescriptorsDoNotTakeTheServerDown() async throws {
        try await withTemporaryDirectory { directory in
            let server = try await ServerProcess.start(in: directory, http: """
                max-connections = 128
                max-connections-per-address = 128
                header-timeout-seconds = 60
                """, descriptors: 256)
            let port = server.port
            var attackers: [RawConnection] = []
            for _ in 0..<400 {
                let connection = try await RawConnection.open(port: port)
                try await connection.send("GET /v1/hea")
                attackers.append(connection)
            }
            let health = try await runProgram("/usr/bin/curl", [
                "-sS", "--max-time", "5", "--interface", "127.0.0.2", "-o", "/dev/null", "-w", "%{http_code}",
                "http://127.0.0.1:\(port)/v1/health",
            ])
            #expect(health.output == "200", "\(health.output)")
            // All but 128 were closed to make room (which ones depends on the order
            // the server's event loops took them in: the oldest idle go first).
            try await RawConnection.closedByServer(count: 400 - 128, of: attackers, within: 20)
            for attacker in attackers { await attacker.close() }
            await server.stop()
            #expect(server.process.exitStatus == 0)
        }
    }

    @Test func limitsThatDoNotFitTheHardDescriptorLimitAreRefusedAtStart() async throws {
        let result = try await serve(nofile: 512, http: "max-connections = 1000\n")
        #expect(result.status == 1)
        #expect(result.output.contains("nearby-server: the connection limits need"), "\(result.output)")
        #expect(result.output.contains("[http] max-connections 1000"))
        #expect(result.output.contains("LimitNOFILE"))
    }

    /// Where nothing raised the limits (a shell, a container, a VM's init):
    /// the kernel's own 1024 soft and 4096 hard. The default `[http]
    /// max-connections` needs more; left unset, it is lowered to what fits,
    /// and the log says so, naming the setting and the limit.
    @Test func underTheKernelsDefaultLimitTheDefaultIsLoweredToFit() async throws {
        let defaults = DescriptorBudget(ServerConfiguration())
        #expect(defaults.needed > 4096)
        let fitting = 4096 - DescriptorBudget.fixedReserve - DescriptorBudget.perProcessor * defaults.processors
        try await withTemporaryDirectory { directory in
            let server = try await ServerProcess.start(in: directory, descriptors: 1024, hardDescriptors: 4096)
            let health = try await runProgram("/usr/bin/curl", [
                "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", "\(server.baseURL)/v1/health",
            ])
            #expect(health.output == "200", "\(health.output)")
            #expect(server.process.lineCount(containing: "[http] max-connections lowered from its default 16384 to \(fitting) "
                                             + "to fit the file descriptor limit (RLIMIT_NOFILE hard limit 4096") == 1,
                    "\(server.process.output)")
            #expect(try openFilesLimit(of: server.process.pid) == 4096)
            await server.stop()
        }
    }

    /// At the edge: a hard limit of exactly what the defaults need leaves
    /// them as they are; one descriptor fewer lowers the default by one.
    @Test(arguments: [0, 1]) func theDefaultIsLoweredOnlyWhenItDoesNotFit(short: Int) async throws {
        let needed = DescriptorBudget(ServerConfiguration()).needed
        try await withTemporaryDirectory { directory in
            let server = try await ServerProcess.start(in: directory, descriptors: 1024, hardDescriptors: needed - short)
            #expect(try openFilesLimit(of: server.process.pid) == needed - short)
            let notices = server.process.lineCount(containing: "[http] max-connections lowered from its default 16384 to "
                                                    + "\(16_384 - short) ")
            #expect(notices == short, "\(server.process.output)")
            #expect(server.process.lineCount(containing: "max-connections lowered") == short)
            await server.stop()
            #expect(server.process.exitStatus == 0)
        }
    }

    /// A configured `[http] max-connections` is never lowered: the default's
    /// own value, set explicitly, needs every descriptor it asks for.
    @Test(arguments: [0, 1]) func aConfiguredLimitIsNotLowered(short: Int) async throws {
        let needed = DescriptorBudget(ServerConfiguration()).needed
        try await withTemporaryDirectory { directory in
            let config = directory.appendingPathComponent("nearby-server.conf")
            try "[http]\nlisten = \"127.0.0.1:0\"\nmax-connections = 16384\n[database]\npath = \"\(directory.path)/db.sqlite\"\n"
                .write(to: config, atomically: true, encoding: .utf8)
            let process = try await ChildProcess(name: "nearby-server", executable: "/usr/bin/prlimit", arguments: [
                "--nofile=1024:\(needed - short)", "--", executable!.path, "serve", "--config", config.path,
            ])
            if short == 0 {
                try await process.waitForLine(containing: "nearby-server: listening on ")
                #expect(try openFilesLimit(of: process.pid) == needed)
                await process.stop()
                #expect(process.exitStatus == 0)
            } else {
                #expect(try await process.waitForExit(within: 30) == 1)
                #expect(process.output.contains("nearby-server: the connection limits need \(needed) file descriptors"),
                        "\(process.output)")
                #expect(process.output.contains("[http] max-connections 16384"))
            }
            #expect(process.lineCount(containing: "max-connections lowered") == 0)
        }
    }

    /// Lowering stops at `[http] max-connections-per-address`: below it the
    /// server refuses to start, saying the sum, as for a configured limit.
    @Test func theDefaultIsNotLoweredBelowThePerAddressLimit() async throws {
        let configuration = ServerConfiguration()
        let others = DescriptorBudget.fixedReserve + DescriptorBudget.perProcessor * 2
        let fits = others + configuration.http.maxConnectionsPerAddress
        #expect(DescriptorBudget.fittingDefault(configuration, hardLimit: fits, processors: 2)?.configuration.http.maxConnections
                == configuration.http.maxConnectionsPerAddress)
        #expect(DescriptorBudget.fittingDefault(configuration, hardLimit: fits - 1, processors: 2) == nil)
        #expect(DescriptorBudget.fittingDefault(configuration, hardLimit: others + 16_384, processors: 2) == nil)
        var withXMPP = configuration
        withXMPP.xmpp.certificatePath = "/c"
        withXMPP.xmpp.privateKeyPath = "/k"
        #expect(DescriptorBudget.fittingDefault(withXMPP, hardLimit: 4096, processors: 2)?.configuration.http.maxConnections
                == 4096 - 1000 - 256 - others)
        let result = try await serve(nofile: 128, http: "")
        #expect(result.status == 1)
        #expect(result.output.contains("nearby-server: the connection limits need"), "\(result.output)")
        #expect(result.output.contains("[http] max-connections 16384"))
    }

    /// `nearby-server serve` with these `[http]` settings besides its
    /// address, and a database of its own, under a descriptor limit of
    /// `nofile`, run to its end.
    private func serve(nofile: Int, http: String) async throws -> ProgramResult {
        try await withTemporaryDirectory { directory in
            let config = directory.appendingPathComponent("nearby-server.conf")
            try "[http]\nlisten = \"127.0.0.1:0\"\n\(http)[database]\npath = \"\(directory.path)/db.sqlite\"\n"
                .write(to: config, atomically: true, encoding: .utf8)
            return try await runProgram("/usr/bin/prlimit", [
                "--nofile=\(nofile):\(nofile)", "--", executable!.path, "serve", "--config", config.path,
            ])
        }
    }

    /// The soft `Max open files` of a running process.
    private func openFilesLimit(of pid: Int32) throws -> Int {
        let limits = try String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)
        let line = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max open files") })
        return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[3]))
    }

    @Test func theBudgetAddsTheConnectionLimitsAndTheReserve() {
        var configuration = ServerConfiguration()
        configuration.http.maxConnections = 4096
        #expect(DescriptorBudget(configuration, processors: 2).needed == 4096 + 64 + 8)
        configuration.xmpp.certificatePath = "/c"
        configuration.xmpp.privateKeyPath = "/k"
        #expect(DescriptorBudget(configuration, processors: 2).needed == 4096 + 1000 + 256 + 64 + 8)
    }
}
