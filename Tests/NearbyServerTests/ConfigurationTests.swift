import ConfigFile
import Foundation
@testable import NearbyServer
import ServerAPI
import Testing

@Suite struct ConfigurationTests {
    @Test func emptyFileMeansDefaults() throws {
        let configuration = try ServerConfiguration.parse("", source: "test.conf")
        #expect(configuration == ServerConfiguration())
        #expect(configuration.listen == ListenAddress(host: "127.0.0.1", port: 8080))
        #expect(configuration.http.maxConnections == 16_384)
        #expect(!configuration.http.maxConnectionsConfigured)
        #expect(configuration.http.maxConnectionsPerAddress == 256)
        #expect(configuration.http.headerTimeoutSeconds == 10)
        #expect(configuration.http.idleTimeoutSeconds == 60)
        #expect(configuration.http.requestTimeoutSeconds == 30)
        #expect(configuration.http.maxRequestLineBytes == 8192)
        #expect(configuration.http.maxHeaderBytes == 32_768)
        #expect(configuration.databasePath == "/var/lib/nearby-server/nearby.sqlite")
        #expect(configuration.tokenLifetimeSeconds == 600)
        #expect(configuration.tokenOverlapSeconds == 60)
        #expect(configuration.edgeTimeoutSeconds == 30)
        #expect(configuration.limits.maxBodyBytes == 262_144)
        #expect(configuration.limits.maxPublicationsPerDevice == 1024)
        #expect(configuration.limits.maxSubscriptionsPerDevice == 256)
        #expect(configuration.limits.maxSightingsPerReport == 256)
        #expect(configuration.limits.maxChangesPerBatch == 256)
        #expect(configuration.limits.maxDevicesPerProject == 100_000)
        #expect(configuration.limits.maxStreamBufferBytes == 16_777_216)
        #expect(configuration.limits.snapshotPageBytes == 1_048_576)
        #expect(configuration.limits.maxObservationsPerRequest == 100)
        #expect(configuration.limits.maxNamespacedTypesPerRequest == 16)
        #expect(configuration.limits.registrationsPerAddressPerMinute == 10)
        #expect(configuration.limits.registrationsPerProjectPerMinute == 600)
        #expect(configuration.limits.deviceIdleDays == 90)
        #expect(configuration.limits.deletedDeviceDays == 30)
        #expect(configuration.xmpp.listen == ListenAddress(host: "127.0.0.1", port: 5235))
        #expect(configuration.xmpp.domain == "nearby.local")
        #expect(!configuration.xmpp.isEnabled)
        #expect(configuration.xmpp.maxStanzaBytes == 65_536)
        #expect(configuration.xmpp.maxConnections == 1000)
        #expect(configuration.xmpp.maxConnectionsPerProject == 100)
        #expect(configuration.http.maxWebSocketsPerProject == nil)
        #expect(configuration.http.websocketsPerProject == 12_288, "three quarters of max-connections")
        #expect(configuration.xmpp.maxUnackedPerConnection == 100)
        #expect(configuration.xmpp.maxPendingDownstreamPerDevice == 100)
        #expect(configuration.xmpp.maxPendingReceiptsPerProject == 10_000)
    }

