import Foundation
import ServerAPI

/// The JSON inside `<gcm xmlns="google:mobile:data">` in both directions, in
/// the shape of Firebase Cloud Messaging's XMPP connection server (CCS).
enum CCSPayload {
    /// The namespace of the `<gcm>` element.
    static let namespace = "google:mobile:data"

    /// What an application server sends.
    enum Incoming: Equatable {
        /// It has an upstream message (`to`: the device) or a receipt (`to`: the server).
        case ack(to: String, messageId: String)
        /// It refuses one: CCS treats that as handled too.
        case nack(to: String, messageId: String)
        case downstream(Downstream)
    }

    /// A message for a device.
    struct Downstream: Equatable {
        var to: String
        var messageId: String
        var data: [String: String]
        var timeToLive: Int
        var deliveryReceiptRequested: Bool
        var dryRun: Bool
    }

    /// Why a payload was refused: `messageId` when it had a usable one.
    struct Refusal: Error, Equatable {
        var code: NackCode
        var description: String
        var messageId: String?
        var to: String?
    }

    /// CCS's nack errors that this server gives.
    enum NackCode: String {
        case badRegistration = "BAD_REGISTRATION"
        case deviceUnregistered = "DEVICE_UNREGISTERED"
        case invalidJSON = "INVALID_JSON"
        case badAck = "BAD_ACK"
        case deviceMessageRateExceeded = "DEVICE_MESSAGE_RATE_EXCEEDED"
        case serviceUnavailable = "SERVICE_UNAVAILABLE"
        case internalServerError = "INTERNAL_SERVER_ERROR"
    }

    private static let downstreamFields: Set<String> = [
        "to", "message_id", "data", "time_to_live", "delivery_receipt_requested", "dry_run", "collapse_key", "priority",
    ]
    private static let replyFields: Set<String> = ["to", "message_id", "message_type", "error", "error_description"]

    /// Reads an application server's payload strictly: unknown fields, wrong
    /// types and missing fields are refused with `INVALID_JSON`, saying which.
    static func parse(_ text: String) throws(Refusal) -> Incoming {
        guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
            throw Refusal(code: .invalidJSON, description: "the payload is not a JSON object")
        }
        let messageId = object["message_id"] as? String
        let to = object["to"] as? String
        func refuse(_ description: String) -> Refusal {
            Refusal(code: .invalidJSON, description: description, messageId: messageId, to: to)
        }
        guard let messageId, !messageId.isEmpty else { throw refuse("message_id must be a non-empty string") }
        guard let to, !to.isEmpty else { throw refuse("to must be a non-empty string") }
        let maximumIDBytes = CCSRules.maximumIDBytes
        guard CCSRules.isID(messageId) else { throw refuse("message_id must be 1 to \(maximumIDBytes) bytes without control characters") }
        guard CCSRules.isID(to) else { throw refuse("to must be 1 to \(maximumIDBytes) bytes without control characters") }
        if let type = object["message_type"] {
            if let unknown = Set(object.keys).subtracting(replyFields).sorted().first { throw refuse("unknown field '\(unknown)'") }
            switch type as? String {
            case "ack": return .ack(to: to, messageId: messageId)
            case "nack": return .nack(to: to, messageId: messageId)
            default: throw refuse("message_type must be 'ack' or 'nack' in a message to the server")
            }
        }
        if let unknown = Set(object.keys).subtracting(downstreamFields).sorted().first { throw refuse("unknown field '\(unknown)'") }
        var data: [String: String] = [:]
        if let value = object["data"] {
            guard let dictionary = value as? [String: Any] else { throw refuse("data must be an object of strings") }
            for (key, value) in dictionary {
                guard let string = value as? String else { throw refuse("data '\(key)' must be a string") }
                data[key] = string
            }
        }
        if let problem = CCSRules.dataProblem(data) { throw refuse(problem) }
        let maximumTimeToLive = CCSRules.maximumTimeToLiveSeconds
        var timeToLive = maximumTimeToLive
        if let value = object["time_to_live"] {
            guard let number = value as? NSNumber, !isBool(number), let integer = Int(exactly: number.doubleValue),
                  (0...maximumTimeToLive).contains(integer) else {
                throw refuse("time_to_live must be an integer between 0 and \(maximumTimeToLive)")
            }
            timeToLive = integer
        }
        func flag(_ name: String) throws(Refusal) -> Bool {
            guard let value = object[name] else { return false }
            guard let number = value as? NSNumber, isBool(number) else { throw refuse("\(name) must be true or false") }
            return number.boolValue
        }
        if let value = object["collapse_key"], !(value is String) { throw refuse("collapse_key must be a string") }
        if let value = object["priority"], !["normal", "high"].contains(value as? String) {
            throw refuse("priority must be 'normal' or 'high'")
        }
        return .downstream(Downstream(to: to, messageId: messageId, data: data, timeToLive: timeToLive,
                                      deliveryReceiptRequested: try flag("delivery_receipt_requested"), dryRun: try flag("dry_run")))
    }

    /// JSONSerialization gives true and false as NSNumbers of type char, which
    /// no JSON number is.
    private static func isBool(_ number: NSNumber) -> Bool {
        String(cString: number.objCType) == "c"
    }

    // MARK: What the server sends

    // The shapes the server writes, with CCS's field names. Encoded by
    // JSONEncoder: JSONSerialization took six times as long for these small
    // objects (62 µs against 10 for an upstream payload), and an upstream
    // payload is written for every message.

    private struct UpstreamPayload: Encodable {
        let category: String, from: String, message_id: String, data: [String: String]
    }

    private struct Reply: Encodable {
        let message_type: String, message_id: String
        var from: String? = nil, error: String? = nil, error_description: String? = nil
    }

    private struct ReceiptPayload: Encodable {
        struct Data: Encodable {
            let message_status: String, original_message_id: String, device_registration_id: String, message_sent_timestamp: String
        }
        let message_type = "receipt", message_id: String, from: String, data: Data
    }

    private struct Control: Encodable {
        let message_type = "control", control_type: String
    }

    static func upstream(app: String, from device: String, messageId: String, data: [String: String]) -> String {
        encode(UpstreamPayload(category: app, from: device, message_id: messageId, data: data))
    }

    static func ack(messageId: String, from: String) -> String {
        encode(Reply(message_type: "ack", message_id: messageId, from: from))
    }

    static func nack(_ refusal: Refusal) -> String {
        // CCS answers with the message's own id; a payload without one gets an empty id.
        encode(Reply(message_type: "nack", message_id: refusal.messageId ?? "", from: refusal.to,
                     error: refusal.code.rawValue, error_description: refusal.description))
    }

    /// A delivery receipt for a downstream message the device has.
    static func receipt(originalMessageId: String, device: String, domain: String, sentAtMs: UInt64) -> (messageId: String, payload: String) {
        let messageId = "dr2:" + originalMessageId
        return (messageId, encode(ReceiptPayload(
            message_id: messageId, from: domain,
            data: .init(message_status: "MESSAGE_SENT_TO_DEVICE", original_message_id: originalMessageId,
                        device_registration_id: device, message_sent_timestamp: String(sentAtMs)))))
    }

    static let connectionDraining = encode(Control(control_type: "CONNECTION_DRAINING"))

    private static func encode(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Only strings and dictionaries of strings: encoding cannot fail.
        return String(decoding: (try? encoder.encode(value)) ?? Data("{}".utf8), as: UTF8.self)
    }
}
