import Foundation
import NearbyCore
import ServerAPI

/// Checks what a project sends about its beacons before anything is stored;
/// every error names the field at fault. The bounds keep one beacon's row
/// small whatever a client sends.
enum BeaconValidation {
    static let maxDescriptionBytes = 1024
    static let maxProperties = 64
    static let maxPropertyKeyBytes = 128
    static let maxPropertyValueBytes = 1024
    /// `indoorLevel.name` and `placeId`.
    static let maxNameBytes = 256
    static let stabilities = ["STABLE", "PORTABLE", "MOBILE", "ROVING"]
    static let maxAttachmentBytes = 1024
    static let maxTelemetryBytes = 64

    /// Copies what a client may set (description, properties, stability,
    /// place) from `fields` onto `beacon`, checked. A field `fields` lacks is
    /// cleared, as Google's update does.
    static func describe(_ beacon: inout StoredBeacon, with fields: Beacon) throws(APIError) {
        try checkLength(fields.description, max: maxDescriptionBytes, field: "description", .freeText)
        let properties = fields.properties ?? [:]
        guard properties.count <= maxProperties else {
            throw APIError(.invalidArgument, "properties has \(properties.count) entries; at most \(maxProperties) are kept")
        }
        for (key, value) in properties {
            guard !key.isEmpty else { throw APIError(.invalidArgument, "properties has an empty key") }
            try checkLength(key, max: maxPropertyKeyBytes, field: "a properties key", .name)
            try checkLength(value, max: maxPropertyValueBytes, field: "properties.\(key)", .freeText)
        }
        if let stability = fields.expectedStability, !stabilities.contains(stability) {
            throw APIError(.invalidArgument,
                           "expectedStability '\(stability)' is not one of \(stabilities.joined(separator: ", "))")
        }
        try checkLength(fields.indoorLevel?.name, max: maxNameBytes, field: "indoorLevel.name", .name)
        try checkLength(fields.placeId, max: maxNameBytes, field: "placeId", .name)
        if let latLng = fields.latLng {
            guard (-90...90).contains(latLng.latitude) else {
                throw APIError(.invalidArgument, "latLng.latitude \(latLng.latitude) is not between -90 and 90")
            }
            guard (-180...180).contains(latLng.longitude) else {
                throw APIError(.invalidArgument, "latLng.longitude \(latLng.longitude) is not between -180 and 180")
            }
        }
        beacon.description = fields.description
        beacon.properties = properties
        beacon.expectedStability = fields.expectedStability
        beacon.indoorLevel = fields.indoorLevel?.name
        beacon.latLng = fields.latLng
        beacon.placeId = fields.placeId
    }

    static func attachmentData(_ data: Data) throws(APIError) {
        guard (1...maxAttachmentBytes).contains(data.count) else {
            throw APIError(.invalidArgument, "data is \(data.count) bytes; an attachment holds 1 to \(maxAttachmentBytes) bytes")
        }
    }

    static func telemetry(_ data: Data, field: String) throws(APIError) {
        guard data.count <= maxTelemetryBytes else {
            throw APIError(.invalidArgument, "\(field) is \(data.count) bytes; at most \(maxTelemetryBytes) are taken")
        }
    }

    /// At most `max` bytes, and within ``TextRule`` (no NUL, which
    /// PostgreSQL's text cannot hold: both engines refuse it alike).
    private static func checkLength(_ text: String?, max: Int, field: String, _ kind: TextRule.Kind) throws(APIError) {
        guard let text else { return }
        guard text.utf8.count <= max else {
            throw APIError(.invalidArgument, "\(field) is \(text.utf8.count) bytes long (UTF-8); at most \(max) are kept")
        }
        if let problem = TextRule.problem(text, field: field, kind) { throw APIError(.invalidArgument, problem) }
    }
}

/// RFC 3339 times, with or without fractional seconds.
struct RFC3339Parser {
    private let plain = ISO8601DateFormatter()
    private let fractional = ISO8601DateFormatter()

    init() {
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    }

    /// Milliseconds since the epoch; `field` names the text in the error.
    func milliseconds(_ text: String, field: String) throws(APIError) -> UInt64 {
        guard let date = plain.date(from: text) ?? fractional.date(from: text), date.timeIntervalSince1970 >= 0 else {
            throw APIError(.invalidArgument, "\(field) '\(text)' is not an RFC 3339 time such as 2024-05-01T12:00:00Z")
        }
        return UInt64(date.timeIntervalSince1970 * 1000)
    }
}
