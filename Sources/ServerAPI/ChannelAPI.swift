import Foundation

// The direct channel: `GET /v1/devices/{device}/channel`, a WebSocket a device
// opens (with its bearer credential) while one of its apps wants upstream and
// downstream messages to flow. Text frames, one JSON object each.
//
// Upstream, the device sends each pending message and keeps it until the
// server reports it `sent` (the application server acknowledged it) or
// `failed`. After a reconnect it sends again whatever is still pending: the
// server knows each (app, message id) of the device and answers a repeat with
// its verdict instead of delivering it twice. Downstream, the server sends
// each message for the device until the device acknowledges it.

extension APIPath {
    public static func channel(_ device: String) -> String { "/v1/devices/\(device)/channel" }
}

/// A device's message for its application server.
public struct ChannelUpstream: Codable, Sendable, Equatable {
    /// The sending app's id: CCS's `category`.
    public var app: String
    public var messageId: String
    /// `SENDER_ID@DOMAIN`: the sender id must be the device's project.
    public var to: String
    public var data: [String: String]
    /// When the message stops being worth delivering; at or before the time
    /// it was sent (TTL 0): delivered now to a connected application server or failed.
    public var expiresAtMs: UInt64

    public init(app: String, messageId: String, to: String, data: [String: String], expiresAtMs: UInt64) {
        self.app = app
        self.messageId = messageId
        self.to = to
        self.data = data
        self.expiresAtMs = expiresAtMs
    }
}

/// One upstream message of one app of the device.
public struct ChannelMessageRef: Codable, Sendable, Hashable {
    public var app: String
    public var messageId: String

    public init(app: String, messageId: String) {
        self.app = app
        self.messageId = messageId
    }
}

/// An upstream message that will not be delivered.
public struct ChannelFailure: Codable, Sendable, Equatable {
    public var app: String
    public var messageId: String
    /// `SERVICE_NOT_AVAILABLE` (TTL 0 and no application server connected),
    /// `TTL_EXCEEDED`, `INVALID_PARAMETERS` (not addressed to the device's project),
    /// `DEVICE_MESSAGE_RATE_EXCEEDED` (the device has its limit of messages kept).
    public var error: String
    public var description: String

    public init(app: String, messageId: String, error: String, description: String) {
        self.app = app
        self.messageId = messageId
        self.error = error
        self.description = description
    }
}

/// A message from an application server to the device.
public struct ChannelDownstream: Codable, Sendable, Equatable {
    /// The application server's message id, which the device acknowledges.
    public var messageId: String
    /// The sender id (the project) of the application server.
    public var from: String
    public var data: [String: String]

    public init(messageId: String, from: String, data: [String: String]) {
        self.messageId = messageId
        self.from = from
        self.data = data
    }
}

/// What a device writes on its channel.
public enum ChannelRequest: Codable, Sendable, Equatable {
    /// Deliver this message (again, after a reconnect, if still pending).
    case send(ChannelUpstream)
    /// The downstream message with this id reached the device's apps.
    case ack(messageId: String)

    private enum CodingKeys: String, CodingKey { case op, message, messageId }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        switch try container.decode(String.self, forKey: .op) {
        case "send": self = .send(try container.decode(ChannelUpstream.self, forKey: .message))
        case "ack": self = .ack(messageId: try container.decode(String.self, forKey: .messageId))
        case let other:
            throw DecodingError.dataCorruptedError(forKey: .op, in: container, debugDescription: "unknown op \(other)")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .send(let message):
            try container.encode("send", forKey: .op)
            try container.encode(message, forKey: .message)
        case .ack(let messageId):
            try container.encode("ack", forKey: .op)
            try container.encode(messageId, forKey: .messageId)
        }
    }
}

/// What the server writes on a device's channel.
public enum ChannelEvent: Codable, Sendable, Equatable {
    /// The application server acknowledged these messages (several at once
    /// when acks arrive together).
    case sent([ChannelMessageRef])
    case failed(ChannelFailure)
    /// A downstream message; repeated after a reconnect until acknowledged.
    case message(ChannelDownstream)

    private enum CodingKeys: String, CodingKey { case event, messages, failure, message }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        switch try container.decode(String.self, forKey: .event) {
        case "sent": self = .sent(try container.decode([ChannelMessageRef].self, forKey: .messages))
        case "failed": self = .failed(try container.decode(ChannelFailure.self, forKey: .failure))
        case "message": self = .message(try container.decode(ChannelDownstream.self, forKey: .message))
        case let other:
            throw DecodingError.dataCorruptedError(forKey: .event, in: container, debugDescription: "unknown event \(other)")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .sent(let messages):
            try container.encode("sent", forKey: .event)
            try container.encode(messages, forKey: .messages)
        case .failed(let failure):
            try container.encode("failed", forKey: .event)
            try container.encode(failure, forKey: .failure)
        case .message(let message):
            try container.encode("message", forKey: .event)
            try container.encode(message, forKey: .message)
        }
    }
}

/// Limits of the channel both sides respect.
public enum ChannelLimits {
    /// Largest frame either side sends: a 4096-byte payload, JSON-escaped
    /// (up to 6 bytes per byte), with its ids and framing.
    public static let maximumFrameBytes = 64 << 10
}
