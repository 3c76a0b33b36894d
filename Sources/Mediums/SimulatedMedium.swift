import Beacons
import Foundation
import Logging
import NearbyAir
import NearbyCore

/// A medium whose antenna is nearby-air: the daemon attaches to the shared
/// space as a device and broadcasts and hears there. Reconnects by itself when
/// the air goes away and restores what it was doing. On BLE it also hears the
/// air's simulated beacons, whose broadcasts are real advertising data.
public actor SimulatedMedium: BeaconScanner {
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
    public nonisolated var sightings: AsyncStream<Sighting> { reports.sightings }
    public nonisolated var conditionChanges: AsyncStream<MediumCondition> { reports.conditionChanges }
    public nonisolated var beaconSightings: AsyncStream<BeaconSighting> { beacons.sightings }
    private let reports = MediumReports()
    private let beacons = BeaconReports()
    private let settings: Settings
    private let logger: Logger
    private var client: AirClient?
    /// What the daemon asked for.
    private var broadcasting: Set<Token> = []
    private var scanning = false
    /// What the air has been told on the current connection.
    private var advertised: Set<Token> = []
    private var scanRequested = false
    private var reconciling = false
    private let clock: any WallClock

    /// `clock` times the sightings.
    public init(medium: Medium, settings: Settings, logger: Logger, clock: any WallClock = SystemWallClock()) {
        self.medium = medium
        self.settings = settings
        self.logger = logger
        self.clock = clock
    }

    public func broadcast(_ tokens: Set<Token>) async {
        broadcasting = tokens
        await reconcile()
    }

    /// The air has one way of listening: low-power is full.
    public func scan(_ mode: ScanMode) async {
        scanning = mode != .off
        await reconcile()
    }

    /// Tells the air, one request at a time, what differs from what the daemon
    /// asked for. A wish or a reconnection that comes while a request is on its
    /// way is picked up by the running loop rather than a second one, so the air
    /// ends where the daemon's latest wish is, on the latest connection.
    private func reconcile() async {
        guard !reconciling else { return }
        reconciling = true
        defer { reconciling = false }
        while let client {
            if scanRequested != scanning {
                scanRequested = scanning
                await send(.scan(medium: medium, enabled: scanning), on: client)
            } else if let token = advertised.subtracting(broadcasting).first {
                advertised.remove(token)
                await send(.stopAdvertising(id: token.hex), on: client)
            } else if let token = broadcasting.subtracting(advertised).first {
                advertised.insert(token)
                await send(.advertise(id: token.hex, medium: medium, payload: token.bytes, txPower: settings.txPower),
                           on: client)
            } else {
                return
            }
        }
    }

    public func run() async {
        var delay = Duration.milliseconds(100)
        // The first failure of an outage is a warning, naming the socket; the retries are debug.
        var told = false
        while !Task.isCancelled {
            do {
                let client = try await connect()
                delay = .milliseconds(100)
                told = false
                for await heard in client.heard where heard.medium == medium {
                    if let sighting = sighting(from: heard) {
                        reports.sightingSink.yield(sighting)
                    } else if medium == .ble, let frame = BeaconFrame.parse(advertisingData: heard.payload) {
                        beacons.sink.yield(BeaconSighting(frame: frame, sender: heard.sender, rssi: heard.rssi))
                    }
                }
                logger.warning("lost the connection to nearby-air; reconnecting", metadata: ["medium": "\(medium)"])
            } catch {
                if told {
                    logger.debug("\(error)", metadata: ["medium": "\(medium)"])
                } else {
                    logger.warning("\(error); trying again until it can", metadata: ["medium": "\(medium)"])
                    told = true
                }
            }
            disconnected()
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, .seconds(5))
        }
        client?.close()
    }

    /// Attaches, then restores the broadcasts and scanning the daemon asked for.
    private func connect() async throws -> AirClient {
        let client = try await AirClient(socketPath: settings.socketPath)
        do {
            try await client.request(.attach(device: settings.device, position: settings.position))
        } catch {
            client.close()
            throw error
        }
        self.client = client
        advertised = []
        scanRequested = false
        reports.conditionSink.yield(.ready)
        logger.info("attached to nearby-air", metadata: ["device": "\(settings.device)", "medium": "\(medium)"])
        await reconcile()
        return client
    }

    private func disconnected() {
        guard let client else { return }
        client.close()
        self.client = nil
        reports.conditionSink.yield(.unavailable)
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
        guard let token = Token(bytes: heard.payload) else { return nil }
        return Sighting(token: token, medium: medium, rssi: heard.rssi, txPower: heard.txPower,
                        seenAtMilliseconds: clock.nowMs)
    }
}
