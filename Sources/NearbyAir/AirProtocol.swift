import Foundation
import NIOCore
import NearbyCore

// The line protocol between nearby-air and the programs attached to it: one JSON
// object per line over a Unix stream socket. Requests carry an `id` that their
// reply repeats; `heard` events arrive whenever the space delivers a broadcast.
// A connection whose first line is an `audio` request becomes, once answered
// `ok`, a device's audio link and carries binary sample frames (see AirAudio).

/// Where nearby-air listens and its clients connect.
public enum AirSocket {
    /// `$XDG_RUNTIME_DIR/nearby-air.sock` when XDG_RUNTIME_DIR is set (a
    /// user's own space), else `/run/nearby-air.sock` (the system's): nearby-air
    /// and nearbyd take the same default, so that started alike they meet.
    public static func defaultPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty { return runtime + "/nearby-air.sock" }
        return "/run/nearby-air.sock"
    }

    /// What to say when connecting to `path` failed with `error`: the path,
    /// the cause in words, and what to do.
    public static func unreachable(_ path: String, _ error: any Error) -> String {
        let errno = (error as? IOError)?.errnoCode
        let cause = switch errno {
        case ENOENT: "no such socket (is `nearby-air serve` running, with this socket?)"
        case ECONNREFUSED: "nothing listens on it (nearby-air is not running; start `nearby-air serve`)"
        case EACCES, EPERM: "permission denied (the socket belongs to another user)"
        case ENOTSOCK, ENOTDIR: "it is not a socket"
        default: "\(error)"
        }
        return "cannot reach nearby-air at \(path): \(cause)"
    }
}

/// A point in the simulated space, in metres.
public struct Position: Codable, Equatable, Sendable, CustomStringConvertible {
    public var x: Double
    public var y: Double
    public var z: Double

    public init(x: Double, y: Double, z: Double = 0) {
        self.x = x
        self.y = y
        self.z = z
    }

    public func distance(to other: Position) -> Double {
        let (dx, dy, dz) = (x - other.x, y - other.y, z - other.z)
        return (dx * dx + dy * dy + dz * dz).squareRoot()
    }

    public var description: String { "(\(x), \(y), \(z))" }

    // Encoded as [x, y, z] (z may be left out).
    public init(from decoder: any Decoder) throws {
        var container = try decoder.unkeyedContainer()
        x = try container.decode(Double.self)
        y = try container.decode(Double.self)
        z = container.isAtEnd ? 0 : try container.decode(Double.self)
        guard [x, y, z].allSatisfy(\.isFinite) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "coordinates must be finite"))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.unkeyedContainer()
        try container.encode(x)
        try container.encode(y)
        try container.encode(z)
    }
}

/// What an attached program asks of the air.
public enum AirRequest: Equatable, Sendable {
    /// Join the space as `device` (one device per connection; names are unique).
    case attach(device: String, position: Position)
    /// Start (or replace) broadcast `id`: `payload` is repeated on `medium` until stopped.
    case advertise(id: String, medium: Medium, payload: [UInt8], txPower: Int)
    case stopAdvertising(id: String)
    /// Start or stop hearing broadcasts on `medium`.
    case scan(medium: Medium, enabled: Bool)
    /// Move any device or beacon (the control interface used by `nearby-air move`).
    case move(device: String, position: Position)
    /// Place (or replace) a beacon: a device of the space itself, not of a
    /// connection, that broadcasts `payload` (BLE advertising data) on BLE
    /// until removed (`nearby-air beacon add`).
    case placeBeacon(name: String, position: Position, payload: [UInt8], txPower: Int)
    /// Remove a beacon (`nearby-air beacon remove`).
    case removeBeacon(name: String)
    /// Describe every attached device.
    case list
    /// Open the audio link of `device`, attached by another connection. Only as
    /// the first line of a connection: after the air's `ok` the connection
    /// carries sample frames (``AirAudio``).
    case audio(device: String)
}

/// A broadcast one device heard.
public struct Heard: Codable, Equatable, Sendable {
    public var medium: Medium
    public var payload: [UInt8]
    /// Received signal strength, dBm.
    public var rssi: Int
    /// The sender's declared strength at one metre, dBm.
    public var txPower: Int
    /// The sending device's name: the simulated radio's sender address.
    public var sender: String