    @Test func everyKeyIsRead() throws {
        let configuration = try ServerConfiguration.parse("""
            [http]
            listen = "[::1]:9000"
            max-connections = 100
            max-connections-per-address = 20
            max-websockets-per-project = 50
            header-timeout-seconds = 5
            idle-timeout-seconds = 30
            request-timeout-seconds = 15
            max-request-line-bytes = 2048
            max-header-bytes = 8192
            [database]
            path = "/tmp/x.sqlite"
            [tokens]
            lifetime-seconds = 300
            overlap-seconds = 30
            [discovery]
            edge-timeout-seconds = 10
            [limits]
            max-body-bytes = 500000
            max-publications-per-device = 10
            max-subscriptions-per-device = 11
            max-sightings-per-report = 300
            max-changes-per-batch = 200
            max-devices-per-project = 13
            max-stream-buffer-bytes = 2000000
            snapshot-page-bytes = 100000
            max-observations-per-request = 50
            max-namespaced-types-per-request = 8
            max-query-terms = 100
            registrations-per-address-per-minute = 4
            registrations-per-project-per-minute = 40
            device-idle-days = 7
            deleted-device-days = 2
            [xmpp]
            listen = "0.0.0.0:5236"
            domain = "ccs.example.org"
            certificate = "/etc/x.pem"
            private-key = "/etc/x.key"
            max-stanza-bytes = 40000
            max-connections = 7
            max-connections-per-project = 3
            max-unacked-per-connection = 20
            max-pending-downstream-per-device = 30
            max-pending-receipts-per-project = 5
            """, source: "test.conf")
        #expect(configuration.listen == ListenAddress(host: "::1", port: 9000))
        #expect(configuration.http.maxConnections == 100)
        #expect(configuration.http.maxConnectionsConfigured)
        #expect(configuration.http.maxConnectionsPerAddress == 20)
        #expect(configuration.http.websocketsPerProject == 50)
        #expect(configuration.http.headerTimeoutSeconds == 5)
        #expect(configuration.http.idleTimeoutSeconds == 30)
        #expect(configuration.http.requestTimeoutSeconds == 15)
        #expect(configuration.http.maxRequestLineBytes == 2048)
        #expect(configuration.http.maxHeaderBytes == 8192)
        #expect(configuration.databasePath == "/tmp/x.sqlite")
        #expect(configuration.tokenLifetimeSeconds == 300)
        #expect(configuration.tokenOverlapSeconds == 30)
        #expect(configuration.edgeTimeoutSeconds == 10)
        #expect(configuration.limits.maxBodyBytes == 500_000)
        #expect(configuration.limits.maxPublicationsPerDevice == 10)
        #expect(configuration.limits.maxSubscriptionsPerDevice == 11)
        #expect(configuration.limits.maxSightingsPerReport == 300)
        #expect(configuration.limits.maxChangesPerBatch == 200)
        #expect(configuration.limits.maxDevicesPerProject == 13)
        #expect(configuration.limits.maxStreamBufferBytes == 2_000_000)
        #expect(configuration.limits.snapshotPageBytes == 100_000)
        #expect(configuration.limits.maxObservationsPerRequest == 50)
        #expect(configuration.limits.maxNamespacedTypesPerRequest == 8)
        #expect(configuration.limits.maxQueryTerms == 100)
        #expect(configuration.limits.registrationsPerAddressPerMinute == 4)
        #expect(configuration.limits.registrationsPerProjectPerMinute == 40)
        #expect(configuration.limits.deviceIdleDays == 7)
        #expect(configuration.limits.deletedDeviceDays == 2)
        #expect(configuration.xmpp.listen == ListenAddress(host: "0.0.0.0", port: 5236))
        #expect(configuration.xmpp.domain == "ccs.example.org")
        #expect(configuration.xmpp.certificatePath == "/etc/x.pem")
        #expect(configuration.xmpp.privateKeyPath == "/etc/x.key")
        #expect(configuration.xmpp.isEnabled)
        #expect(configuration.xmpp.maxStanzaBytes == 40_000)
        #expect(configuration.xmpp.maxConnections == 7)
        #expect(configuration.xmpp.maxConnectionsPerProject == 3)
        #expect(configuration.xmpp.maxUnackedPerConnection == 20)
        #expect(configuration.xmpp.maxPendingDownstreamPerDevice == 30)
        #expect(configuration.xmpp.maxPendingReceiptsPerProject == 5)
    }

