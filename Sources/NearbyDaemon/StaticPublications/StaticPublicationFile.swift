import ConfigFile
import DBus
import Foundation
import NearbyBusContract
import NearbyCore

/// A message published with no client program (a kiosk's welcome): read from
/// a file at start-up and published for as long as the daemon runs.
struct StaticPublication: Equatable, Sendable {
    var apiKey: String
    var appID: String
    var message: Message
    /// Checked as a publication's against the daemon's mediums. Its
    /// `ttlSeconds` is 0: a static publication never expires.
    var strategy: Strategy
}

/// The files of static publications: every `*.toml` in a directory, one
/// publication each.
///
/// ```
/// api-key = "…"            # required
/// type = "kiosk-welcome"   # required
/// namespace = ""           # optional; "" is the project's
/// content = "Welcome!"     # UTF-8 text, or
/// content-base64 = "…"     # bytes; exactly one of the two
/// app-id = "…"             # optional; "static:<file name without .toml>"
/// [strategy]               # optional, as Publish's Strategy
/// mediums = ["ble", "audio"]
/// mode = "broadcast"       # broadcast, scan or both
/// distance = "default"     # default or earshot
/// ```
enum StaticPublicationFile {
    static let defaultDirectory = "/etc/nearbyd/publications.d"
    /// Far above any valid file (100 KiB of content is 137 KiB in base64), and
    /// checked before parsing so a stray large file costs nothing.
    static let maximumFileBytes = 256 * 1024
    static let fileExtension = ".toml"
    static let keys = ["api-key", "type", "namespace", "content", "content-base64", "app-id"]
    static let strategyKeys = ["mediums", "mode", "distance"]

    /// What came of one file: its publication, or why it has none.
    struct Entry: Equatable, Sendable {
        let path: String
        let result: Result<StaticPublication, ConfigurationError>
    }

