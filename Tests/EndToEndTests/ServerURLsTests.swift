import Foundation
import NearbyMessages
import Testing
import TestSupport

/// nearbyd with several `[server] url`s, the real daemon from its
/// configuration file to `nearbyctl status`.
@Suite(.serialized) struct ServerURLsTests {
    /// Nothing listens on port 9 of 127.0.0.1: a connection there is refused at once.
    static let deadReplica = "http://127.0.0.1:9"

    /// A list whose first replica is down: the daemons work through the
    /// second, and `nearbyctl status` names the one in use.
    @Test func daemonsWorkThroughTheReplicaThatAnswersAndSayWhichItIs() async throws {
        try await withCluster(Cluster.Options(serverURLsBefore: [Self.deadReplica])) { cluster in
            let key = try await cluster.createProject("replicas")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (1, 0))
            let subscription = try await MessageManager(b, apiKey: key).record()
            let publication = try await MessageManager(a, apiKey: key).publish("through the second")
            try await subscription.wait(.found, "through the second")
            let status = try await runProgram(Programs.path("nearbyctl"), ["status", "--bus", b.busAddress])
            #expect(status.output.contains("server:              connected: \(cluster.serverURL)\n"), "\(status.output)")
            _ = try await b.daemon.waitForLine(containing: "nearby-server at \(Self.deadReplica) failed")
            withExtendedLifetime(publication) {}
        }
    }

    /// `--server` given twice lists two replicas; `--help` says so.
    @Test func theCommandLineTakesSeveralServers() async throws {
        let help = try await runProgram(Programs.path("nearbyd"), ["--help"])
        // As one line: the help is wrapped to the terminal's width.
        let words = help.output.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        #expect(words.contains("--server <url> Base URL of nearby-server; given again, another replica of it (16 at most"), "\(help.output)")
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let mixed = try await runProgram(Programs.path("nearbyd"), [
            "--config", try directory.write("nearbyd.conf", ""), "--state-dir", directory.file("state"),
            "--server", "https://a.example:8443", "--server", "http://b.example:8080",
        ])
        #expect(mixed.status == 1)
        #expect(mixed.output.contains("[server] url mixes http:// and https:// URLs"), "\(mixed.output)")
    }
}
