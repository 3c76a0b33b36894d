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
        try await withTemporaryDirectory { directory in
            let config = directory.appendingPathComponent("nearby-server.conf")
            try "[http]\nlisten = \"127.0.0.1:0\"\nmax-connections = 1000\n[database]\npath = \"\(directory.path)/db.sqlite\"\n"
                .write(to: config, atomically: true, encoding: .utf8)
            let result = try await runProgram("/usr/bin/prlimit", [
                "--nofile=512:512", "--", executable!.path, "serve", "--config", config.path,
            ])
            #expect(result.status == 1)
            #expect(result.output.contains("nearby-server: the connection limits need"), "\(result.output)")
            #expect(result.output.contains("[http] max-connections 1000"))
            #expect(result.output.contains("LimitNOFILE"))
        }
    }

    /// Where nothing raised the limits (a shell, a container, a VM's init):
    /// the kernel's own 1024 soft and 4096 hard. The defaults, XMPP's
    /// included, fit below that hard limit, so the server starts as it ships.
    @Test func theDefaultsFitTheKernelsDefaultLimit() async throws {
        var configuration = ServerConfiguration()
        configuration.xmpp.certificatePath = "/c"
        configuration.xmpp.privateKeyPath = "/k"
        #expect(DescriptorBudget(configuration, processors: 128).needed <= 4096)
        try await withTemporaryDirectory { directory in
            let server = try await ServerProcess.start(in: directory, descriptors: 1024, hardDescriptors: 4096)
            let health = try await runProgram("/usr/bin/curl", [
                "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", "\(server.baseURL)/v1/health",
            ])
            #expect(health.output == "200", "\(health.output)")
            await server.stop()
        }
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
