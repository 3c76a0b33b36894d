import Foundation
import Logging
@testable import NearbyDaemon
import ServerAPI
import Testing
import TestSupport

/// The WebSockets of the API (the stream, the direct channel) fail as the
/// REST calls do: a certificate nearbyd does not trust is explained the same
/// way, in the words the journal and `nearbyctl status` show.
@Suite(.timeLimit(.minutes(1))) struct DeviceSocketTests {
    @Test func aWebSocketToAServerWhoseCertificateIsNotTrustedSaysSo() async throws {
        let cluster = try await Cluster(options: Cluster.Options(tls: true))
        do {
            // The daemon's own TLS settings without a ca-file: the system's CAs only.
            let tls = try ServerTLS.configuration(url: cluster.serverURL, caFile: nil)
            let server = ServerClient(baseURL: cluster.serverURL, timeoutSeconds: 10, tls: tls)
            let device = DeviceRegistration(device: "d", secret: "s", project: "p", namespace: "p")
            let (requests, _) = AsyncStream.makeStream(of: ChannelRequest.self)
            let error = await #expect(throws: ServerCallError.self) {
                try await DeviceSocket.run(server: server, path: APIPath.channel("d"), device: device, maxFrameBytes: 1 << 16,
                                           requests: requests, logger: Logger(label: "test"), opened: {}, received: { _ in })
            }
            let words = error.map { "\($0)" } ?? ""
            #expect(words.contains("WebSocket \(APIPath.channel("d")): the server's TLS certificate is not trusted"), "\(words)")
            #expect(words.contains("the system's CA store"), "\(words)")
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }
}
