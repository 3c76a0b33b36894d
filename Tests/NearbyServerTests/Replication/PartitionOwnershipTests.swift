import Foundation
import NearbyServer
import ServerAPI
import Testing
import TestSupport

/// Real nearby-server replicas on one PostgreSQL database divide the 256
/// partitions, as an operator sees them with `nearby-server replicas`: evenly
/// once they have all started; a killed replica's are taken by the others once
/// its leases run out, not before; a stopped replica's at once.
@Suite(.postgresCluster, .timeLimit(.minutes(3))) struct PartitionOwnershipTests {
    struct Status: Decodable, Equatable {
        struct Replica: Decodable, Equatable { var id: String; var url: String; var partitions: Int }
        var replicas: [Replica]
        var unowned: Int
    }

    static func status(_ database: String) async throws -> Status {
        let result = try await run(["replicas", "--database", database, "--json"])
        #expect(result.status == 0, "\(result.errors)")
        return try JSONDecoder().decode(Status.self, from: Data(result.output.utf8))
    }

    /// The status once `condition` holds of it, asked every 200 ms; fails
    /// naming `what` after `seconds`.
    static func status(_ database: String, within seconds: Double, _ what: String,
                       until condition: @escaping @Sendable (Status) -> Bool) async throws -> Status {
        try await withTimeout(seconds, what) {
            while true {
                let status = try await Self.status(database)
                if condition(status) { return status }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    @Test func replicasDivideThePartitionsAndTakeOverThoseOfOneThatGoes() async throws {
        let cluster = try #require(PostgresClusterTrait.current)
        let database = try await cluster.createDatabase()
        // Rounds every 2 s: a dead replica's partitions wait out 6 s.
        let leaseSeconds = 6.0
        try await withTemporaryDirectory { directory in
            var servers: [ServerProcess] = []
            for index in 0..<3 {
                let place = directory.appendingPathComponent("replica-\(index)")
                try FileManager.default.createDirectory(at: place, withIntermediateDirectories: true)
                servers.append(try await ServerProcess.start(in: place, database: database,
                                                             configuration: "[replication]\nlease-seconds = \(Int(leaseSeconds))\n"))
            }
            defer { for server in servers { server.process.signal(SIGKILL) } }

            let even = try await Self.status(database, within: 60, "three replicas holding 86, 85 and 85 partitions") {
                $0.replicas.count == 3 && $0.unowned == 0 && $0.replicas.map(\.partitions).sorted() == [85, 85, 86]
            }
            // Each is reached at the URL it listens on.
            #expect(Set(even.replicas.map(\.url)) == Set(servers.map(\.baseURL)))

            // A device's requests reach the replica that owns its partition:
            // the others redirect them there, query and all.
            let project = try await run(["project", "create", "alpha", "--database", database, "--json"])
            let apiKey = try #require(try JSONSerialization.jsonObject(with: Data(project.output.utf8)) as? [String: Any])["apiKey"] as! String
            let registered = try await runProgram("/usr/bin/curl", ["-s", "-X", "POST", "-H", "X-Api-Key: \(apiKey)",
                                                                    "\(servers[0].baseURL)/v1/devices"])
            let device = try JSONDecoder().decode(DeviceRegistration.self, from: Data(registered.output.utf8))
            var answers: [String: String] = [:]
            for server in servers {
                let answer = try await runProgram("/usr/bin/curl", [
                    "-s", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", "-H", "Authorization: Bearer \(device.secret)",
                    "\(server.baseURL)/v1/devices/\(device.device)/publications?page=1"])
                answers[server.baseURL] = answer.output
            }
            let served = answers.filter { $0.value.hasPrefix("200") }.map(\.key)
            #expect(served.count == 1, "\(answers)")
            let home = try #require(served.first)
            for (url, answer) in answers where url != home {
                #expect(answer == "307 \(home)/v1/devices/\(device.device)/publications?page=1", "\(url): \(answer)")
            }
            let elsewhere = try #require(servers.map(\.baseURL).first { $0 != home })
            let upgrade = try await runProgram("/usr/bin/curl", [
                "-s", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", "-H", "Authorization: Bearer \(device.secret)",
                "-H", "Connection: Upgrade", "-H", "Upgrade: websocket", "-H", "Sec-WebSocket-Version: 13",
                "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "\(elsewhere)/v1/devices/\(device.device)/stream"])
            // An upgrade cannot be redirected (Hummingbird refuses what it does
            // not upgrade with 400); the device's REST calls say where it goes.
            #expect(upgrade.output == "400 ")
            // --location-trusted: curl sends the credential on to another port.
            let followed = try await runProgram("/usr/bin/curl", ["-s", "--location-trusted", "-o", "/dev/null", "-w", "%{http_code}",
                                                                  "-H", "Authorization: Bearer \(device.secret)",
                                                                  "\(elsewhere)/v1/devices/\(device.device)/publications"])
            #expect(followed.output == "200")

            // kill -9: its partitions stay its own until its leases run out.
            servers[2].process.signal(SIGKILL)
            _ = try await servers[2].process.waitForExit()
            let killedAt = ContinuousClock.now
            _ = try await Self.status(database, within: leaseSeconds * 2 + 10, "the two left holding 128 each") {
                $0.replicas.count == 2 && $0.unowned == 0 && $0.replicas.map(\.partitions) == [128, 128]
            }
            let takeover = ContinuousClock.now - killedAt
            // Its last renewal was at most a round (a third of the lease, and
            // the round's own time) before it died.
            #expect(takeover >= .seconds(leaseSeconds / 2), "taken over after \(takeover), before its leases ran out")

            // SIGTERM: given up at once, taken at the other's next round,
            // well within a lease.
            let stoppedAt = ContinuousClock.now
            await servers[1].stop()
            _ = try await Self.status(database, within: 20, "the last replica holding all 256") {
                $0.replicas.count == 1 && $0.unowned == 0 && $0.replicas[0].partitions == 256
            }
            let handover = ContinuousClock.now - stoppedAt
            #expect(handover < .seconds(leaseSeconds), "handed over after \(handover)")
        }
    }

    @Test func aServerOnSQLiteSaysItOwnsEveryPartition() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("nearby.sqlite").path
            #expect(try await run(["project", "create", "alpha", "--database", path]).status == 0)
            let result = try await run(["replicas", "--database", path])
            #expect(result.status == 0)
            #expect(result.output == "one server on SQLite owns every partition: no replicas\n")
        }
    }
}
