import DBus
import Foundation
import NearbyMessages
import Testing
import TestSupport

/// nearbyd and nearby-server over TLS: the server serves its API with a
/// certificate, the daemons check it against `[server] ca-file` (or the
/// system's CAs), the REST calls and the WebSockets alike.
@Suite(.serialized) struct ServerTLSTests {
    /// Discovery over `https://` and `wss://`, and `nearbyctl status` saying
    /// the server is connected, and at which URL.
    @Test func devicesFindEachOtherThroughAServerTheyReachOverTLS() async throws {
        try await withCluster(Cluster.Options(tls: true)) { cluster in
            #expect(cluster.serverURL.hasPrefix("https://"))
            let key = try await cluster.createProject("tls")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (1, 0))
            let subscription = try await MessageManager(b, apiKey: key).record()
            let publication = try await MessageManager(a, apiKey: key).publish("sealed")
            // Found: the token came over REST, the match over the stream's WebSocket.
            try await subscription.wait(.found, "sealed")
            let status = try await runProgram(Programs.path("nearbyctl"), ["status", "--bus", b.busAddress, "--json"])
            #expect(status.output.contains(#""server":"connected: \#(cluster.serverURL)""#), "\(status.output)")
            try await publication.unpublish()
            try await subscription.wait(.lost, "sealed")
        }
    }

    /// A daemon that does not trust the server's certificate does not talk
    /// to it, and says why where its administrator looks: the journal (here
    /// its log) and `nearbyctl status`; its objects wait with the same reason.
    @Test func aCertificateTheDaemonDoesNotTrustIsRefusedWithAClearError() async throws {
        try await withCluster(Cluster.Options(tls: true, daemonsTrustServer: false)) { cluster in
            let key = try await cluster.createProject("untrusted")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let idle = try await runProgram(Programs.path("nearbyctl"), ["status", "--bus", a.busAddress])
            #expect(idle.output.contains("server:              idle"), "\(idle.output)")
            let publication = try await MessageManager(a, apiKey: key).publish("never sent")
            let logged = try await a.daemon.waitForLine(containing: "TLS certificate is not trusted")
            #expect(logged.contains("the system's CA store"), "\(logged)")
            let status = try await runProgram(Programs.path("nearbyctl"), ["status", "--bus", a.busAddress])
            #expect(status.output.contains("server:              unreachable: cannot reach nearby-server"), "\(status.output)")
            #expect(status.output.contains("TLS certificate is not trusted"), "\(status.output)")
            #expect(try await publication.status == "starting")
            #expect(try await publication.statusReason.contains("TLS certificate is not trusted"))
        }
    }

    /// `[server] ca-file` that cannot be used stops nearbyd at start, naming it.
    @Test func aCAFileThatCannotBeReadStopsTheDaemonAtStart() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let bus = try await PrivateBus(policy: .open)
        let configuration = try directory.write("nearbyd.conf", """
            [server]
            url = "https://localhost:9"
            ca-file = "\(directory.file("missing.pem"))"
            """)
        let result = try await runProgram(Programs.path("nearbyd"), [
            "--config", configuration, "--bus", bus.address, "--state-dir", directory.file("state"),
            "--air-socket", directory.file("none.sock"),
        ])
        #expect(result.status != 0)
        #expect(result.output.contains("[server] ca-file: cannot read \(directory.file("missing.pem"))"), "\(result.output)")
        await bus.stop()
    }
}
