import Foundation
import NearbyMessages
import Testing
import TestSupport

/// nearbyctl shows text from elsewhere (here, the content another device
/// published) with the characters a terminal would act on escaped, and
/// `--json` keeps it exact.
@Suite(.serialized, .timeLimit(.minutes(3))) struct NearbyctlEscapingTests {
    /// Sets the window title, hides what follows, breaks the line, and more.
    static let hostile = "\u{1B}]0;pwned\u{07}\u{1B}[8mhidden\u{1B}[0m line\nbreak\ttab\u{7F}del\u{9B}c1\u{202E}rtl\r!"
    /// How nearbyctl shows it.
    static let shown = #"\e]0;pwned\x07\e[8mhidden\e[0m line\nbreak\ttab\x7fdel\x9bc1\u{202e}rtl\r!"#

    @Test func subscribeEscapesContentAndJSONStaysExact() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("escapes")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (2, 0))
            let publication = try await MessageManager(a, apiKey: key).publish(Self.hostile)
            let arguments = ["subscribe", "--bus", b.busAddress, "--api-key", key, "--count", "1"]

            let human = try await withTimeout(30, "nearbyctl subscribe") {
                try await runProgram(Programs.path("nearbyctl"), arguments)
            }
            #expect(human.status == 0, "\(human.output)")
            let found = try #require(human.output.split(separator: "\n").first { $0.hasPrefix("found") }, "\(human.output)")
            #expect(found.hasPrefix("found escapes/chat ble "))
            #expect(found.hasSuffix("'\(Self.shown)'"), "\(found)")
            // Nothing a terminal acts on, but the line ends.
            let controls = human.output.unicodeScalars.filter { scalar in
                scalar != "\n" && (scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar == "\u{202E}")
            }
            #expect(controls.isEmpty, "\(controls.map(\.value))")

            let json = try await withTimeout(30, "nearbyctl subscribe --json") {
                try await runProgram(Programs.path("nearbyctl"), arguments + ["--json"])
            }
            #expect(json.status == 0, "\(json.output)")
            let line = try #require(json.output.split(separator: "\n").first { $0.contains(#""event":"found""#) }, "\(json.output)")
            // JSON escapes the C0 controls itself.
            #expect(!line.unicodeScalars.contains { $0.value < 0x20 })
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            #expect(object["text"] as? String == Self.hostile)
            #expect(object["content"] as? String == Data(Self.hostile.utf8).base64EncodedString())
            withExtendedLifetime(publication) {}
        }
    }
}
