import Foundation
import NearbyCore

/// The operator's view of projects: what `nearby-server project ...` does.
public struct ProjectAdmin: Sendable {
    private let storage: any ServerStorage
    private let clock: any WallClock

    public init(storage: any ServerStorage, clock: any WallClock = SystemWallClock()) {
        self.storage = storage
        self.clock = clock
    }

    /// A new project and the only copies of its API key, admin key and
    /// server key (the server keeps hashes).
    public struct Created: Sendable, Equatable, Codable {
        public var project: String
        public var namespace: String
        public var apiKey: String
        /// The bearer credential of the beacon registry (`/v1beta1/...`).
        public var adminKey: String
        /// The password of the project's application servers on the XMPP
        /// connection server (their user name is `PROJECT@DOMAIN`).
        public var serverKey: String
    }

    /// Creates a project named `name`, whose namespace is the same name.
    public func create(name: String) async throws -> Created {
        try Self.checkName(name)
        let apiKey = Credentials.newSecret()
        let adminKey = Credentials.newSecret()
        let serverKey = Credentials.newSecret()
        let record = ProjectRecord(name: name, namespace: name, createdAtMs: clock.nowMs)
        try await storage.createProject(record, apiKeyHash: Credentials.hash(apiKey), adminKeyHash: Credentials.hash(adminKey),
                                        serverKeyHash: Credentials.hash(serverKey))
        return Created(project: name, namespace: name, apiKey: apiKey, adminKey: adminKey, serverKey: serverKey)
    }

    /// A project's new admin key, the only copy.
    public struct IssuedAdminKey: Sendable, Equatable, Codable {
        public var project: String
        public var adminKey: String
    }

    /// Issues a new admin key for the project; the one it had stops working at once.
    public func issueAdminKey(name: String) async throws -> IssuedAdminKey {
        let adminKey = Credentials.newSecret()
        try await storage.replaceAdminKey(project: name, adminKeyHash: Credentials.hash(adminKey), createdAtMs: clock.nowMs)
        return IssuedAdminKey(project: name, adminKey: adminKey)
    }

    /// A project's new server key, the only copy.
    public struct IssuedServerKey: Sendable, Equatable, Codable {
        public var project: String
        public var serverKey: String
    }

    /// Issues a new server key for the project; application servers logged in
    /// with the old one keep their connections, new logins need the new one.
    public func issueServerKey(name: String) async throws -> IssuedServerKey {
        let serverKey = Credentials.newSecret()
        try await storage.replaceServerKey(project: name, serverKeyHash: Credentials.hash(serverKey), createdAtMs: clock.nowMs)
        return IssuedServerKey(project: name, serverKey: serverKey)
    }

    /// Every project, by name.
    public func list() async throws -> [ProjectSummary] {
        try await storage.projects()
    }

    /// The project's devices, by id; with `staleDays`, only those not seen
    /// for that many days or more. Throws when there is no such project.
    public func devices(project: String, staleDays: Int? = nil) async throws -> [DeviceActivity] {
        guard try await storage.project(name: project) != nil else { throw StorageError.projectNotFound(project) }
        let devices = try await storage.deviceActivity(project: project)
        guard let staleDays else { return devices }
        let now = clock.nowMs
        let idleMs = UInt64(staleDays) * 86_400_000
        return devices.filter { $0.lastSeenAtMs + idleMs <= now }
    }

    /// Deletes these devices with their tokens, publications and
    /// subscriptions; a running server drops them at its next sweep.
    public func remove(devices: [String]) async throws {
        for device in devices { _ = try await storage.deleteDevice(id: device) }
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
