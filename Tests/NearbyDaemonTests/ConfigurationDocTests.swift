import ConfigFile
import Foundation
import NearbyDaemon
import Testing
import TestSupport

/// doc/configuration.md's nearbyd tables held to what nearbyd reads: each
/// section's keys both ways (a key the daemon reads is documented, a
/// documented key is read), and each default written as a TOML value is one
/// the daemon takes and that changes nothing.
@Suite struct ConfigurationDocTests {
    static let document = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("doc/configuration.md")

    /// `[section]`: its table's rows, key and default, from "## nearbyd" up to the next program's heading.
    static func documented() throws -> [String: [(key: String, defaultValue: String)]] {
        let text = try String(contentsOf: document, encoding: .utf8)
        guard let start = text.range(of: "\n## nearbyd\n") else { return [:] }
        let end = text.range(of: "\n## ", range: start.upperBound..<text.endIndex)?.lowerBound ?? text.endIndex
        var sections: [String: [(String, String)]] = [:]
        var current: String?
        for line in text[start.upperBound..<end].split(separator: "\n") {
            if let match = line.wholeMatch(of: #/### `\[([a-z]+)\]`/#) {
                current = String(match.1)
                sections[current!] = []
            } else if let section = current, line.hasPrefix("| `") {
                let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
                guard cells.count > 4 else { continue }
                sections[section]!.append((cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`")), cells[3]))
            }
        }
        return sections
    }

    /// The keys nearbyd reads in `[section]`, as its error for an unknown key lists them.
    static func read(in section: String) throws -> Set<String> {
        do {
            _ = try DaemonConfiguration().applying(ConfigFile(text: "[\(section)]\nno-such-key = 1\n", source: "probe.conf"))
        } catch {
            return knownKeys(in: error.message)
        }
        return []
    }

    @Test func everyKeyIsDocumentedAndEveryDocumentedKeyIsRead() throws {
        let documented = try Self.documented()
        #expect(documented.count >= 10, "sections found in the document: \(documented.keys.sorted())")
        for (section, rows) in documented {
            let keys = Set(rows.map(\.key))
            let read = try Self.read(in: section)
            #expect(read.subtracting(keys).isEmpty, "[\(section)]: read but not documented: \(read.subtracting(keys).sorted())")
            #expect(keys.subtracting(read).isEmpty, "[\(section)]: documented but not read: \(keys.subtracting(read).sorted())")
        }
    }

    /// A default written as a value (`300`, `"system"`, `[0.0, 0.0]`) is taken,
    /// and gives the configuration nearbyd has without it.
    @Test func everyDocumentedDefaultIsTheDefault() throws {
        let builtIn = String(describing: DaemonConfiguration())
        for (section, rows) in try Self.documented() {
            for (key, defaultValue) in rows {
                guard let literal = defaultValue.wholeMatch(of: #/`([^`]+)`/#)?.1,
                      literal.first.map({ "\"-[0123456789tf".contains($0) }) == true else { continue }
                let text = "[\(section)]\n\(key) = \(literal)\n"
                let configuration = try DaemonConfiguration().applying(ConfigFile(text: text, source: "defaults.conf"))
                #expect(String(describing: configuration) == builtIn, "[\(section)] \(key) = \(literal) is not the default")
            }
        }
    }
}
