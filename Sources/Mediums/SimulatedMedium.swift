import Foundation
import Logging
import NearbyAir
import NearbyCore

/// A medium whose antenna is nearby-air: the daemon attaches to the shared
/// space as a device and broadcasts and hears there. Reconnects by itself when
/// the air goes away and restores what it was doing.
public actor SimulatedMedium: MediumBackend {
    /// How a daemon appears in the air.
    public struct Settings: Sendable {
        public var socketPath: String
        public var device: String
        public var position: Position
        /// Declared signal strength at one metre, dBm.
        public var txPower: Int

        public init(socketPath: String, device: String, position: Position, txPower: Int = -59) {
            self.socketPath = socketPath
            self.device = device
            self.position = position
            self.txPower = txPower
        }
    }

    public nonisolated let medium: Medium
    public nonisolated let sightings: AsyncStream<Sighting>
    public nonisolated let availabilityChanges: AsyncStream<Bool>
    private let sightingSink: AsyncStream<Sighting>.Continuation
    private let availabilitySink: AsyncStream<Bool>.Continuation
    private let settings: Settings
    private let logger: Logger
    private var client: AirClient?
    private var broadcasting: Set<Token> = []
    private var scanning = false

    public init(medium: Medium, settings: Settings, logger: Logger) {
        self.medium = medium
        self.settings = settings
        self.logger = logger
        (sightings, sightingSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1024))
        (availabilityChanges, availabilitySink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(16))
    }

    public var isAvailable: Bool { client != nil }

    public func broadcast(_ tokens: Set<Token>) async {
        let previous = broadcasting
        broadcasting = tokens
        guard let client else { return }
        for token in previous.subtracting(tokens) {
            await send(.stopAdvertising(id: token.hex), on: client)
        }
        for token in tokens.subtracting(previous) {
            await send(.advertise(id: token.hex, medium: medium, payload: token.bytes, txPower: settings.txPower), on: client)
        }
    }

    public func scan(_ enabled: Bool) async {
        guard enabled != scanning else { return }
        scanning = enabled
        if let client { await send(.scan(medium: medium, enabled: enabled), on: client) }
    }

    public func run() async {
        var delay = Duration.milliseconds(100)
        while !Task.isCancelled {
            do {
                let client = try await connect()
                delay = .milliseconds(100)
                for await heard in client.heard {
                    if let sighting = sighting(from: heard) { sightingSink.yield(sighting) }
                }
                logger.warning("lost the connection to nearby-air; reconnecting", metadata: ["medium": "\(medium)"])
            } catch {
                logger.debug("cannot reach nearby-air: \(error)", metadata: ["medium": "\(medium)"])
            }
            disconnected()
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, .seconds(5))
        }
        client?.close()
    }

    /// Attaches and restores the broadcasts and scanning the daemon asked for.
    private func connect() async throws -> AirClient {
        let client = try await AirClient(socketPath: settings.socketPath)
        do {
            try await client.request(.attach(device: settings.device, position: settings.position))
            if scanning { try await client.request(.scan(medium: medium, enabled: true)) }
            for token in broadcasting {
                try await client.request(.advertise(id: token.hex, medium: medium, payload: token.bytes,
                                                    txPower: settings.txPower))
            }
        } catch {
            client.close()
            throw error
        }
        self.client = client
        availabilitySink.yield(true)
        logger.info("attached to nearby-air", metadata: ["device": "\(settings.device)", "medium": "\(medium)"])
        return client
    }

    private func disconnected() {
        guard let client else { return }
        client.close()
        self.client = nil
        availabilitySink.yield(false)
    }

    private func send(_ request: AirRequest, on client: AirClient) async {
        do {
            try await client.request(request)
        } catch {
            // The connection is going down; run() reconnects and restores the state.
            logger.debug("air request failed: \(error)")
        }
    }

    private nonisolated func sighting(from heard: Heard) -> Sighting? {
        guard heard.medium == medium, let token = Token(bytes: heard.payload) else { return nil }
        return Sighting(token: token, medium: medium, rssi: heard.rssi, txPower: heard.txPower,
                        distanceMeters: PathLoss.distance(rssi: heard.rssi, txPower: heard.txPower),
                        seenAtMilliseconds: UInt64(Date().timeIntervalSince1970 * 1000))
    }
}
