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

    /// A server that is down is said in words where the user looks: `nearbyctl
    /// status`, the object's StatusReason and the journal (here the daemon's
    /// log) name the address and the likely cause, never NIO's description.
    @Test func aServerThatIsDownIsSaidInWords() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("down")
            await cluster.stopServer()
            let a = try await cluster.addDevice("A", at: (0, 0))
            let publication = try await MessageManager(a, apiKey: key).publish("waits")
            let refused = "cannot reach nearby-server at \(cluster.serverURL): POST /v1/devices: connection refused (nothing "
                + "listens there: is nearby-server running, and is [server] url right?)"
            let logged = try await a.daemon.waitForLine(containing: "nearby-server link: cannot reach nearby-server")
            #expect(logged.contains(refused), "\(logged)")
            let status = try await runProgram(Programs.path("nearbyctl"), ["status", "--bus", a.busAddress])
            #expect(status.output.contains("server:              unreachable: \(refused)"), "\(status.output)")
            #expect(status.output.contains(refused), "\(status.output)")
            let reason = try await publication.statusReason
            #expect(reason.contains(refused), "\(reason)")
            for text in [logged, status.output, reason] {
                #expect(!text.contains("SingleConnectionFailure") && !text.contains("errno"), "\(text)")
            }
        }
    }

    /// A server whose host name does not resolve is said as such.
    @Test func aHostNameThatDoesNotResolveIsSaidInWords() async throws {
        let url = "http://no-such-host.invalid:8080"
        try await withCluster(Cluster.Options(serverURLsBefore: [url])) { cluster in
            let key = try await cluster.createProject("dns")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let publication = try await MessageManager(a, apiKey: key).publish("waits")
            let logged = try await a.daemon.waitForLine(containing: "at http://no-such-host.invalid:8080 failed")
            #expect(logged.contains("cannot resolve the host name 'no-such-host.invalid'"), "\(logged)")
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