    @Test(arguments: [
        ("[nope]\nx = 1", "unknown section [nope]"),
        ("[http]\nport = 80", "unknown key 'port' in [http]"),
        ("[http]\nmax-connections = 0", "[http] max-connections is 0"),
        ("[http]\nmax-connections = 10\nmax-connections-per-address = 11", "[http] max-connections-per-address is 11; it must be between 1 and 10"),
        ("[http]\nheader-timeout-seconds = 0", "[http] header-timeout-seconds is 0"),
        ("[http]\nidle-timeout-seconds = 0", "[http] idle-timeout-seconds is 0"),
        ("[http]\nrequest-timeout-seconds = 3601", "[http] request-timeout-seconds is 3601"),
        ("[http]\nmax-request-line-bytes = 1023", "[http] max-request-line-bytes is 1023"),
        ("[http]\nmax-request-line-bytes = 9000\nmax-header-bytes = 8999", "[http] max-header-bytes is 8999; it must be between 9000"),
        ("[tokens]\nlifetime-seconds = \"600\"", "[tokens] lifetime-seconds must be an integer"),
        ("[tokens]\nlifetime-seconds = 600\noverlap-seconds = 600", "overlap-seconds is 600"),
        ("[tokens]\nlifetime-seconds = 10", "[tokens] lifetime-seconds is 10"),
        ("[discovery]\nedge-timeout-seconds = 0", "[discovery] edge-timeout-seconds is 0"),
        ("[limits]\nmax-body-bytes = 1000", "[limits] max-body-bytes is 1000"),
        ("[limits]\nmax-devices-per-project = 0", "[limits] max-devices-per-project is 0"),
        ("[limits]\nmax-changes-per-batch = 0", "[limits] max-changes-per-batch is 0"),
        ("[limits]\nmax-changes-per-batch = 100001", "[limits] max-changes-per-batch is 100001"),
        ("[limits]\nmax-stream-buffer-bytes = 1000", "[limits] max-stream-buffer-bytes is 1000"),
        ("[limits]\nmax-stream-buffer-bytes = 2000000000", "[limits] max-stream-buffer-bytes is 2000000000"),
        ("[limits]\nsnapshot-page-bytes = 65535", "[limits] snapshot-page-bytes is 65535"),
        ("[limits]\nmax-stream-buffer-bytes = 2000000\nsnapshot-page-bytes = 2000001", "[limits] snapshot-page-bytes is 2000001; it must be between 65536 and 2000000"),
        ("[limits]\nsnapshot-page-bytes = 16777217\nmax-stream-buffer-bytes = 33554432", "[limits] snapshot-page-bytes is 16777217; it must be between 65536 and 16777216"),
        ("[limits]\nregistrations-per-address-per-minute = 0", "[limits] registrations-per-address-per-minute is 0"),
        ("[limits]\nregistrations-per-project-per-minute = 600001", "[limits] registrations-per-project-per-minute is 600001"),
        ("[limits]\ndevice-idle-days = 0", "[limits] device-idle-days is 0"),
        ("[limits]\ndeleted-device-days = 3651", "[limits] deleted-device-days is 3651"),
        ("[limits]\nmax-observations-per-request = 0", "[limits] max-observations-per-request is 0"),
        ("[limits]\nmax-observations-per-request = 10001", "[limits] max-observations-per-request is 10001"),
        ("[limits]\nmax-namespaced-types-per-request = 0", "[limits] max-namespaced-types-per-request is 0"),
        ("[limits]\nmax-namespaced-types-per-request = 1001", "[limits] max-namespaced-types-per-request is 1001"),
        ("[limits]\nmax-query-terms = 0", "[limits] max-query-terms is 0"),
        ("[limits]\nmax-query-terms = 101", "[limits] max-query-terms is 101"),
        ("[http]\nlisten = \"localhost\"", "must be HOST:PORT"),
        ("[http]\nlisten = \"localhost:70000\"", "port between 0 and 65535"),
        ("[database]\npath = \"\"", "[database] path must not be empty"),
        ("listen = 1", "'listen' is outside any section"),
        ("[http\n", "test.conf: line 1"),
        ("[xmpp]\ncertificate = \"/x.pem\"", "[xmpp] certificate and private-key go together"),
        ("[xmpp]\ndomain = \"not a host\"", "[xmpp] domain 'not a host' must be a host name"),
        ("[xmpp]\nmax-stanza-bytes = 1000", "[xmpp] max-stanza-bytes is 1000"),
        ("[xmpp]\nmax-unacked-per-connection = 0", "[xmpp] max-unacked-per-connection is 0"),
        ("[xmpp]\nmax-pending-downstream-per-device = 0", "[xmpp] max-pending-downstream-per-device is 0"),
        ("[xmpp]\nmax-pending-receipts-per-project = 0", "[xmpp] max-pending-receipts-per-project is 0"),
        ("[xmpp]\nlisten = \"nowhere\"", "[xmpp] listen 'nowhere' must be HOST:PORT"),
        ("[http]\ncertificate = \"/etc/nearby-server/server.pem\"", "[http] certificate and private-key go together"),
        ("[http]\nprivate-key = \"/etc/nearby-server/server.key\"", "[http] certificate and private-key go together"),
    ])
    func rejectsWithAClearMessage(text: String, expected: String) {
        #expect {
            try ServerConfiguration.parse(text, source: "test.conf")
        } throws: { error in
            let message = "\(error)"
            return message.hasPrefix("test.conf") && message.contains(expected)
        }
    }

    /// A server that refused nearbyd's largest requests would have it send them again forever.
    @Test(arguments: [
        ("max-body-bytes = 262143",
         "[limits] max-body-bytes is 262143; it must be between 262144 and 16777216 (room for the largest change batch nearbyd sends)"),
        ("max-changes-per-batch = 127",
         "[limits] max-changes-per-batch is 127; it must be between 128 and 100000 (nearbyd sends up to 128 changes at once)"),
        ("max-sightings-per-report = 255",
         "[limits] max-sightings-per-report is 255; it must be between 256 and 100000 (nearbyd reports up to 256 sightings at once)"),
    ])
    func limitsBelowWhatNearbydSendsAreRefused(line: String, expected: String) {
        #expect(throws: ConfigurationError("test.conf: \(expected)")) {
            try ServerConfiguration.parse("[limits]\n\(line)", source: "test.conf")
        }
    }

    @Test func limitsExactlyWhatNearbydSendsAreAccepted() throws {
        let configuration = try ServerConfiguration.parse("""
            [limits]
            max-body-bytes = \(ServerConfiguration.minimumBodyBytes)
            max-changes-per-batch = \(ClientBatchLimits.maxChangesPerBatch)
            max-sightings-per-report = \(ClientBatchLimits.maxSightingsPerReport)
            """, source: "test.conf")
        #expect(configuration.limits.maxBodyBytes >= ClientBatchLimits.maxChangeBatchBytes)
        #expect(configuration.limits.maxChangesPerBatch == 128)
        #expect(configuration.limits.maxSightingsPerReport == 256)
        // The defaults leave nearbyd room too.
        try ServerConfiguration().validate()
    }

    @Test func missingFile() async throws {
        // The default file may be absent; a file named on the command line may not.
        #expect(try ServerConfiguration.load(path: "/nonexistent/nearby-server.conf", required: false) == ServerConfiguration())
        #expect(throws: ConfigurationError("/nonexistent/nearby-server.conf: no such file")) {
            try ServerConfiguration.load(path: "/nonexistent/nearby-server.conf", required: true)
        }
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("n.conf").path
            try Data("[discovery]\nedge-timeout-seconds = 5\n".utf8).write(to: URL(fileURLWithPath: path))
            #expect(try ServerConfiguration.load(path: path, required: true).edgeTimeoutSeconds == 5)
        }
    }

    @Test func listenAddresses() throws {
        #expect(try ListenAddress(parsing: "0.0.0.0:0") == ListenAddress(host: "0.0.0.0", port: 0))
        #expect(try ListenAddress(parsing: "[::]:443") == ListenAddress(host: "::", port: 443))
        #expect(ListenAddress(host: "::1", port: 80).description == "[::1]:80")
        #expect(ListenAddress(host: "example.org", port: 80).description == "example.org:80")
        #expect(throws: ConfigurationError.self) { try ListenAddress(parsing: ":80") }
        #expect(throws: ConfigurationError.self) { try ListenAddress(parsing: "::1:80") }
        #expect(throws: ConfigurationError.self) { try ListenAddress(parsing: "[::1]80") }
    }
}
