import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import NearbyBusContract
import Testing
import TestSupport

/// The shipped bus policy (`dbus-policy/org.nearbyd.conf`) against the
/// contract: every interface clients call is open to every user, those
/// nearbyd calls on clients only to nearbyd's user and root, root-only
/// writes refused to the rest, and the policy names nothing the contract
/// does not. (PolicyTests then calls every member as another user on a bus
/// with the system bus's rules and this policy.)
@Suite struct BusPolicyContractTests {
    /// A policy's `allow` or `deny` rule, by its attributes.
    struct Rule: Equatable {
        var allow: Bool
        var attributes: [String: String]
    }

    /// The rules of each `<policy>`, keyed `user=NAME` or `context=NAME`.
    static func policies() throws -> [String: [Rule]] {
        let document = try XMLDocument(contentsOf: URL(fileURLWithPath: RepositoryFile.path("dbus-policy/org.nearbyd.conf")))
        var policies: [String: [Rule]] = [:]
        for node in try document.nodes(forXPath: "/busconfig/policy") {
            guard let policy = node as? XMLElement, let selector = policy.attributes?.first,
                  let key = selector.name, let value = selector.stringValue else { continue }
            policies["\(key)=\(value)"] = (policy.children ?? []).compactMap { $0 as? XMLElement }.map { rule in
                Rule(allow: rule.name == "allow", attributes: Dictionary(uniqueKeysWithValues: (rule.attributes ?? []).compactMap {
                    attribute in attribute.name.map { ($0, attribute.stringValue ?? "") }
                }))
            }
        }
        return policies
    }

    static let clientInterfaces = NearbyBusContract.interfaces.filter { $0.caller == .anyClient }.map(\.name)
    static let calledByNearbyd = NearbyBusContract.interfaces.filter { $0.caller == .nearbyd }.map(\.name)

    @Test func everyUserMayCallWhatClientsCallAndNothingElse() throws {
        let rules = try #require(try Self.policies()["context=default"])
        let opened = rules.filter { $0.allow && $0.attributes["send_destination"] == NearbyBusContract.busName }
            .compactMap { $0.attributes["send_interface"] }
        #expect(Set(opened) == Set(Self.clientInterfaces + NearbyBusContract.standardInterfaces))
        #expect(rules.allSatisfy { rule in !Self.calledByNearbyd.contains(rule.attributes["send_interface"] ?? "") })
        #expect(!rules.contains { $0.attributes["own"] != nil && $0.allow })
    }

    @Test func onlyRootWritesRootOnlyProperties() throws {
        let policies = try Self.policies()
        let setAtRoot = [
            "send_destination": NearbyBusContract.busName, "send_path": NearbyBusContract.rootPath,
            "send_interface": "org.freedesktop.DBus.Properties", "send_member": "Set",
        ]
        // The policy tells objects apart by path: the root object's writable properties are all root's.
        let access = Set(NearbyBusContract.nearby.properties.map(\.access).filter { $0 != .read })
        #expect(access == [.readWriteRoot])
        #expect(try #require(policies["context=default"]).contains(Rule(allow: false, attributes: setAtRoot)))
        #expect(try #require(policies["user=root"]).contains(Rule(allow: true, attributes: setAtRoot)))
    }

    @Test func onlyNearbydsUserAndRootOwnTheNameAndCallClients() throws {
        let policies = try Self.policies()
        for user in ["user=nearbyd", "user=root"] {
            let rules = try #require(policies[user])
            #expect(rules.contains(Rule(allow: true, attributes: ["own": NearbyBusContract.busName])), "\(user)")
            for interface in Self.calledByNearbyd {
                #expect(rules.contains(Rule(allow: true, attributes: ["send_interface": interface, "send_type": "method_call"])),
                        "\(user) may call \(interface)")
            }
        }
        #expect(Set(policies.keys) == ["user=nearbyd", "user=root", "context=default"])
    }

    @Test func thePolicyNamesOnlyTheContractsInterfaces() throws {
        let named = try Self.policies().values.joined().compactMap { $0.attributes["send_interface"] }
        let known = Set(NearbyBusContract.interfaces.map(\.name) + NearbyBusContract.standardInterfaces)
        #expect(Set(named).subtracting(known).isEmpty)
    }
}

