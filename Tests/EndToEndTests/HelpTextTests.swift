import Foundation
import Testing
import TestSupport

/// Every program's `--help`, and each subcommand's, as a user reads it in an
/// 80-column terminal: ArgumentParser wraps each line of a command's
/// discussion on its own, so a line written wider than 80 columns is broken
/// in two, its tail left alone on a line mid-sentence or mid-example.
@Suite(.timeLimit(.minutes(2))) struct HelpTextTests {
    static let programs = ["nearbyctl", "nearbyd", "nearby-server", "nearby-air", "nearby-modem"]
    /// What ArgumentParser fills of an 80-column terminal: a longer line is wrapped.
    static let width = 78

    @Test(arguments: programs) func helpReadsWellAtEightyColumns(_ program: String) async throws {
        var pending: [[String]] = [[]]
        var checked = 0
        while let command = pending.popLast() {
            // Wide, so that what the author wrote shows as written.
            let help = try await runProgram(Programs.path(program), command + ["--help"], environment: ["COLUMNS": "100000"])
            #expect(help.status == 0, "\(program) \(command) --help")
            for problem in Self.problems(in: help.output) {
                Issue.record("\(([program] + command).joined(separator: " ")) --help: \(problem)")
            }
            pending += Self.subcommands(in: help.output).map { command + [$0] }
            checked += 1
        }
        #expect(checked >= 1)
    }

    /// The lines of the discussion (after the overview, before USAGE) that
    /// ArgumentParser would break badly at 80 columns: an indented line (an
    /// example, a listing) wider than ``width``, or a line of a paragraph wider
    /// than that with more of the paragraph after it. (A paragraph written as one
    /// line, continued with `\`, is wrapped whole, and well.) And an option
    /// whose help gives its default besides ArgumentParser's own `(default: …)`.
    static func problems(in help: String) -> [String] {
        let lines = help.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        var problems: [String] = []
        let usage = lines.firstIndex { $0.hasPrefix("USAGE:") } ?? lines.count
        let start = (lines.firstIndex { $0.isEmpty } ?? usage) + 1
        if start < usage {
            for index in start..<usage where lines[index].count > width {
                let line = lines[index]
                let next = index + 1 < usage ? lines[index + 1] : ""
                if line.hasPrefix(" ") {
                    problems.append("an indented line of \(line.count) columns is split: \(line)")
                } else if !next.isEmpty {
                    problems.append("a line of \(line.count) columns in a paragraph leaves its tail alone: \(line)")
                }
            }
        }
        for line in lines[usage...] where line.contains("(default ") && line.contains("(default: ") {
            problems.append("the default is given twice: \(line.trimmingCharacters(in: .whitespaces))")
        }
        return problems
    }

    /// The names under SUBCOMMANDS (without `help`, and without the
    /// "(default)" marker ArgumentParser adds to the default one).
    static func subcommands(in help: String) -> [String] {
        let lines = help.split(separator: "\n", omittingEmptySubsequences: false)
        guard let heading = lines.firstIndex(of: "SUBCOMMANDS:") else { return [] }
        var names: [String] = []
        for line in lines[(heading + 1)...] {
            if line.isEmpty || !line.hasPrefix("  ") { break }
            // A name starts two spaces in; wrapped abstracts are indented further.
            guard !line.hasPrefix("   "), let name = line.split(separator: " ").first else { continue }
            if name != "help" { names.append(String(name)) }
        }
        return names
    }
}
