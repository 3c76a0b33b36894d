import NIOCore
import NIOPosix

/// A device's speaker and microphone in nearby-air's acoustic space.
///
/// Sound is 48 000 Hz mono Float32, full scale ±1 (``AirAudio``). What the
/// device plays is heard by every device with an audio link, itself included,
/// from the air's next tick on; what its microphone hears arrives in
/// ``captured``, one block of 960 samples (20 ms) per tick of the air's clock.
public final class AirAudioLink: Sendable {
    public static let sampleRate = AirAudio.sampleRate

    /// What the device's microphone hears, block by block (960 samples each), as
    /// the air's clock ticks; ends when the link closes. Holds at most 1 s of
    /// blocks that were not read: older ones are dropped.
    public let captured: AsyncStream<[Float]>
    private let outgoing: AsyncStream<Outgoing>.Continuation
    private let connection: Task<Void, Never>

    /// A frame to write, and who waits for it to be written.
    private struct Outgoing: Sendable {
        let frame: ByteBuffer
        let written: CheckedContinuation<Void, any Error>
    }

    /// Opens the audio link of `device`, which must be attached (by an
    /// ``AirClient``) already. Throws the air's refusal: no such device, or a
    /// link for it already open.
    public init(socketPath: String, device: String) async throws {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(unixDomainSocketPath: socketPath) { channel in
                // The air's reply is the only line: blocks follow it.
                AirFraming.wrap(channel) { _ in true }
            }
        let (captured, capturedSink) = AsyncStream.makeStream(
            of: [Float].self, bufferingPolicy: .bufferingNewest(AirAudio.pendingBlocks))
        let (outgoingFrames, outgoing) = AsyncStream.makeStream(of: Outgoing.self)
        let (opened, openedSink) = AsyncStream.makeStream(
            of: Result<Void, AirProtocolError>.self, bufferingPolicy: .bufferingOldest(1))
        self.captured = captured
        self.outgoing = outgoing
        connection = Task {
            do {
                try await channel.executeThenClose { inbound, outbound in
                    try await outbound.write(ByteBuffer(string: AirCoding.encode(id: 1, .audio(device: device)) + "\n"))
                    var frames = inbound.makeAsyncIterator()
                    guard case .samplesFollow(let line)? = try await frames.next() else { return }
                    switch try? AirCoding.decodeMessage(String(buffer: line)) {
                    case .ok?:
                        openedSink.yield(.success(()))
                    case .failed(_, let message)?:
                        openedSink.yield(.failure(AirProtocolError(message)))
                        return
                    default:
                        openedSink.yield(.failure(AirProtocolError("the air answered the audio request with '\(String(buffer: line))'")))
                        return
                    }
                    try await withThrowingTaskGroup { group in
                        group.addTask {
                            for await request in outgoingFrames {
                                do {
                                    try await outbound.write(request.frame)
                                    request.written.resume()
                                } catch {
                                    request.written.resume(throwing: AirProtocolError("the audio link is closed"))
                                    throw error
                                }
                            }
                        }
                        while let frame = try await frames.next() {
                            if case .samples(let payload) = frame { capturedSink.yield(AirAudio.samples(in: payload)) }
                        }
                        group.cancelAll()
                    }
                }
            } catch {
                // The link is closed either way; play() reports it.
            }
            openedSink.yield(.failure(AirProtocolError("the air closed the connection")))
            openedSink.finish()
            capturedSink.finish()
            outgoing.finish()
            for await request in outgoingFrames {
                request.written.resume(throwing: AirProtocolError("the audio link is closed"))
            }
        }
        var results = opened.makeAsyncIterator()
        switch await results.next() {
        case .success?:
            return
        case .failure(let error)?:
            close()
            throw error
        case nil:
            // Only a cancelled wait ends without a result.
            close()
            throw CancellationError()
        }
    }

    deinit {
        close()
    }

    /// Queues samples for the device's speaker: they are played after what was
    /// queued before, from the air's next tick on, clamped to ±1. Returns once
    /// they are written to the air. Throws when a sample is not finite (nothing
    /// is sent) or when the link is closed. The air holds at most 10 s of
    /// samples not played yet (``AirAudio/speakerQueueSamples``) and closes the
    /// link when a device plays more: pace what you play.
    public func play(_ samples: [Float]) async throws {
        guard samples.allSatisfy({ $0.isFinite }) else { throw AirProtocolError("speaker samples must be finite") }
        var start = 0
        while start < samples.count {
            let end = min(start + AirAudio.maximumFrameSamples, samples.count)
            try await send(frame: AirAudio.frame(samples[start..<end]))
            start = end
        }
    }

    /// Writes one frame as it is (tests use it to break the protocol).
    func send(frame: ByteBuffer) async throws {
        try await withCheckedThrowingContinuation { (written: CheckedContinuation<Void, any Error>) in
            if case .terminated = outgoing.yield(Outgoing(frame: frame, written: written)) {
                written.resume(throwing: AirProtocolError("the audio link is closed"))
            }
        }
    }

    /// Closes the link; ``captured`` ends. The device stays attached.
    public func close() {
        outgoing.finish()
        connection.cancel()
    }
}
