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
/// state directory so they survive a restart. Decisions are rare (a person
/// answers a dialog), so each is written through at once, synchronously.
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
    private(set) var decisions: [PermissionKey: PermissionDecision] = [:]
    private var countByUser: [UInt32: Int] = [:]

    /// Loads the decisions; a file that cannot be read is set aside (never
    /// deleted) and the daemon starts with none.
    init(stateDirectory: String, maxDecisionsPerUser: Int, logger: Logger) {
        path = stateDirectory + "/permissions.json"
        self.maxDecisionsPerUser = maxDecisionsPerUser
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

    /// Records a decision and writes the file. `LimitExceeded` when the user has
    /// `maxDecisionsPerUser` apps decided already; `Failed` when the file cannot be written
    /// (the decision is then not taken).
    mutating func record(_ decision: PermissionDecision, for key: PermissionKey) throws(NearbyError) {
        let isNew = decisions[key] == nil
        if isNew, countByUser[key.uid, default: 0] >= maxDecisionsPerUser {
            throw .limitExceeded("user \(key.uid) has permission decisions for \(maxDecisionsPerUser) apps, the configured most")
        }
        let previous = decisions.updateValue(decision, forKey: key)
        do {
            try save()
        } catch {
            decisions[key] = previous
            throw .failed("cannot store the permission decision in \(path): \(error)")
        }
        if isNew { countByUser[key.uid, default: 0] += 1 }
    }

    private func save() throws {
        let entries = decisions.map { Entry(uid: $0.key.uid, appId: $0.key.appId, decision: $0.value) }
            .sorted { ($0.uid, $0.appId) < ($1.uid, $1.appId) }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try StateFile.replace(path, with: encoder.encode(File(decisions: entries)))
    }
}
