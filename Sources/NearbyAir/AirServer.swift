import Logging
import NIOCore
import NIOPosix
import NearbyCore

/// nearby-air: serves an ``AirSpace`` on a Unix socket. Each connection may
/// attach one device; its broadcasts are repeated every interval to every
/// listening device in range, and a new broadcast, a device starting to listen,
/// or a move is heard at once.
///
/// A connection whose first line is `{"id":N,"op":"audio","device":"NAME"}`
/// becomes the audio link of a device attached by another connection (one link
/// per device): after the `ok` reply it carries binary sample frames both ways
/// (``AirAudio``). While any audio link is open a clock ticks every 20 ms
/// (block n due n·20 ms after the first link opened; a late tick produces
/// every block it missed, up to 1 s, and skips older ones with a warning), and
/// each tick sends every linked device the block its microphone heard
/// (``AirSpace/audioTick()``). A protocol violation on an audio link (a bad
/// frame length, a non-finite sample, a full speaker queue) closes that link
/// alone, with a warning in the log; a device that detaches loses its link. A
/// device that does not read its blocks loses the oldest beyond 1 s.
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

    /// A device's audio link.
    private struct AudioLink {
        /// The number of its connection.
        let number: Int
        /// The microphone's blocks, as frames, waiting to be written.
        let blocks: AsyncStream<ByteBuffer>.Continuation
        let channel: any Channel
        /// Blocks produced for the device since the link opened.
        var produced = 0
        /// Blocks dropped because the device did not read them in time.
        var dropped = 0
    }

    private var space: AirSpace
    private var devices: [String: Session] = [:]
    private var attached: [Int: String] = [:]
    private var audioLinks: [String: AudioLink] = [:]
    /// Wakes the audio clock when the first link opens.
    private var audioClockWake: AsyncStream<Void>.Continuation?
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
                AirFraming.wrap(channel, samplesFollowFirstLine: AirFraming.opensAudioLink)
            }
        let (wakeups, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        audioClockWake = wake
        defer { wake.finish() }
        onListening()
        let interval = space.parameters.interval
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask {
                while !Task.isCancelled {
                    try await Task.sleep(for: .seconds(interval))
                    await self.tick()
                }
            }
            group.addTask { try await self.runAudioClock(wakeups) }
            try await listener.executeThenClose { connections in
                for try await connection in connections {
                    group.addTask { await self.serve(connection) }
                }
            }
        }
    }

    private func serve(_ connection: AirChannel) async {
        let number = nextSession
        nextSession += 1
        do {
            try await connection.executeThenClose { inbound, outbound in
                var frames = inbound.makeAsyncIterator()
                guard let first = try await frames.next(isolation: self) else { return }
                if case .samplesFollow(let line) = first {
                    try await self.serveAudio(line, frames: &frames, outbound: outbound,
                                              channel: connection.channel, number: number)
                } else {
                    try await self.serveLines(first, frames: &frames, outbound: outbound, number: number)
                }
            }
        } catch {
            logger.debug("connection ended: \(error)")
        }
    }

    /// A control connection: requests and their replies, and what its device hears.
    private func serveLines(_ first: AirFrame, frames: inout NIOAsyncChannelInboundStream<AirFrame>.AsyncIterator,
                            outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>, number: Int) async throws {
        let (lines, output) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(4096))
        let session = Session(output: output, number: number)
        defer {
            output.finish()
            disconnected(session)
        }
        try await withThrowingTaskGroup { group in
            group.addTask {
                for await line in lines { try await outbound.write(ByteBuffer(string: line + "\n")) }
            }
            var frame: AirFrame? = first
            while let current = frame {
                // Only a first line can switch a connection to frames: later ones are lines.
                if case .line(let line) = current { output.yield(self.handle(String(buffer: line), from: session)) }
                frame = try await frames.next(isolation: self)
            }
            output.finish()
            try await group.waitForAll()
        }
    }

    /// An audio link: the opening line, then speaker frames in and microphone blocks out.
    private func serveAudio(_ line: ByteBuffer, frames: inout NIOAsyncChannelInboundStream<AirFrame>.AsyncIterator,
                            outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>, channel: any Channel,
                            number: Int) async throws {
        // The decoder switched to frames because this line is an audio request.
        guard case let (id, .audio(device))? = try? AirCoding.decodeRequest(String(buffer: line)) else { return }
        let blocks: AsyncStream<ByteBuffer>
        do {
            blocks = try openAudioLink(device, number: number, channel: channel)
        } catch {
            logger.info("audio link refused: \(error.message)", metadata: ["device": "\(device)"])
            try await outbound.write(ByteBuffer(string: AirCoding.encode(.failed(id: id, message: error.message)) + "\n"))
            return
        }
        defer { closeAudioLink(device, number: number) }
        try await outbound.write(ByteBuffer(string: AirCoding.encode(.ok(id: id)) + "\n"))
        try await withThrowingTaskGroup { group in
            group.addTask {
                for await block in blocks { try await outbound.write(block) }
            }
            do {
                while let frame = try await frames.next(isolation: self) {
                    // Frames still buffered when the link was closed (the device detached) are not played.
                    guard audioLinks[device]?.number == number else { break }
                    if case .samples(let payload) = frame { try space.play(device, AirAudio.samples(in: payload)) }
                }
                logger.info("audio link closed", metadata: ["device": "\(device)"])
            } catch let error as AirProtocolError {
                logger.warning("audio link closed: \(error.message)", metadata: ["device": "\(device)"])
            }
            group.cancelAll()
        }
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
        case .placeBeacon(let name, let position, let payload, let txPower):
            deliver(try space.placeBeacon(name, at: position, payload: payload, txPower: txPower))
            logger.info("beacon placed", metadata: ["beacon": "\(name)", "position": "\(position)",
                                                    "payload": "\(Hex.encode(payload))", "txPower": "\(txPower)"])
        case .removeBeacon(let name):
            try space.removeBeacon(name)
            logger.info("beacon removed", metadata: ["beacon": "\(name)"])
        case .list:
            return .devices(id: id, space.describe())
        case .audio:
            throw AirProtocolError("an audio link must be opened by the first line of its own connection")
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
        if let link = audioLinks.removeValue(forKey: device) {
            link.blocks.finish()
            link.channel.close(promise: nil)
            logger.info("audio link closed: the device detached", metadata: ["device": "\(device)"])
        }
        space.detach(device)
        logger.info("device detached", metadata: ["device": "\(device)"])
    }

    // MARK: The acoustic space

    private func openAudioLink(_ device: String, number: Int,
                               channel: any Channel) throws(AirProtocolError) -> AsyncStream<ByteBuffer> {
        guard audioLinks[device] == nil else { throw AirProtocolError("device '\(device)' already has an audio link") }
        try space.openAudio(device)
        let (blocks, sink) = AsyncStream.makeStream(of: ByteBuffer.self,
                                                    bufferingPolicy: .bufferingNewest(AirAudio.pendingBlocks))
        audioLinks[device] = AudioLink(number: number, blocks: sink, channel: channel)
        audioClockWake?.yield()
        logger.info("audio link opened", metadata: ["device": "\(device)"])
        return blocks
    }

    /// Forgets the link of connection `number`, unless it went already.
    private func closeAudioLink(_ device: String, number: Int) {
        guard audioLinks[device]?.number == number else { return }
        audioLinks.removeValue(forKey: device)?.blocks.finish()
        space.closeAudio(device)
    }

    /// Ticks while any audio link is open: each tick is due 20 ms after the
    /// previous one was due, however late it ran, so the blocks keep the pace
    /// of the wall clock.
    private nonisolated func runAudioClock(_ wakeups: AsyncStream<Void>) async throws {
        let time = ContinuousClock()
        for await _ in wakeups {
            let start = time.now
            var clock = AudioTickClock()
            repeat {
                try await time.sleep(until: start + clock.nextDeadline, tolerance: nil)
                let due = clock.advance(elapsed: time.now - start)
                if due.skipped > 0 {
                    logger.warning("the audio clock fell behind: \(due.skipped) blocks skipped",
                                   metadata: ["skipped": "\(due.skipped)"])
                }
                guard await audioTick(blocks: due.produce) else { break }
            } while true
        }
    }

    /// How many microphone blocks `device`'s open link has been given, and how
    /// many of them it dropped (tests).
    func blockCounts(of device: String) -> (produced: Int, dropped: Int)? {
        audioLinks[device].map { ($0.produced, $0.dropped) }
    }

    /// Produces `blocks` blocks; returns whether any audio link remains.
    private func audioTick(blocks: Int) -> Bool {
        for _ in 0..<blocks {
            for (device, block) in space.audioTick() {
                guard audioLinks[device] != nil else { continue }
                audioLinks[device]!.produced += 1
                if case .dropped = audioLinks[device]!.blocks.yield(AirAudio.frame(block)) {
                    audioLinks[device]!.dropped += 1
                    let dropped = audioLinks[device]!.dropped
                    if dropped == 1 || dropped % AirAudio.pendingBlocks == 0 {
                        logger.debug("microphone blocks dropped: the device does not keep up",
                                     metadata: ["device": "\(device)", "dropped": "\(dropped)"])
                    }
                }
            }
        }
        return !audioLinks.isEmpty
    }
}
