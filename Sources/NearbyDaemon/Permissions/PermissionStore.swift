import Foundation
import Logging
import NearbyCore

/// Who made a permission decision.
enum DecisionSource: String, Codable, Sendable {
    /// The permission agent of the user's session.
    case agent
    /// The app's own pre-flight dialog (`PermissionRequestHandler`).
    case app
    /// `SetPermission` or the `PermissionGranted` property.
    case user
    /// The configured default policy, with nobody to ask.
    case policy
}

/// One user's decision about one app.
struct PermissionDecision: Codable, Equatable, Sendable {
    var granted: Bool
    var decidedBy: DecisionSource
    /// Microseconds since the Unix epoch.
    var decidedAt: UInt64
}

/// Whose decision: a user and an app.
struct PermissionKey: Hashable, Codable, Sendable {
    let uid: UInt32
    let appId: String
}

/// Permission decisions per (uid, AppId), kept in `permissions.json` in the
/// state directory so they survive a restart: what is in force, and the
/// file's contents made from it. The writing is the broker's, off the bus
/// thread; a write that fails puts back what the file still holds.
struct PermissionStore {
    private struct Entry: Codable {
        let uid: UInt32
        let appId: String
        let decision: PermissionDecision
    }

    private struct File: Codable {
        var version = 1
        var decisions: [Entry]
    }

    let path: String
    let maxDecisionsPerUser: Int
    let maxDecisions: Int
    private(set) var decisions: [PermissionKey: PermissionDecision] = [:]
    private var countByUser: [UInt32: Int] = [:]

    /// Loads the decisions; a file that cannot be read is set aside (never
    /// deleted) and the daemon starts with none.
    init(stateDirectory: String, maxDecisionsPerUser: Int, maxDecisions: Int, logger: Logger) {
        path = stateDirectory + "/permissions.json"
        self.maxDecisionsPerUser = maxDecisionsPerUser
        self.maxDecisions = maxDecisions
        guard let data = FileManager.default.contents(atPath: path) else { return }
        do {
            let file = try JSONDecoder().decode(File.self, from: data)
            for entry in file.decisions {
                decisions[PermissionKey(uid: entry.uid, appId: entry.appId)] = entry.decision
            }
            for key in decisions.keys { countByUser[key.uid, default: 0] += 1 }
        } catch {
            let aside = path + ".unreadable-\(Int(Date().timeIntervalSince1970))"
            rename(path, aside)
            logger.error("cannot read the permission decisions; set aside, starting with none",
                         metadata: ["file": "\(aside)", "error": "\(error)"])
        }
    }

    func decision(for key: PermissionKey) -> PermissionDecision? {
        decisions[key]
    }

    /// Puts a decision in force and returns the one it replaces. `LimitExceeded`
    /// when the user has `maxDecisionsPerUser` apps decided already, or all
    /// users `maxDecisions`.
    mutating func record(_ decision: PermissionDecision, for key: PermissionKey) throws(NearbyError) -> PermissionDecision? {
        if decisions[key] == nil {
            guard countByUser[key.uid, default: 0] < maxDecisionsPerUser else {
                throw .limitExceeded("user \(key.uid) has permission decisions for \(maxDecisionsPerUser) apps, the configured most ([permissions] max-decisions-per-user)")
            }
            guard decisions.count < maxDecisions else {
                throw .limitExceeded("the daemon keeps \(maxDecisions) permission decisions, the configured most ([permissions] max-decisions)")
            }
        }
        let previous = decisions.updateValue(decision, forKey: key)
        if previous == nil { countByUser[key.uid, default: 0] += 1 }
        return previous
    }

    /// Puts back what a decision replaced (the file could not take it).
    mutating func restore(_ previous: PermissionDecision?, for key: PermissionKey) {
        let replaced = decisions[key]
        decisions[key] = previous
        switch (replaced, previous) {
        case (nil, .some): countByUser[key.uid, default: 0] += 1
        case (.some, nil):
            countByUser[key.uid, default: 0] -= 1
            if countByUser[key.uid] == 0 { countByUser[key.uid] = nil }
        default: break
        }
    }

    /// The file's contents for the decisions in force.
    func contents() throws -> Data {
        let entries = decisions.map { Entry(uid: $0.key.uid, appId: $0.key.appId, decision: $0.value) }
            .sorted { ($0.uid, $0.appId) < ($1.uid, $1.appId) }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try encoder.encode(File(decisions: entries))
    }
}