/// `doc/dbus-api.md` against the contract: every interface, method,
/// property, signal, error and dictionary key has its entry, with the
/// contract's types.
@Suite struct BusDocumentationContractTests {
    /// The document's `## ` sections, by heading.
    static func sections() throws -> [String: [Substring]] {
        let text = try String(contentsOfFile: RepositoryFile.path("doc/dbus-api.md"), encoding: .utf8)
        var sections: [String: [Substring]] = [:]
        var current = ""
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("## ") { current = String(line.dropFirst(3)) } else { sections[current, default: []].append(line) }
        }
        return sections
    }

    /// The lines of a `### ` part of a section.
    static func part(_ name: String, of lines: [Substring]) -> [Substring] {
        guard let start = lines.firstIndex(of: Substring("### \(name)")) else { return [] }
        let rest = lines[(start + 1)...]
        return Array(rest.prefix { !$0.hasPrefix("### ") })
    }

    /// `s api_key, a{sv} params` as one signature.
    static func types(_ arguments: Substring) -> String {
        arguments.split(separator: ", ").compactMap { $0.split(separator: " ").first.map(String.init) }.joined()
    }

    /// The document's methods or signals of a part: `#### \`[out ]Name(type name, …)\``.
    static func members(_ lines: [Substring]) -> [NearbyBusContract.Method] {
        lines.compactMap { line in
            guard let match = line.wholeMatch(of: #/#### `(?:(\S+) )?(\w+)\((.*)\)`/#) else { return nil }
            return NearbyBusContract.Method(String(match.2), in: types(match.3), out: match.1.map(String.init) ?? "")
        }
    }

    @Test(arguments: NearbyBusContract.interfaces.filter { $0.caller == .anyClient })
    func everyMemberOfAnInterfaceHasItsEntry(_ interface: NearbyBusContract.Interface) throws {
        let lines = try #require(try Self.sections()[interface.name], "a section ## \(interface.name)")
        #expect(Self.members(Self.part("Methods", of: lines)) == interface.methods)
        let signals = Self.members(Self.part("Signals", of: lines)).map { NearbyBusContract.Signal($0.name, $0.inputs) }
        #expect(signals == interface.signals)
        let properties = Self.part("Properties", of: lines).compactMap { line -> NearbyBusContract.Property? in
            guard let match = line.firstMatch(of: #/^\| `(\w+)` \| (\S+) \| ([^|]+) \|/#) else { return nil }
            let access: NearbyBusContract.Property.Access = match.3.contains("root only") ? .readWriteRoot
                : match.3.contains("read/write") ? .readWrite : .read
            return NearbyBusContract.Property(String(match.1), String(match.2), access)
        }
        #expect(properties == interface.properties)
    }

    @Test func everyInterfaceNearbydCallsHasItsEntry() throws {
        let lines = try #require(try Self.sections()["Objects clients export, that the daemon calls"])
            + (try Self.sections()["Permissions"] ?? [])
        let documented = lines.compactMap { line -> (String, NearbyBusContract.Method)? in
            guard let match = line.wholeMatch(of: #/#### `([\w.]+)\.(\w+)\((.*)\)(?: -> (\S+))?`/#) else { return nil }
            return (String(match.1), NearbyBusContract.Method(String(match.2), in: Self.types(match.3), out: match.4.map(String.init) ?? ""))
        }
        for interface in NearbyBusContract.interfaces where interface.caller == .nearbyd {
            #expect(documented.filter { $0.0 == interface.name }.map(\.1) == interface.methods, "\(interface.name)")
        }
    }

    @Test func everyErrorHasItsEntry() throws {
        let lines = try #require(try Self.sections()["Errors"])
        let documented = lines.compactMap { $0.firstMatch(of: #/^\| `org\.nearbyd\.Error\.(\w+)` \|/#).map { String($0.1) } }
        #expect(documented == NearbyBusContract.Error.allCases.map(\.rawValue))
    }

    /// Where the document lists a dictionary's keys: the `| key | type |`
    /// table in a section's entry (a `### ` part, or a member's `#### `) that
    /// follows the paragraph naming the dictionary.
    struct KeyTable: Sendable, CustomTestStringConvertible {
        let keys: [NearbyBusContract.Key]
        let section: String
        let entry: String
        let caption: String

        var testDescription: String { "the \(caption) table of \(entry) (## \(section))" }
    }

    /// Every key group of the contract and its table.
    static let keyTables: [KeyTable] = {
        typealias Contract = NearbyBusContract
        let nearby = Contract.nearby.name, manager = Contract.manager.name, subscription = Contract.subscription.name
        return [
            KeyTable(keys: Contract.CreateManagerOption.all, section: nearby, entry: Contract.Nearby1.createManager.name,
                     caption: "`params`"),
            KeyTable(keys: Contract.PermissionOption.all, section: nearby, entry: Contract.Nearby1.getPermission.name,
                     caption: "`params`"),
            KeyTable(keys: Contract.PermissionEntryKey.all, section: nearby, entry: Contract.Nearby1.getPermission.name,
                     caption: "reply"),
            KeyTable(keys: Contract.PublishOrSubscribeOption.publish, section: manager, entry: Contract.Manager1.publish.name,
                     caption: "`params`"),
            KeyTable(keys: Contract.PublishOrSubscribeOption.subscribe, section: manager,
                     entry: Contract.Manager1.subscribe.name, caption: "`params`"),
            KeyTable(keys: Contract.StrategyOption.all, section: manager, entry: Contract.PublishOrSubscribeOption.strategy.name,
                     caption: "`Strategy`"),
            KeyTable(keys: Contract.BeaconStrategyOption.all, section: manager,
                     entry: Contract.PublishOrSubscribeOption.beaconStrategy.name, caption: "`BeaconStrategy`"),
            KeyTable(keys: Contract.MessageInfoKey.all, section: subscription, entry: Contract.Subscription1.messageFound.name,
                     caption: "`info`"),
            KeyTable(keys: Contract.BeaconInfoKey.all, section: subscription, entry: Contract.Subscription1.messageFound.name,
                     caption: "`Beacon`"),
            KeyTable(keys: Contract.PermissionDetailKey.all, section: "Permissions",
                     entry: Contract.PermissionAgent1.requestPermission.name, caption: "`details`"),
        ]
    }()

    /// The lines of an entry of a section: its `### name` part, or the
    /// `#### ` entry of its member `name` up to the next heading.
    static func entry(_ name: String, of lines: [Substring]) -> [Substring] {
        let part = Self.part(name, of: lines)
        if !part.isEmpty { return part }
        guard let start = lines.firstIndex(where: { line in
            line.firstMatch(of: #/^#### `(?:\S+ )?(?:[\w.]+\.)?(\w+)\(/#)?.1 == Substring(name)
        }) else { return [] }
        return Array(lines[(start + 1)...].prefix { !$0.hasPrefix("#") })
    }

    /// The key tables of some lines, each with the paragraph before it
    /// (blocks are separated by blank lines).
    static func keyTables(_ lines: [Substring]) -> [(caption: String, rows: [Substring])] {
        let blocks = lines.split(whereSeparator: \.isEmpty)
        return blocks.indices.compactMap { index in
            guard blocks[index].first?.hasPrefix("| key | type |") == true else { return nil }
            let paragraph = blocks[..<index].last { $0.first?.hasPrefix("|") == false }
            return (paragraph?.joined(separator: " ") ?? "", Array(blocks[index].dropFirst(2)))
        }
    }

    // A key missing from its table is one clients cannot learn of; a key
    // only the document has is one nearbyd refuses (options) or never sends.
    @Test(arguments: keyTables)
    func everyDictionarysTableListsExactlyItsKeysWithTheirTypes(_ table: KeyTable) throws {
        let lines = try #require(try Self.sections()[table.section], "a section ## \(table.section)")
        let tables = Self.keyTables(Self.entry(table.entry, of: lines)).filter { $0.caption.contains(table.caption) }
        try #require(tables.count == 1, "\(table.testDescription): one key table after a paragraph naming \(table.caption)")
        let rows = tables[0].rows.compactMap { $0.firstMatch(of: #/^\| `(\w+)` \| (\S+) \|/#) }
        let documented = Dictionary(rows.map { (String($0.1), String($0.2)) }, uniquingKeysWith: { first, _ in first })
        #expect(documented.count == rows.count, "\(table.testDescription) lists a key twice")
        for key in table.keys {
            guard let type = documented[key.name] else {
                Issue.record("\(table.testDescription) has no row for `\(key.name)` (\(key.type))")
                continue
            }
            #expect(type == key.type, "\(table.testDescription) types `\(key.name)` \(type), the contract \(key.type)")
        }
        for name in documented.keys.sorted() where !table.keys.contains(where: { $0.name == name }) {
            Issue.record("\(table.testDescription) lists `\(name)`, which the contract's keys lack")
        }
    }
}

extension NearbyBusContract.Interface: CustomTestStringConvertible {
    public var testDescription: String { name }
}
