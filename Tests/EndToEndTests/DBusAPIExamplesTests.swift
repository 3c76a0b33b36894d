import Foundation
import Testing
import TestSupport

/// dbus-api.md's busctl and gdbus examples, run as written against a real
/// nearbyd, with the system bus replaced by the daemon's own bus.
@Suite(.timeLimit(.minutes(1))) struct DBusAPIExamplesTests {
    static let document = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("doc/dbus-api.md")

    @Test func theShellExamplesRun() async throws {
        let text = try String(contentsOf: Self.document, encoding: .utf8)
        let section = try #require(text.range(of: "## From the shell: busctl and gdbus"))
        let block = try #require(text[section.upperBound...].firstMatch(of: #/```sh\n([\s\S]*?)```/#)).1
        let commands = block.split(separator: "\n").map(String.init)
        #expect(commands.count >= 4)
        try await withCluster { cluster in
            let device = try await cluster.addDevice("A")
            for command in commands {
                let onTheBus = command.hasPrefix("busctl ")
                    ? command.replacingOccurrences(of: "busctl ", with: "busctl --address=\(device.busAddress) ")
                    : command.replacingOccurrences(of: "--system", with: "--address \(device.busAddress)")
                let result = try await runProgram("/bin/sh", ["-c", onTheBus])
                #expect(result.status == 0, "\(command):\n\(result.output)")
                #expect(!result.output.isEmpty, "\(command) printed nothing")
            }
        }
    }
}
