import Foundation
import NearbyCore
import ServerAPI

/// Checks what a device sends before anything is stored; every error names the
/// field at fault.
enum Validation {
    /// How far in the future a publication or subscription may expire.
    static let maximumLifetimeMs: UInt64 = 86_400_000
    /// Tolerance for a device clock that runs a little ahead of the server's.
    static let clockSlackMs: UInt64 = 60_000

    /// A publication or subscription id: 1..128 of `A-Z a-z 0-9 . _ -`.
    static func checkID(_ id: String, kind: String) throws(APIError) {
        let bytes = Array(id.utf8)
        guard (1...128).contains(bytes.count) else {
            throw APIError(.invalidArgument, "\(kind) id must be 1 to 128 characters long")
        }
        guard bytes.allSatisfy(MessageRules.isIdentifierByte) else {
            throw APIError(.invalidArgument, "\(kind) id '\(id)' may only hold letters, digits, '.', '_' and '-'")
        }
    }

    static func publication(_ spec: PublicationSpec, id: String, device: String, projectNamespace: String,
                            nowMs: UInt64) throws(APIError) -> StoredPublication {
        try checkID(id, kind: "publication")
        try rule { () throws(NearbyError) in try MessageRules.checkContent(Array(spec.content)) }
        try rule { () throws(NearbyError) in try MessageRules.checkType(spec.type) }
        try rule { () throws(NearbyError) in try MessageRules.checkNamespace(spec.namespace) }
        let mediums = try checkMediums(spec.mediums)
        guard spec.expiresAtMs > nowMs else {
            throw APIError(.invalidArgument, "expiresAtMs \(spec.expiresAtMs) is not in the future (server time is \(nowMs))")
        }
        try checkHorizon(spec.expiresAtMs, nowMs: nowMs)
        return StoredPublication(device: device, id: id, namespace: spec.namespace.isEmpty ? projectNamespace : spec.namespace,
                                 type: spec.type, content: spec.content, mediums: mediums, mode: spec.mode,
                                 expiresAtMs: spec.expiresAtMs, distance: try distance(spec.distance, mediums: mediums))
    }

    static func subscription(_ spec: SubscriptionSpec, id: String, device: String, projectNamespace: String,
                             nowMs: UInt64) throws(APIError) -> StoredSubscription {
        try checkID(id, kind: "subscription")
        try rule { () throws(NearbyError) in try MessageRules.checkType(spec.type) }
        try rule { () throws(NearbyError) in try MessageRules.checkNamespace(spec.namespace) }
        let mediums = try checkMediums(spec.mediums)
        if spec.expiresAtMs != 0 {
            guard spec.expiresAtMs > nowMs else {
                throw APIError(.invalidArgument,
                               "expiresAtMs \(spec.expiresAtMs) is not in the future (server time is \(nowMs)); 0 means no expiry")
            }
            try checkHorizon(spec.expiresAtMs, nowMs: nowMs)
        }
        return StoredSubscription(device: device, id: id, namespace: spec.namespace.isEmpty ? projectNamespace : spec.namespace,
                                  type: spec.type, mediums: mediums, mode: spec.mode, expiresAtMs: spec.expiresAtMs,
                                  distance: try distance(spec.distance, mediums: mediums))
    }

    /// `earshot` is heard over audio only.
    private static func distance(_ distance: DistanceType?, mediums: [Medium]) throws(APIError) -> DistanceType {
        let distance = distance ?? .default
        guard distance == .default || mediums.contains(.audio) else {
            throw APIError(.invalidArgument, "distance 'earshot' needs the audio medium")
        }
        return distance
    }

    /// A change of a batch, checked as its own request would be.
    static func change(_ change: ChangeBatch.Change, device: String, projectNamespace: String,
                       nowMs: UInt64) throws(APIError) -> ObjectChange {
        switch change {
        case .putPublication(let id, let spec):
            return .putPublication(try publication(spec, id: id, device: device, projectNamespace: projectNamespace, nowMs: nowMs))
        case .deletePublication(let id):
            try checkID(id, kind: "publication")
            return .deletePublication(id: id)
        case .putSubscription(let id, let spec):
            return .putSubscription(try subscription(spec, id: id, device: device, projectNamespace: projectNamespace, nowMs: nowMs))
        case .deleteSubscription(let id):
            try checkID(id, kind: "subscription")
            return .deleteSubscription(id: id)
        }
    }

    /// Non-empty, without repeats; returned sorted so stored and listed forms are stable.
    private static func checkMediums(_ mediums: [Medium]) throws(APIError) -> [Medium] {
        guard !mediums.isEmpty else { throw APIError(.invalidArgument, "mediums must name at least one medium (ble, audio)") }
        guard Set(mediums).count == mediums.count else {
            throw APIError(.invalidArgument, "mediums names a medium more than once")
        }
        return mediums.sorted()
    }

    private static func checkHorizon(_ expiresAtMs: UInt64, nowMs: UInt64) throws(APIError) {
        let latest = nowMs + maximumLifetimeMs + clockSlackMs
        guard expiresAtMs <= latest else {
            throw APIError(.invalidArgument,
                           "expiresAtMs \(expiresAtMs) is more than 86400 seconds ahead (server time is \(nowMs), latest allowed \(latest))")
        }
    }

    private static func rule(_ check: () throws(NearbyError) -> Void) throws(APIError) {
        do {
            try check()
        } catch {
            throw APIError(.invalidArgument, error.message)
        }
    }
}
