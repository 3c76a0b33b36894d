import Foundation
@testable import NearbyServer
import TestSupport
import Testing

/// The API over TLS, as the real `nearby-server` serves it when `[http]`
/// names a certificate and key, met by curl: the certificate's CA is
/// trusted and the request answered; plain HTTP on the same port gets no
/// answer; a client that does not trust the certificate refuses it.
@Suite(.enabled(if: executable != nil, "needs the nearby-server executable (swift build --build-tests builds it)"),
       .timeLimit(.minutes(2)))
struct HTTPTLSTests {
    /// A self-signed certificate for localhost, made by `nearby-server certificate`.
    static func certificate(in directory: URL) async throws -> (certificate: String, key: String) {
        let certificate = directory.appendingPathComponent("server.pem").path
        let key = directory.appendingPathComponent("server.key").path
        let made = try await runProgram(executable!.path, ["certificate", "localhost", "--certificate", certificate, "--private-key", key])
        #expect(made.status == 0, "\(made.output)")
        return (certificate, key)
    }

    static func curl(_ arguments: [String]) async throws -> ProgramResult {
        try await runProgram("/usr/bin/curl", ["-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}"] + arguments)
    }

    @Test func theAPIIsServedOverTLSAloneToClientsThatTrustItsCertificate() async throws {
        try await withTemporaryDirectory { directory in
            let (certificate, key) = try await Self.certificate(in: directory)
            let server = try await ServerProcess.start(in: directory, http: """
                certificate = "\(certificate)"
                private-key = "\(key)"
                """)
            #expect(server.scheme == "https")
            let health = try await Self.curl(["--cacert", certificate, "\(server.baseURL)/v1/health"])
            #expect(health.output == "200", "\(health.output)")
            let tls12 = try await Self.curl(["--cacert", certificate, "--tlsv1.2", "--tls-max", "1.2", "\(server.baseURL)/v1/health"])
            #expect(tls12.output == "200", "\(tls12.output)")
            let tls11 = try await Self.curl(["--cacert", certificate, "--tlsv1.1", "--tls-max", "1.1", "\(server.baseURL)/v1/health"])
            #expect(tls11.status == 35 && tls11.output.contains("000"), "TLS 1.1 is refused: \(tls11.status) \(tls11.output)")
            // No plain fallback on the same port.
            let plain = try await Self.curl(["http://127.0.0.1:\(server.port)/v1/health"])
            #expect(plain.status != 0 && plain.output.contains("000"), "\(plain.status) \(plain.output)")
            // The system's CAs do not vouch for a self-signed certificate: curl refuses it (60).
            let untrusted = try await Self.curl(["\(server.baseURL)/v1/health"])
            #expect(untrusted.status == 60, "\(untrusted.output)")
            // The server still answers after all that.
            let again = try await Self.curl(["--cacert", certificate, "\(server.baseURL)/v1/health"])
            #expect(again.output == "200", "\(again.output)")
            await server.stop()
            #expect(server.process.exitStatus == 0)
        }
    }

    /// The header timeout runs from the connection's start: a client that
    /// begins a handshake and stops holds its connection no longer than one
    /// that sends half a request head would.
    @Test func aHandshakeLeftUnfinishedIsClosedAtTheHeaderTimeout() async throws {
        try await withTemporaryDirectory { directory in
            let (certificate, key) = try await Self.certificate(in: directory)
            let server = try await ServerProcess.start(in: directory, http: """
                certificate = "\(certificate)"
                private-key = "\(key)"
                header-timeout-seconds = 3
                """)
            // 3 s: time for the bytes to be sent on a loaded machine before the server gives up on them.
            let stalled = try await RawConnection.open(port: server.port)
            // The first bytes of a TLS record holding a ClientHello, and no more.
            try await stalled.send("\u{16}\u{03}\u{01}")
            try await RawConnection.closedByServer(count: 1, of: [stalled], within: 15)
            await stalled.close()
            await server.stop()
        }
    }

    /// Anyone can make handshakes fail at will (plain HTTP, a CA the client
    /// does not trust, an old TLS version): each is logged at debug, never
    /// as an error line, so a flood of them cannot push the server's real
    /// errors past journald's rate limit.
    @Test func failedHandshakesAreLoggedAtDebugNeverAsErrors() async throws {
        try await withTemporaryDirectory { directory in
            let (certificate, key) = try await Self.certificate(in: directory)
            let server = try await ServerProcess.start(in: directory, http: """
                certificate = "\(certificate)"
                private-key = "\(key)"
                """, logLevel: "debug")
            let failures = [
                ["http://127.0.0.1:\(server.port)/v1/health"],
                ["\(server.baseURL)/v1/health"],
                ["--cacert", certificate, "--tlsv1.1", "--tls-max", "1.1", "\(server.baseURL)/v1/health"],
            ]
            for (number, arguments) in failures.enumerated() {
                let failed = try await Self.curl(arguments)
                #expect(failed.output.contains("000"), "\(failed.output)")
                try await server.process.waitForLine(containing: "Error handling upgrade result", occurrence: number + 1)
            }
            let logged = server.process.lines.values.filter { $0.contains("Error handling upgrade result") }
            #expect(logged.allSatisfy { $0.contains(" debug ") }, "\(logged)")
            let errors = server.process.lines.values.filter { $0.contains(" error ") || $0.contains(" critical ") }
            #expect(errors.isEmpty, "\(errors)")
            await server.stop()
        }
    }

    /// (A certificate without its key is a configuration error: ServerConfigurationTests.)
    @Test func aCertificateThatCannotBeReadIsRefusedAtStart() async throws {
        try await withTemporaryDirectory { directory in
            let config = directory.appendingPathComponent("nearby-server.conf")
            try """
                [http]
                listen = "127.0.0.1:0"
                certificate = "\(directory.path)/missing.pem"
                private-key = "\(directory.path)/missing.key"
                [database]
                path = "\(directory.path)/db.sqlite"
                """.write(to: config, atomically: true, encoding: .utf8)
            let result = try await runProgram(executable!.path, ["serve", "--config", config.path])
            #expect(result.status != 0)
            #expect(result.output.contains("[http] certificate: cannot read \(directory.path)/missing.pem"), "\(result.output)")
        }
    }
}