    public init(medium: Medium, payload: [UInt8], rssi: Int, txPower: Int, sender: String) {
        self.medium = medium
        self.payload = payload
        self.rssi = rssi
        self.txPower = txPower
        self.sender = sender
    }
}

/// An attached device, as `list` describes it.
public struct AirDevice: Codable, Equatable, Sendable {
    public var name: String
    public var position: Position
    public var broadcasts: Int
    public var scanning: [Medium]
    /// Whether the device has an audio link: a speaker and a microphone in the acoustic space.
    public var audio: Bool
    /// Whether it is a beacon the space hosts (placed with `placeBeacon`).
    public var beacon: Bool

    public init(name: String, position: Position, broadcasts: Int, scanning: [Medium], audio: Bool = false,
                beacon: Bool = false) {
        self.name = name
        self.position = position
        self.broadcasts = broadcasts
        self.scanning = scanning
        self.audio = audio
        self.beacon = beacon
    }
}

/// What the air sends: the reply to request `id`, or an event.
public enum AirMessage: Equatable, Sendable {
    case ok(id: Int)
    case failed(id: Int, message: String)
    case devices(id: Int, [AirDevice])
    case heard(Heard)
}

/// A request or message that does not follow the protocol.
public struct AirProtocolError: Error, Equatable, CustomStringConvertible {
    public let message: String
    /// The id of the request the error is about, when it had one.
    public var requestID: Int?

    public init(_ message: String, requestID: Int? = nil) {
        self.message = message
        self.requestID = requestID
    }

    public var description: String { message }
}

/// Encodes and decodes lines of the protocol.
public enum AirCoding {
    /// Every field any line may carry; which ones a line has depends on `op` or `event`.
    private struct Line: Codable {
        var id: Int?
        var op: String?
        var event: String?
        var device: String?
        var position: Position?
        var advert: String?
        var medium: Medium?
        var payload: String?
        var txPower: Int?
        var rssi: Int?
        var enabled: Bool?
        var ok: Bool?
        var error: String?
        var devices: [AirDevice]?
    }

    public static func encode(id: Int, _ request: AirRequest) -> String {
        var line = Line(id: id)
        switch request {
        case .attach(let device, let position):
            line.op = "attach"; line.device = device; line.position = position
        case .advertise(let advert, let medium, let payload, let txPower):
            line.op = "advertise"; line.advert = advert; line.medium = medium
            line.payload = Hex.encode(payload); line.txPower = txPower
        case .stopAdvertising(let advert):
            line.op = "stop-advertising"; line.advert = advert
        case .scan(let medium, let enabled):
            line.op = "scan"; line.medium = medium; line.enabled = enabled
        case .move(let device, let position):
            line.op = "move"; line.device = device; line.position = position
        case .placeBeacon(let name, let position, let payload, let txPower):
            line.op = "place-beacon"; line.device = name; line.position = position
            line.payload = Hex.encode(payload); line.txPower = txPower
        case .removeBeacon(let name):
            line.op = "remove-beacon"; line.device = name
        case .list:
            line.op = "list"
        case .audio(let device):
            line.op = "audio"; line.device = device
        }
        return text(line)
    }

    public static func decodeRequest(_ text: String) throws(AirProtocolError) -> (id: Int, request: AirRequest) {
        let line = try parse(text)
        guard let id = line.id else { throw AirProtocolError("request without an integer 'id'") }
        do {
            return (id, try request(in: line))
        } catch {
            throw AirProtocolError(error.message, requestID: id)
        }
    }

