import Foundation
import Logging
import SystemdService
import Testing
import TestSupport

/// The journal handler against a stand-in journald: sd-journal sends each record
/// as a datagram of `FIELD=value` lines to /run/systemd/journal/socket. Needs
/// root to create that path, and a machine where no journald owns it.
private let socketPath = "/run/systemd/journal/socket"

@Suite(.serialized, .enabled(if: getuid() == 0 && !FileManager.default.fileExists(atPath: socketPath),
                             "needs root and no running journald"))
struct JournalLogHandlerTests {
    @Test func recordsCarryStructuredFields() async throws {
        try FileManager.default.createDirectory(atPath: "/run/systemd/journal", withIntermediateDirectories: true)
        let journal = try DatagramSocket(path: socketPath)
        defer {
            journal.close()
            try? FileManager.default.removeItem(atPath: socketPath)
        }
        var logger = Logger(label: "test-component") { JournalLogHandler(label: $0, identifier: "nearbyd") }
        logger.logLevel = .debug
        logger[metadataKey: "client"] = ":1.42"
        logger.warning("publication refused", metadata: ["manager": "/org/nearbyd/client1/manager1"])

        let record = try await journal.messages.first(within: 10, "a journal record") { _ in true }
        let fields = Dictionary(record.split(separator: "\n").compactMap { line -> (String, String)? in
            guard let equals = line.firstIndex(of: "=") else { return nil }
            return (String(line[..<equals]), String(line[line.index(after: equals)...]))
        }, uniquingKeysWith: { $1 })
        #expect(fields["MESSAGE"] == "publication refused")
        #expect(fields["PRIORITY"] == "4")
        #expect(fields["SYSLOG_IDENTIFIER"] == "nearbyd")
        #expect(fields["NEARBY_CLIENT"] == ":1.42")
        #expect(fields["NEARBY_MANAGER"] == "/org/nearbyd/client1/manager1")
        #expect(fields["NEARBY_COMPONENT"] == "test-component")
        #expect(fields["CODE_FILE"]?.hasSuffix("JournalLogHandlerTests.swift") == true)
    }
}
