import Foundation

/// The operator's view of projects: what `nearby-server project ...` does.
public struct ProjectAdmin: Sendable {
    private let storage: any ServerStorage
    private let clock: any WallClock

    public init(storage: any ServerStorage, clock: any WallClock = SystemWallClock()) {
        self.storage = storage
        self.clock = clock
    }

    /// A new project and the only copy of its API key (the server keeps a hash).
    public struct Created: Sendable, Equatable, Codable {
        public var project: String
        public var namespace: String
        public var apiKey: String
    }

    /// Creates a project named `name`, whose namespace is the same name.
    public func create(name: String) async throws -> Created {
        try Self.checkName(name)
        let apiKey = Credentials.newSecret()
        let record = ProjectRecord(name: name, namespace: name, createdAtMs: clock.nowMs)
        try await storage.createProject(record, apiKeyHash: Credentials.hash(apiKey))
        return Created(project: name, namespace: name, apiKey: apiKey)
    }

    /// Every project, by name.
    public func list() async throws -> [ProjectSummary] {
        try await storage.projects()
    }

    /// Deletes a project and everything of it. Throws when there is none of that name.
    public func delete(name: String) async throws {
        guard try await storage.deleteProject(name: name) else { throw StorageError.projectNotFound(name) }
    }

    /// 1..63 of lower-case letters, digits and '-', not starting with '-': a
    /// name that is also a valid namespace and DNS label.
    public static func checkName(_ name: String) throws(ProjectNameError) {
        let bytes = Array(name.utf8)
        guard (1...63).contains(bytes.count) else {
            throw ProjectNameError("project name '\(name)' must be 1 to 63 characters long")
        }
        func allowed(_ byte: UInt8) -> Bool {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
        }
        guard allowed(bytes[0]), bytes.allSatisfy({ allowed($0) || $0 == UInt8(ascii: "-") }) else {
            throw ProjectNameError("project name '\(name)' may only hold a-z, 0-9 and '-', and must start with a letter or digit")
        }
    }
}

/// A project name that does not follow the rules.
public struct ProjectNameError: Error, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