    /// Reads the `*.toml` files of `directory` in name order (bytewise, as
    /// `LC_ALL=C ls` lists them), skipping hidden files (editors' locks and
    /// backups); files past the first `maxFiles` are entries with an error,
    /// unread. A missing directory holds no publications; one that cannot be
    /// listed is a single entry with the error. One bad file never stops the others.
    static func loadAll(directory: String, enabled: Set<Medium>, maxFiles: Int) -> [Entry] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory) else { return [] }
        guard isDirectory.boolValue else {
            return [Entry(path: directory, result: .failure(ConfigurationError("\(directory): is not a directory")))]
        }
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            return [Entry(path: directory, result: .failure(ConfigurationError("\(directory): cannot be listed: \(error.localizedDescription)")))]
        }
        let files = names.filter { $0.hasSuffix(fileExtension) && !$0.hasPrefix(".") }
            .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        return files.enumerated().map { index, name in
            let path = (directory as NSString).appendingPathComponent(name)
            guard index < maxFiles else {
                let error = ConfigurationError("\(path): not read: only the first \(maxFiles) files of \(directory) are published")
                return Entry(path: path, result: .failure(error))
            }
            do throws(ConfigurationError) {
                return Entry(path: path, result: .success(try load(path: path, enabled: enabled)))
            } catch {
                return Entry(path: path, result: .failure(error))
            }
        }
    }

    /// Reads and checks one file.
    static func load(path: String, enabled: Set<Medium>) throws(ConfigurationError) -> StaticPublication {
        let bytes = try readFile(path)
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigurationError("\(path): is not UTF-8 text")
        }
        let fileName = (path as NSString).lastPathComponent
        let name = fileName.hasSuffix(fileExtension) ? String(fileName.dropLast(fileExtension.count)) : fileName
        return try parse(text, source: path, name: name, enabled: enabled)
    }

    /// Checks the text of a file; `name` is the file's name without `.toml`,
    /// for the default app id.
    static func parse(_ text: String, source: String, name: String,
                      enabled: Set<Medium>) throws(ConfigurationError) -> StaticPublication {
        let file = try ConfigFile(text: text, source: source)
        let top = try file.topLevel(keys: keys, sections: ["strategy"])
        func required(_ key: String) throws(ConfigurationError) -> String {
            guard let value = try top.string(key) else { throw top.invalid(key, "is missing") }
            return value
        }
        // A rule of the daemon's, with its own wording, applied to this file.
        func checked(_ rule: () throws(NearbyError) -> Void) throws(ConfigurationError) {
            do { try rule() } catch { throw ConfigurationError("\(source): \(error.message)") }
        }

        let apiKey = try required("api-key")
        let appID = try top.string("app-id") ?? "static:\(name)"
        // The rules of CreateManager's api_key and AppId, for the manager this publication gets.
        try checked { () throws(NearbyError) in
            let key = NearbyBusContract.CreateManagerOption.appId
            let options = try Options([key.name: Variant(.string(appID))], allowed: Options.allowed([key]), context: "app-id")
            _ = try ManagerRequest(apiKey: apiKey, options: options)
        }
        let type = try required("type")
        let namespace = try top.string("namespace") ?? ""
        let content = try content(of: top)
        try checked { () throws(NearbyError) in
            try MessageRules.checkType(type)
            try MessageRules.checkNamespace(namespace)
            try MessageRules.checkContent(content)
        }
        var strategy = try strategy(file.section("strategy", keys: strategyKeys), source: source, enabled: enabled)
        // Checked with the default TTL, which publications need; this one has none.
        strategy.ttlSeconds = 0
        return StaticPublication(apiKey: apiKey, appID: appID,
                                 message: Message(namespace: namespace, type: type, content: content), strategy: strategy)
    }

    // MARK: Parts

    private static func content(of top: Section) throws(ConfigurationError) -> [UInt8] {
        switch (try top.string("content"), try top.string("content-base64")) {
        case (let text?, nil):
            return Array(text.utf8)
        case (nil, let encoded?):
            // Long contents may be split over the lines of a multi-line string.
            let compact = encoded.filter { !$0.isWhitespace }
            guard let data = Data(base64Encoded: compact) else {
                throw top.invalid("content-base64", "is not valid base64")
            }
            return Array(data)
        case (.some, .some):
            throw top.invalid("content", "and content-base64 are both given; give exactly one")
        case (nil, nil):
            throw top.invalid("content", "is missing (or give content-base64)")
        }
    }

    /// `[strategy]` as Publish's Strategy: named the same, each name mapped to the
    /// same enums, checked by the same rules (``Strategy/validated(for:enabled:explicitMediums:)``).
    private static func strategy(_ section: Section, source: String,
                                 enabled: Set<Medium>) throws(ConfigurationError) -> Strategy {
        var strategy = Strategy()
        let names = try section.strings("mediums")
        if let names {
            var mediums: Set<Medium> = []
            for name in names {
                guard let medium = Medium(rawValue: name) else {
                    throw section.invalid("mediums", "names an unknown medium '\(name)'; known: \(choices(Medium.self))")
                }
                guard mediums.insert(medium).inserted else { throw section.invalid("mediums", "names '\(name)' twice") }
            }
            strategy.mediums = mediums
        }
        if let mode: DiscoveryMode = try choice("mode", in: section) { strategy.mode = mode }
        if let distance: DistanceType = try choice("distance", in: section) { strategy.distance = distance }
        do {
            return try strategy.validated(for: .publication, enabled: enabled, explicitMediums: names != nil)
        } catch {
            throw ConfigurationError("\(source): [strategy] \(error.message)")
        }
    }

    private static func choice<T: RawRepresentable & CaseIterable>(
        _ key: String, in section: Section
    ) throws(ConfigurationError) -> T? where T.RawValue == String {
        guard let name = try section.string(key) else { return nil }
        guard let value = T(rawValue: name) else {
            throw section.invalid(key, "must be one of \(choices(T.self)), not '\(name)'")
        }
        return value
    }

    private static func choices<T: RawRepresentable & CaseIterable>(_: T.Type) -> String where T.RawValue == String {
        T.allCases.map(\.rawValue).joined(separator: ", ")
    }

    /// The file's bytes, if it is a regular file of at most ``maximumFileBytes``.
    /// Opened without blocking, so that a FIFO named `*.toml` is refused, not waited on.
    private static func readFile(_ path: String) throws(ConfigurationError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { throw ConfigurationError("\(path): cannot be opened: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw ConfigurationError("\(path): \(String(cString: strerror(errno)))") }
        guard status.st_mode & S_IFMT == S_IFREG else { throw ConfigurationError("\(path): is not a regular file") }
        // One byte past the limit tells a file that is too large, whatever its size said a moment ago.
        var bytes = [UInt8](repeating: 0, count: maximumFileBytes + 1)
        var count = 0
        while count < bytes.count {
            let got = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + count, $0.count - count) }
            if got < 0, errno == EINTR { continue }
            guard got >= 0 else { throw ConfigurationError("\(path): cannot be read: \(String(cString: strerror(errno)))") }
            if got == 0 { break }
            count += got
        }
        guard count <= maximumFileBytes else {
            throw ConfigurationError("\(path): is larger than \(maximumFileBytes / 1024) KiB")
        }
        return Array(bytes.prefix(count))
    }
}
