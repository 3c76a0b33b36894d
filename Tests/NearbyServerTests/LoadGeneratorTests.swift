import Foundation
import TestSupport
import Testing

/// nearby-load, the devices of `nearby-bench server`, where the build put it next to the tests.
private let generator: URL? = {
    let candidate = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("nearby-load")
    return FileManager.default.isExecutableFile(atPath: candidate.path) ? candidate : nil
}()

/// The benchmark's generator against a real server: what its figures rest on
/// (every device set up, its reports answered and their found and lost on
/// the devices' streams) holds, so that a broken generator fails here, by
/// name, rather than as a figure that moved.
@Suite(.enabled(if: executable != nil && generator != nil, "needs nearby-server and nearby-load (swift build --build-tests builds them)"),
       .timeLimit(.minutes(2)))
struct LoadGeneratorTests {
    @Test func devicesSetUpHoldStreamsAndTheirReportsAreFoundAndLost() async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.appendingPathComponent("nearby.sqlite").path
            let created = try await run(["project", "create", "bench", "--json", "--database", database])
            let keys = try #require(try JSONSerialization.jsonObject(with: Data(created.output.utf8)) as? [String: String])
            let server = try await ServerProcess.start(in: directory, configuration: """
                [limits]
                registrations-per-address-per-minute = 6000
                """)
            let load = try await ChildProcess(name: "nearby-load", executable: try #require(generator).path, arguments: [
                "--urls", server.baseURL, "--key", try #require(keys["apiKey"]), "--devices", "12", "--idle", "4",
                "--neighbours", "2", "--per-address", "4", "--seed", "7",
            ], takesInput: true)
            try await load.waitForLine(containing: #"{"ready": true}"#)
            var lastID = 0
            func command(_ fields: String) async throws -> [String: Any] {
                lastID += 1
                load.send(#"{"id": \#(lastID), \#(fields)}"#)
                let line = try await load.waitForLine(containing: "{\"done\": \(lastID),", within: 30)
                let done = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                return try #require(done["result"] as? [String: Any])
            }

            let setup = try await command(#""do": "setup""#)
            #expect(setup["failed"] as? Int == 0)
            let counts = try #require(setup["counts"] as? [String: Int])
            #expect(counts["register 201"] == 16 && counts["token 201"] == 12, "\(counts)")
            #expect(counts["publications 200"] == 12 && counts["subscriptions 200"] == 12, "\(counts)")

            let opened = try await command(#""do": "open", "within": 20"#)
            #expect(opened["open"] as? Int == 16, "\(opened)")
            let held = try await command(#""do": "held""#)
            #expect(held["by_url"] as? [String: Int] == [server.baseURL: 16], "\(held)")

            // Closed loop: every report answered 200, and the edges each one
            // made and ended reached the observers' streams.
            let closed = try await command(#""do": "run", "kind": "sightings", "concurrency": 4, "warmup": 0.2, "seconds": 1"#)
            let requests = try #require(closed["requests"] as? Int)
            #expect(requests > 0 && closed["outcomes"] as? [String: Int] == ["200": requests], "\(closed)")
            let events = try #require(closed["events"] as? [String: Int])
            #expect((events["found"] ?? 0) > 0 && (events["lost"] ?? 0) > 0, "\(events)")

            // Open loop: each answer timed, each found that a report's new neighbour made too.
            let paced = try await command(#""do": "run", "kind": "sightings", "rate": 40, "warmup": 0.2, "seconds": 1"#)
            let pacedRequests = try #require(paced["requests"] as? Int)
            #expect(pacedRequests > 0 && (paced["latencies"] as? [Double])?.count == pacedRequests, "\(paced)")
            #expect(((paced["found"] as? [Double])?.count ?? 0) > 0, "\(paced)")

            let health = try await command(#""do": "run", "kind": "health", "concurrency": 2, "warmup": 0.1, "seconds": 0.5"#)
            let healthRequests = try #require(health["requests"] as? Int)
            #expect(healthRequests > 0 && health["outcomes"] as? [String: Int] == ["200": healthRequests], "\(health)")

            #expect(try await command(#""do": "close""#)["open"] as? Int == 0)
            load.send(#"{"id": 99, "do": "quit"}"#)
            #expect(try await load.waitForExit(within: 20) == 0)
            await server.stop()
        }
    }
}
