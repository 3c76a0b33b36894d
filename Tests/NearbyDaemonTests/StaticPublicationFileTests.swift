import ConfigFile
import Foundation
import NearbyCore
import Testing
@testable import NearbyDaemon

/// A directory of its own for one test, removed by `remove()`.
struct ScratchDirectory {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("nearbyd-static-\(UUID().uuidString.prefix(8))").path

    init() throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func write(_ name: String, _ text: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path).appendingPathComponent(name))
    }

    func file(_ name: String) -> String { (path as NSString).appendingPathComponent(name) }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}

struct StaticPublicationFileTests {
    static let both: Set<Medium> = [.ble, .audio]
    static let minimal = """
        api-key = "key-1"
        type = "kiosk-welcome"
        content = "Welcome!"
        """

    /// The error `text` is rejected with, as the file `kiosk.toml` in /etc/nearbyd/publications.d.
    func rejection(_ text: String, enabled: Set<Medium> = both) -> String? {
        do {
            let publication = try StaticPublicationFile.parse(text, source: "/p/kiosk.toml", name: "kiosk", enabled: enabled)
            Issue.record("accepted: \(publication)")
            return nil
        } catch {
            return error.message
        }
    }

    // MARK: Good files

    @Test func aFullFileGivesItsPublication() throws {
        let publication = try StaticPublicationFile.parse("""
            api-key = "key-1"
            type = "kiosk-welcome"
            namespace = "museum.hall-2"
            content = "Welcome to hall 2 ✓"
            app-id = "com.example.kiosk"

            [strategy]
            mediums = ["audio"]
            mode = "broadcast"
            distance = "earshot"
            """, source: "/p/hall.toml", name: "hall", enabled: Self.both)
        #expect(publication == StaticPublication(
            apiKey: "key-1", appID: "com.example.kiosk",
            message: Message(namespace: "museum.hall-2", type: "kiosk-welcome", content: Array("Welcome to hall 2 ✓".utf8)),
            strategy: Strategy(mediums: [.audio], mode: .broadcast, ttlSeconds: 0, distance: .earshot)))
    }

    @Test func binaryContentIsBase64AndMaySpanLines() throws {
        let bytes: [UInt8] = Array(0...255)
        let encoded = Data(bytes).base64EncodedString(options: .lineLength64Characters)
        let publication = try StaticPublicationFile.parse("""
            api-key = "key-1"
            type = "blob"
            content-base64 = \"\"\"
            \(encoded)
            \"\"\"
            """, source: "/p/blob.toml", name: "blob", enabled: Self.both)
        #expect(encoded.contains("\r\n") || encoded.contains("\n"))
        #expect(publication.message.content == bytes)
    }

    @Test func omittedKeysTakeTheirDefaults() throws {
        let publication = try StaticPublicationFile.parse(Self.minimal, source: "/p/front-door.toml", name: "front-door",
                                                          enabled: [.ble])
        #expect(publication.appID == "static:front-door")
        #expect(publication.message.namespace == "")
        // Unnamed mediums are the daemon's enabled ones; a static publication never expires.
        #expect(publication.strategy == Strategy(mediums: [.ble], mode: .both, ttlSeconds: 0, distance: .default))
    }

    // MARK: Bad files

    @Test func unknownKeysAndSectionsAreNamed() {
        #expect(rejection(Self.minimal + "\nttl = 300") ==
            "/p/kiosk.toml: unknown key 'ttl'; known: api-key, type, namespace, content, content-base64, app-id, [strategy]")
        #expect(rejection(Self.minimal + "\n[daemon]\nbus = \"system\"")?.hasPrefix("/p/kiosk.toml: unknown section [daemon]") == true)
        #expect(rejection(Self.minimal + "\n[strategy]\nttl = 300") ==
            "/p/kiosk.toml: unknown key 'ttl' in [strategy]; known: mediums, mode, distance")
        #expect(rejection(Self.minimal + "\nstrategy = \"broadcast\"") == "/p/kiosk.toml: 'strategy' must be a section [strategy]")
    }

    @Test func requiredKeysMustBeThere() {
        #expect(rejection("type = \"t\"\ncontent = \"c\"") == "/p/kiosk.toml: api-key is missing")
        #expect(rejection("api-key = \"k\"\ncontent = \"c\"") == "/p/kiosk.toml: type is missing")
    }

    @Test func valuesMustHaveTheirTypes() {
        #expect(rejection("api-key = 5\ntype = \"t\"\ncontent = \"c\"") == "/p/kiosk.toml: api-key must be a string")
        #expect(rejection(Self.minimal + "\n[strategy]\nmediums = \"ble\"") == "/p/kiosk.toml: [strategy] mediums must be an array of strings")
        #expect(rejection(Self.minimal + "\n[strategy]\nmediums = [1]") == "/p/kiosk.toml: [strategy] mediums must be an array of strings")
    }

    @Test func contentIsExactlyOneOfTextOrBase64() {
        #expect(rejection("api-key = \"k\"\ntype = \"t\"") == "/p/kiosk.toml: content is missing (or give content-base64)")
        #expect(rejection(Self.minimal + "\ncontent-base64 = \"AAEC\"") ==
            "/p/kiosk.toml: content and content-base64 are both given; give exactly one")
        #expect(rejection("api-key = \"k\"\ntype = \"t\"\ncontent-base64 = \"not base64!\"") ==
            "/p/kiosk.toml: content-base64 is not valid base64")
    }

    @Test func contentFollowsTheMessageRules() {
        let large = String(repeating: "x", count: MessageRules.maximumContentBytes + 1)
        #expect(rejection("api-key = \"k\"\ntype = \"t\"\ncontent = \"\(large)\"") ==
            "/p/kiosk.toml: content is 102401 bytes; the maximum is 102400")
        #expect(rejection("api-key = \"k\"\ntype = \"t\"\ncontent = \"\"")?.hasPrefix("/p/kiosk.toml: content is empty") == true)
        #expect(rejection("api-key = \"k\"\ntype = \"a*\"\ncontent = \"c\"") == "/p/kiosk.toml: type must not contain '*'")
        #expect(rejection(Self.minimal + "\nnamespace = \"__system\"") ==
            "/p/kiosk.toml: namespaces starting with '__' are reserved")
    }

    @Test func apiKeyAndAppIDFollowCreateManagersRules() {
        #expect(rejection("api-key = \"with space\"\ntype = \"t\"\ncontent = \"c\"") ==
            "/p/kiosk.toml: api_key must be 1..256 printable ASCII characters without spaces")
        #expect(rejection(Self.minimal + "\napp-id = \"\"") == "/p/kiosk.toml: AppId must be 1..255 bytes without control characters")
    }

    @Test func strategyNamesAreChecked() {
        #expect(rejection(Self.minimal + "\n[strategy]\nmediums = [\"wifi\"]") ==
            "/p/kiosk.toml: [strategy] mediums names an unknown medium 'wifi'; known: ble, audio")
        #expect(rejection(Self.minimal + "\n[strategy]\nmediums = [\"ble\", \"ble\"]") ==
            "/p/kiosk.toml: [strategy] mediums names 'ble' twice")
        #expect(rejection(Self.minimal + "\n[strategy]\nmode = \"shout\"") ==
            "/p/kiosk.toml: [strategy] mode must be one of broadcast, scan, both, not 'shout'")
        #expect(rejection(Self.minimal + "\n[strategy]\ndistance = \"far\"") ==
            "/p/kiosk.toml: [strategy] distance must be one of default, earshot, not 'far'")
    }

    @Test func strategiesFollowPublishsRulesAndTheDaemonsMediums() {
        #expect(rejection(Self.minimal + "\n[strategy]\nmediums = [\"ble\"]\ndistance = \"earshot\"") ==
            "/p/kiosk.toml: [strategy] Strategy.Distance 'earshot' needs the audio medium")
        #expect(rejection(Self.minimal + "\n[strategy]\nmediums = [\"audio\"]", enabled: [.ble]) ==
            "/p/kiosk.toml: [strategy] medium audio is disabled in this daemon's configuration")
        #expect(rejection(Self.minimal, enabled: []) ==
            "/p/kiosk.toml: [strategy] no medium is enabled in this daemon's configuration")
    }

    @Test func tomlSyntaxErrorsGiveTheLine() {
        #expect(rejection("api-key = \"k\"\ntype = ")?.hasPrefix("/p/kiosk.toml: line 2: ") == true)
    }

    // MARK: Directories

    @Test func filesAreReadInNameOrderAndOthersIgnored() throws {
        let directory = try ScratchDirectory()
        for name in ["b.toml", "a.toml", "B.toml", "10.toml", "9.toml"] { try directory.write(name, Self.minimal) }
        for name in ["README", "a.toml.bak", "a.toml~", ".hidden.toml", ".#a.toml"] { try directory.write(name, "not toml at all [") }
        let entries = StaticPublicationFile.loadAll(directory: directory.path, enabled: Self.both, maxFiles: 100)
        #expect(entries.map(\.path) == ["10.toml", "9.toml", "B.toml", "a.toml", "b.toml"].map(directory.file))
        #expect(entries.map { try? $0.result.get().appID } == ["static:10", "static:9", "static:B", "static:a", "static:b"])
        directory.remove()
    }

    @Test func aBadFileIsAnEntryOfItsOwnAndTheOthersStillLoad() throws {
        let directory = try ScratchDirectory()
        try directory.write("1-good.toml", Self.minimal)
        try directory.write("2-bad.toml", Self.minimal + "\nttl = 5")
        try Data([0xFF, 0xFE, 0x00]).write(to: URL(fileURLWithPath: directory.file("3-binary.toml")))
        try directory.write("4-large.toml", Self.minimal + "\n# " + String(repeating: "x", count: StaticPublicationFile.maximumFileBytes))
        try FileManager.default.createDirectory(atPath: directory.file("5-folder.toml"), withIntermediateDirectories: false)
        try directory.write("6-good.toml", Self.minimal)

        let entries = StaticPublicationFile.loadAll(directory: directory.path, enabled: Self.both, maxFiles: 100)
        let errors = entries.map { entry -> String? in
            if case .failure(let error) = entry.result { return error.message }
            return nil
        }
        #expect(errors == [
            nil,
            "\(directory.file("2-bad.toml")): unknown key 'ttl'; known: api-key, type, namespace, content, content-base64, app-id, [strategy]",
            "\(directory.file("3-binary.toml")): is not UTF-8 text",
            "\(directory.file("4-large.toml")): is larger than 256 KiB",
            "\(directory.file("5-folder.toml")): is not a regular file",
            nil,
        ])
        directory.remove()
    }

    @Test func filesPastTheLimitAreErrorsUnread() throws {
        let directory = try ScratchDirectory()
        for name in ["a.toml", "b.toml", "c.toml"] { try directory.write(name, Self.minimal) }
        let entries = StaticPublicationFile.loadAll(directory: directory.path, enabled: Self.both, maxFiles: 2)
        #expect(entries.count == 3)
        #expect((try? entries[1].result.get()) != nil)
        #expect(entries[2].result == .failure(ConfigurationError(
            "\(directory.file("c.toml")): not read: only the first 2 files of \(directory.path) are published")))
        directory.remove()
    }

    @Test func aMissingDirectoryHoldsNothing() {
        #expect(StaticPublicationFile.loadAll(directory: "/nonexistent/nearbyd/publications.d", enabled: Self.both, maxFiles: 10).isEmpty)
    }

    @Test func aDirectoryThatIsAFileIsAnError() throws {
        let directory = try ScratchDirectory()
        try directory.write("plain", "")
        let entries = StaticPublicationFile.loadAll(directory: directory.file("plain"), enabled: Self.both, maxFiles: 10)
        #expect(entries == [StaticPublicationFile.Entry(
            path: directory.file("plain"), result: .failure(ConfigurationError("\(directory.file("plain")): is not a directory")))])
        directory.remove()
    }
}
