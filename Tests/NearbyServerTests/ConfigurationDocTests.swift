import ConfigFile
import Foundation
import NearbyServer
import Testing
import TestSupport

/// doc/nearby-server.md's table of settings held to what nearby-server
/// reads: every key both ways, each default written as a TOML value to the
/// built-in one, and each range written as two numbers to what is refused
/// just outside it.
@Suite struct ServerConfigurationDocTests {
    static let document = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("doc/nearby-server.md")

    struct Row {
        let section: String
        let keys: [String]
        let defaultValue: String
        let range: String
    }

    /// The rows of the `| key | default | range | meaning |` table.
    static func rows() throws -> [Row] {
        let text = try String(contentsOf: document, encoding: .utf8)
        var rows: [Row] = []
        var inTable = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("| key | default | range | meaning |") { inTable = true; continue }
            guard inTable else { continue }
            guard line.hasPrefix("|") else { break }
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count > 4, let match = cells[1].firstMatch(of: #/`\[([a-z]+)\] ([a-z-]+)`/#) else { continue }
            let others = cells[1].matches(of: #/, `([a-z-]+)`/#).map { String($0.1) }
            rows.append(Row(section: String(match.1), keys: [String(match.2)] + others, defaultValue: cells[2], range: cells[3]))
        }
        return rows
    }

    /// The keys nearby-server reads in `[section]`, as its error for an unknown key lists them.
    static func read(in section: String) -> Set<String> {
        do {
            _ = try ServerConfiguration.parse("[\(section)]\nno-such-key = 1\n", source: "probe.conf")
        } catch {
            return knownKeys(in: error.message)
        }
        return []
    }

    @Test func everyKeyIsDocumentedAndEveryDocumentedKeyIsRead() throws {
        let rows = try Self.rows()
        #expect(rows.count >= 40, "rows found: \(rows.count)")
        // Every section nearby-server reads has its rows, as its error for an unknown section lists them.
        var sections: Set<String> = []
        do {
            _ = try ServerConfiguration.parse("[no-such-section]\nkey = 1\n", source: "probe.conf")
        } catch {
            sections = Set(knownKeys(in: error.message).map { String($0.dropFirst().dropLast()) })
        }
        #expect(!sections.isEmpty)
        #expect(sections == Set(rows.map(\.section)), "sections read: \(sections.sorted()); documented: \(Set(rows.map(\.section)).sorted())")
        for section in Set(rows.map(\.section)) {
            let keys = Set(rows.filter { $0.section == section }.flatMap(\.keys))
            let read = Self.read(in: section)
            #expect(read.subtracting(keys).isEmpty, "[\(section)]: read but not documented: \(read.subtracting(keys).sorted())")
            #expect(keys.subtracting(read).isEmpty, "[\(section)]: documented but not read: \(keys.subtracting(read).sorted())")
        }
    }

    @Test func everyDocumentedDefaultIsTheDefault() throws {
        for row in try Self.rows() {
            guard let literal = row.defaultValue.wholeMatch(of: #/`([^`]+)`/#)?.1 else { continue }
            var configuration = try ServerConfiguration.parse("[\(row.section)]\n\(row.keys[0]) = \(literal)\n", source: "defaults.conf")
            // Set in a file, max-connections is no longer the default the server may lower; the value is the same.
            configuration.http.maxConnectionsConfigured = false
            #expect(configuration == ServerConfiguration(), "[\(row.section)] \(row.keys[0]) = \(literal) is not the default")
        }
    }

    /// Just outside a range of two numbers is refused, naming the key; its
    /// edges are taken, unless another key's rule refuses them (naming that key).
    @Test func everyDocumentedRangeIsTheRange() throws {
        var checked = 0
        for row in try Self.rows() {
            guard let range = row.range.wholeMatch(of: #/(-?\d+)\.\.(-?\d+)/#), let low = Int(range.1), let high = Int(range.2) else { continue }
            let name = "[\(row.section)] \(row.keys[0])"
            for outside in [low - 1, high + 1] {
                #expect(throws: ConfigurationError.self, "\(name) = \(outside)") {
                    _ = try ServerConfiguration.parse("[\(row.section)]\n\(row.keys[0]) = \(outside)\n", source: "range.conf")
                }
            }
            for edge in [low, high] {
                do {
                    _ = try ServerConfiguration.parse("[\(row.section)]\n\(row.keys[0]) = \(edge)\n", source: "range.conf")
                } catch {
                    #expect(!error.message.contains("\(name) is \(edge)"), "\(name) = \(edge), inside its range, refused: \(error.message)")
                }
            }
            checked += 1
        }
        #expect(checked >= 25, "ranges checked: \(checked)")
    }
}
