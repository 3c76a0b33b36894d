import Foundation

/// Where the project's programs were built: beside the test binary, unless
/// `NEARBYD_BIN_DIR` says otherwise.
public enum Programs {
    public static var directory: String {
        if let override = ProcessInfo.processInfo.environment["NEARBYD_BIN_DIR"], !override.isEmpty { return override }
        return URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().path
    }

    public static func path(_ name: String) -> String {
        directory + "/" + name
    }
}

/// A fresh directory for one test's files, removed by ``remove()``.
public struct TemporaryDirectory: Sendable {
    public let path: String

    public init(_ prefix: String = "nearbyd-test") throws {
        path = FileManager.default.temporaryDirectory
            .appendingPathComponent("\(prefix)-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    public func file(_ name: String) -> String {
        path + "/" + name
    }

    public func write(_ name: String, _ text: String) throws -> String {
        let target = file(name)
        try text.write(toFile: target, atomically: true, encoding: .utf8)
        return target
    }

    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}
