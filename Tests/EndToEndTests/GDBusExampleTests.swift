import Foundation
import NearbyMessages
import Testing
import TestSupport

/// examples/gdbus-subscribe.c, an app in C on GDBus: built with gcc against
/// Debian's GLib and run against a real nearbyd, it prints what nearbyd
/// finds and loses and nothing that another user's program forges.
@Suite(.serialized, .timeLimit(.minutes(2))) struct GDBusExampleTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func theCExampleFindsAndLosesAndBelievesOnlyNearbyd() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let program = directory.file("gdbus-subscribe")
        let flags = try await runProgram("/usr/bin/pkg-config", ["--cflags", "--libs", "gio-2.0"])
        #expect(flags.status == 0, "\(flags.output)")
        let built = try await runProgram("/usr/bin/gcc", ["-Wall", "-Wextra", "-Werror", "-o", program,
                                                          Self.root.appendingPathComponent("examples/gdbus-subscribe.c").path]
                                         + flags.output.split(whereSeparator: \.isWhitespace).map(String.init))
        #expect(built.status == 0, "\(built.output)")

        try await withCluster(ForgedSignalTests.options) { cluster in
            let key = try await cluster.createProject("gdbus")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (1, 0))
            let app = try await ChildProcess(name: "gdbus-subscribe", executable: program, arguments: [key, b.busAddress, "2"])
            let subscribed = try await app.waitForLine(containing: "subscribed ")
            let path = String(subscribed.dropFirst("subscribed ".count))
            try await SignalForger.forge([ForgedSignalTests.messageFound(at: path),
                                          .nameOwnerChanged("org.nearbyd", from: "", to: "{forger}"),
                                          ForgedSignalTests.messageFound(at: path)], on: b.busAddress)
            let publication = try await MessageManager(a, apiKey: key).publish("from C")
            #expect(try await app.waitForLine(containing: "found ") == "found gdbus/chat 'from C'", "\(app.output)")
            try await cluster.move("A", to: (1_000, 0))
            #expect(try await app.waitForLine(containing: "lost ") == "lost gdbus/chat 'from C'", "\(app.output)")
            #expect(try await app.waitForExit(within: 10) == 0)
            #expect(!app.output.contains("FAKE"), "\(app.output)")
            withExtendedLifetime(publication) {}
        }
    }
}
