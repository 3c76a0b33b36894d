import Foundation
import Testing
import TestSupport

/// doc/getting-started.md, run as a reader runs it: its `sh` blocks in order,
/// in one bash from the repository's root, and every line of each `text`
/// block (the output the guide shows, `<…>` standing for what varies) must
/// be among what they printed. Only the set-up and build commands of its
/// first block (`make`, `swift build`) are left out: the test runs on what
/// `make test` set up and built, and a second SwiftPM on the same build
/// directory would wait for this one.
@Suite(.timeLimit(.minutes(3))) struct GettingStartedTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func theGuideRunsAsWritten() async throws {
        let guide = try String(contentsOf: Self.root.appendingPathComponent("doc/getting-started.md"), encoding: .utf8)
        let blocks = Self.blocks(of: guide)
        let commands = blocks.filter { $0.language == "sh" }.map(\.text).joined(separator: "\n")
            .split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.hasPrefix("make ") && !$0.contains("swift build") }
            .joined(separator: "\n")
        #expect(!commands.isEmpty)
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        // Whatever the guide leaves running when a step fails is stopped with it.
        let script = try directory.write("guide.sh", """
            set -euo pipefail
            trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
            cd '\(Self.root.path)'
            \(commands)
            """)
        let result = try await runProgram("/usr/bin/timeout", ["120", "/bin/bash", script])
        #expect(result.status == 0, "the guide's commands failed:\n\(result.output)")
        let printed = result.output.split(separator: "\n").map(String.init)
        for block in blocks where block.language == "text" {
            for line in block.text.split(separator: "\n") {
                let pattern = try Regex(Self.pattern(of: String(line)))
                #expect(printed.contains { $0.wholeMatch(of: pattern) != nil }, "the guide shows '\(line)'; printed:\n\(result.output)")
            }
        }
    }

    /// The fenced blocks, with their language.
    static func blocks(of markdown: String) -> [(language: String, text: String)] {
        var blocks: [(String, String)] = []
        var current: (language: String, lines: [Substring])?
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") {
                if let open = current {
                    blocks.append((open.language, open.lines.joined(separator: "\n")))
                    current = nil
                } else {
                    current = (String(line.dropFirst(3)), [])
                }
            } else if current != nil {
                current!.lines.append(line)
            }
        }
        return blocks
    }

    /// A shown line as a regular expression: literal, but `<…>` matches anything.
    static func pattern(of line: String) -> String {
        var pattern = ""
        var rest = Substring(line)
        while let open = rest.firstIndex(of: "<"), let close = rest[open...].firstIndex(of: ">") {
            pattern += NSRegularExpression.escapedPattern(for: String(rest[..<open])) + ".+"
            rest = rest[rest.index(after: close)...]
        }
        return pattern + NSRegularExpression.escapedPattern(for: String(rest))
    }
}
