import Logging
import NIOCore
import NIOPosix
import NearbyCore

/// nearby-air: serves an ``AirSpace`` on a Unix socket. Each connection may
/// attach one device; its broadcasts are repeated every interval to every
/// listening device in range, and a new broadcast, a device starting to listen,
/// or a move is heard at once.
public actor AirServer {
    /// One connection: where its outgoing lines go and the device it attached.
    private final class Session: Sendable {
        let output: AsyncStream<String>.Continuation
        let number: Int

        init(output: AsyncStream<String>.Continuation, number: Int) {
            self.output = output
            self.number = number
        }
    }

    private var space: AirSpace
    private var devices: [String: Session] = [:]
    private var attached: [Int: String] = [:]
    private var nextSession = 1
    private let logger: Logger

    public init(parameters: AirParameters, logger: Logger) {
        space = AirSpace(parameters: parameters)
        self.logger = logger
    }

    /// Serves `socketPath` until the task is cancelled. `onListening` runs once
    /// the socket accepts connections.
    public func run(socketPath: String, onListening: @Sendable () -> Void) async throws {
        let listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(unixDomainSocketPath: socketPath, cleanupExistingSocketFile: true) { channel in
                LineFraming.wrap(channel)
            }
        onListening()
        let interval = space.parameters.interval
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask {
                while !Task.isCancelled {
                    try await Task.sleep(for: .seconds(interval))
                    await self.tick()
                }
            }
            try await listener.executeThenClose { connections in
                for try await connection in connections {
                    group.addTask { await self.serve(connection) }
                }
            }
        }
    }

    private func serve(_ connection: LineChannel) async {
        let (lines, output) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(4096))
        let session = Session(output: output, number: nextSession)
        nextSession += 1
        do {
            try await connection.executeThenClose { inbound, outbound in
                try await withThrowingTaskGroup { group in
                    group.addTask {
                        for await line in lines { try await outbound.write(ByteBuffer(string: line + "\n")) }
                    }
                    for try await frame in inbound {
                        output.yield(self.handle(String(buffer: frame), from: session))
                    }
                    output.finish()
                    try await group.waitForAll()
                }
            }
        } catch {
            logger.debug("connection ended: \(error)")
        }
        output.finish()
        disconnected(session)
    }

    private func handle(_ line: String, from session: Session) -> String {
        let id: Int
        let request: AirRequest
        do {
            (id, request) = try AirCoding.decodeRequest(line)
        } catch {
            return AirCoding.encode(.failed(id: error.requestID ?? -1, message: error.message))
        }
        do {
            return AirCoding.encode(try perform(request, id: id, for: session))
        } catch {
            return AirCoding.encode(.failed(id: id, message: error.message))
        }
    }

    private func perform(_ request: AirRequest, id: Int, for session: Session) throws(AirProtocolError) -> AirMessage {
        switch request {
        case .attach(let device, let position):
            guard attached[session.number] == nil else { throw AirProtocolError("this connection already attached a device") }
            try space.attach(device, at: position)
            attached[session.number] = device
            devices[device] = session
            logger.info("device attached", metadata: ["device": "\(device)", "position": "\(position)"])
        case .advertise(let advert, let medium, let payload, let txPower):
            deliver(try space.advertise(try device(of: session), id: advert, medium: medium, payload: payload, txPower: txPower))
        case .stopAdvertising(let advert):
            try space.stopAdvertising(try device(of: session), id: advert)
        case .scan(let medium, let enabled):
            deliver(try space.scan(try device(of: session), medium: medium, enabled: enabled))
        case .move(let device, let position):
            deliver(try space.move(device, to: position))
            logger.info("device moved", metadata: ["device": "\(device)", "position": "\(position)"])
        case .list:
            return .devices(id: id, space.describe())
        }
        return .ok(id: id)
    }

    private func device(of session: Session) throws(AirProtocolError) -> String {
        guard let device = attached[session.number] else { throw AirProtocolError("attach a device first") }
        return device
    }

    private func tick() {
        deliver(space.tick())
    }

    private func deliver(_ deliveries: [AirSpace.Delivery]) {
        for delivery in deliveries {
            devices[delivery.recipient]?.output.yield(AirCoding.encode(.heard(delivery.heard)))
        }
    }

    private func disconnected(_ session: Session) {
        guard let device = attached.removeValue(forKey: session.number) else { return }
        devices.removeValue(forKey: device)
        space.detach(device)
        logger.info("device detached", metadata: ["device": "\(device)"])
    }
}