    private static func request(in line: Line) throws(AirProtocolError) -> AirRequest {
        switch line.op {
        case "attach":
            return .attach(device: try deviceName(in: line), position: try required(line.position, "position"))
        case "advertise":
            return .advertise(id: try required(line.advert, "advert"), medium: try required(line.medium, "medium"),
                              payload: try payload(in: line, limit: 255), txPower: try txPower(in: line))
        case "place-beacon":
            // A legacy advertisement's data: what a real beacon can send.
            return .placeBeacon(name: try deviceName(in: line), position: try required(line.position, "position"),
                                payload: try payload(in: line, limit: 31), txPower: try txPower(in: line))
        case "remove-beacon":
            return .removeBeacon(name: try required(line.device, "device"))
        case "stop-advertising":
            return .stopAdvertising(id: try required(line.advert, "advert"))
        case "scan":
            return .scan(medium: try required(line.medium, "medium"), enabled: try required(line.enabled, "enabled"))
        case "move":
            return .move(device: try required(line.device, "device"), position: try required(line.position, "position"))
        case "list":
            return .list
        case "audio":
            return .audio(device: try deviceName(in: line))
        case let other:
            throw AirProtocolError("unknown op '\(other ?? "")'")
        }
    }

    private static func deviceName(in line: Line) throws(AirProtocolError) -> String {
        let device = try required(line.device, "device")
        guard !device.isEmpty, device.utf8.count <= 64 else { throw AirProtocolError("device names are 1..64 bytes") }
        return device
    }

    private static func payload(in line: Line, limit: Int) throws(AirProtocolError) -> [UInt8] {
        guard let payload = Hex.decode(try required(line.payload, "payload")), (1...limit).contains(payload.count) else {
            throw AirProtocolError("'payload' must be 1..\(limit) bytes of hex")
        }
        return payload
    }

    private static func txPower(in line: Line) throws(AirProtocolError) -> Int {
        let txPower = try required(line.txPower, "txPower")
        guard (-127...20).contains(txPower) else { throw AirProtocolError("'txPower' must be in -127..20 dBm") }
        return txPower
    }

    public static func encode(_ message: AirMessage) -> String {
        switch message {
        case .ok(let id): text(Line(id: id, ok: true))
        case .failed(let id, let error): text(Line(id: id, error: error))
        case .devices(let id, let devices): text(Line(id: id, devices: devices))
        case .heard(let heard):
            text(Line(event: "heard", device: heard.sender, medium: heard.medium, payload: Hex.encode(heard.payload),
                      txPower: heard.txPower, rssi: heard.rssi))
        }
    }

    public static func decodeMessage(_ text: String) throws(AirProtocolError) -> AirMessage {
        let line = try parse(text)
        if line.event == "heard" {
            guard let payload = Hex.decode(try required(line.payload, "payload")) else {
                throw AirProtocolError("'payload' must be hex")
            }
            return .heard(Heard(medium: try required(line.medium, "medium"), payload: payload,
                                rssi: try required(line.rssi, "rssi"), txPower: try required(line.txPower, "txPower"),
                                sender: try required(line.device, "device")))
        }
        guard let id = line.id else { throw AirProtocolError("line is neither a reply nor an event") }
        if let error = line.error { return .failed(id: id, message: error) }
        if let devices = line.devices { return .devices(id: id, devices) }
        return .ok(id: id)
    }

    private static func text(_ line: Line) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // A Line holds strings, numbers and booleans only: encoding cannot fail.
        return (try? encoder.encode(line)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    private static func parse(_ text: String) throws(AirProtocolError) -> Line {
        do {
            return try JSONDecoder().decode(Line.self, from: Data(text.utf8))
        } catch DecodingError.typeMismatch(_, let context) where !context.codingPath.isEmpty {
            throw AirProtocolError("'\(context.codingPath[0].stringValue)' has the wrong type")
        } catch DecodingError.dataCorrupted(let context) where !context.codingPath.isEmpty {
            throw AirProtocolError("'\(context.codingPath[0].stringValue)' has an invalid value")
        } catch DecodingError.valueNotFound(_, let context) where !context.codingPath.isEmpty {
            throw AirProtocolError("'\(context.codingPath[0].stringValue)' is incomplete")
        } catch {
            throw AirProtocolError("a line must be one JSON object")
        }
    }

    private static func required<T>(_ value: T?, _ key: String) throws(AirProtocolError) -> T {
        guard let value else { throw AirProtocolError("'\(key)' is missing or of the wrong type") }
        return value
    }
}
