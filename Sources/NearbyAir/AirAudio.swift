#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NearbyCore

/// The acoustic space's fixed format and limits.
///
/// Sound in nearby-air is 48 000 Hz mono Float32, full scale ±1. The air's
/// clock produces one block of 960 samples (20 ms) per tick for every device
/// with an audio link. An audio link is a connection whose first line is
/// `{"id":N,"op":"audio","device":"NAME"}`; once the air answers
/// `{"id":N,"ok":true}` the connection carries binary frames only, both ways:
/// a little-endian `UInt32` sample count n (1…48 000) followed by n
/// little-endian Float32 samples. The device's frames are its speaker's
/// samples, the air's are its microphone's blocks.
public enum AirAudio {
    /// Samples per second.
    public static let sampleRate = 48_000
    /// Samples per tick of the air's clock (20 ms).
    public static let blockSamples = 960
    /// The air's clock period.
    public static let blockDuration: Duration = .milliseconds(20)
    /// The largest frame either side may send (1 s).
    public static let maximumFrameSamples = 48_000
    /// A speaker's queue holds at most this much (10 s); more is a protocol error.
    public static let speakerQueueSamples = 10 * sampleRate
    /// Microphone blocks waiting for a slow device beyond this (1 s) are dropped, oldest first.
    public static let pendingBlocks = 50

    /// One frame carrying `samples`, which must number 1…``maximumFrameSamples``.
    static func frame(_ samples: ArraySlice<Float>) -> ByteBuffer {
        var buffer = ByteBufferAllocator().buffer(capacity: 4 + 4 * samples.count)
        buffer.writeInteger(UInt32(samples.count), endianness: .little)
        #if _endian(little)
        // Float32 in memory is the wire's format already: one copy.
        _ = samples.withUnsafeBytes { buffer.writeBytes($0) }
        #else
        for sample in samples { buffer.writeInteger(sample.bitPattern, endianness: .little) }
        #endif
        return buffer
    }

    static func frame(_ samples: [Float]) -> ByteBuffer {
        frame(samples[...])
    }

    /// The samples of a frame's payload (the bytes after the count).
    static func samples(in payload: ByteBuffer) -> [Float] {
        payload.withUnsafeReadableBytes { raw in
            let count = raw.count / 4
            return [Float](unsafeUninitializedCapacity: count) { samples, initialized in
                #if _endian(little)
                UnsafeMutableRawBufferPointer(samples).copyMemory(from: UnsafeRawBufferPointer(rebasing: raw[..<(4 * count)]))
                #else
                for index in 0..<count {
                    samples[index] = Float(bitPattern: UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: 4 * index, as: UInt32.self)))
                }
                #endif
                initialized = count
            }
        }
    }
}

/// What a connection to the air carries: protocol lines and, on an audio link, sample frames.
enum AirFrame: Sendable {
    /// A protocol line, without its line ending.
    case line(ByteBuffer)
    /// The line after which the connection carries sample frames only.
    case samplesFollow(ByteBuffer)
    /// A sample frame's payload: its samples as little-endian Float32, the count already checked.
    case samples(ByteBuffer)
}

/// Splits a connection into lines and, once its first line opens an audio
/// link, into sample frames. The switch is decided here, from the bytes
/// themselves, so no frame is ever mistaken for a line however early the
/// other side sends it.
struct AirFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = AirFrame

    /// Lines longer than this close the connection: the protocol's lines are small.
    static let maximumLineBytes = 64 * 1024

    /// Whether sample frames follow this first line.
    private let samplesFollow: @Sendable (ByteBuffer) -> Bool
    private var firstLine = true
    private var carriesSamples = false
    /// How many of the buffer's bytes are known to hold no newline: a line
    /// that arrives in pieces is searched once, not once per piece.
    private var scanned = 0

    init(samplesFollowFirstLine samplesFollow: @escaping @Sendable (ByteBuffer) -> Bool) {
        self.samplesFollow = samplesFollow
    }

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let frame = try next(from: &buffer) else { return .needMoreData }
        context.fireChannelRead(wrapInboundOut(frame))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        while let frame = try next(from: &buffer) {
            context.fireChannelRead(wrapInboundOut(frame))
        }
        // An unfinished line or frame at the end is dropped with the connection.
        buffer.moveReaderIndex(to: buffer.writerIndex)
        return .needMoreData
    }

    /// The next whole line or frame in `buffer`, consumed; nil when more bytes are needed.
    mutating func next(from buffer: inout ByteBuffer) throws(AirProtocolError) -> AirFrame? {
        if carriesSamples {
            guard let count = buffer.getInteger(at: buffer.readerIndex, endianness: .little, as: UInt32.self) else {
                return nil
            }
            guard count >= 1, count <= AirAudio.maximumFrameSamples else {
                throw AirProtocolError("a frame of \(count) samples: frames carry 1...\(AirAudio.maximumFrameSamples)")
            }
            guard buffer.readableBytes >= 4 + 4 * Int(count) else { return nil }
            buffer.moveReaderIndex(forwardBy: 4)
            return .samples(buffer.readSlice(length: 4 * Int(count))!)
        }
        let view = buffer.readableBytesView
        guard let newline = view.dropFirst(scanned).firstIndex(of: UInt8(ascii: "\n")) else {
            guard buffer.readableBytes <= Self.maximumLineBytes else {
                throw AirProtocolError("a line longer than \(Self.maximumLineBytes) bytes")
            }
            scanned = buffer.readableBytes
            return nil
        }
        scanned = 0
        // Bounded here too: a long line whose newline came in the same read is no shorter.
        guard newline - view.startIndex <= Self.maximumLineBytes else {
            throw AirProtocolError("a line longer than \(Self.maximumLineBytes) bytes")
        }
        var line = buffer.readSlice(length: newline - view.startIndex)!
        buffer.moveReaderIndex(forwardBy: 1)
        if line.readableBytesView.last == UInt8(ascii: "\r") { line.moveWriterIndex(to: line.writerIndex - 1) }
        guard firstLine else { return .line(line) }
        firstLine = false
        guard samplesFollow(line) else { return .line(line) }
        carriesSamples = true
        return .samplesFollow(line)
    }
}

/// A connection of the air, framed by ``AirFrameDecoder``.
typealias AirChannel = NIOAsyncChannel<AirFrame, ByteBuffer>

enum AirFraming {
    /// Whether a connection's first line makes it an audio link: an `audio` request.
    @Sendable static func opensAudioLink(_ line: ByteBuffer) -> Bool {
        if case .audio? = try? AirCoding.decodeRequest(String(buffer: line)).request { true } else { false }
    }

    /// Sets up line-then-frame decoding on a fresh channel and wraps it for async use.
    static func wrap(_ channel: any Channel,
                     samplesFollowFirstLine: @escaping @Sendable (ByteBuffer) -> Bool) -> EventLoopFuture<AirChannel> {
        channel.eventLoop.makeCompletedFuture {
            // The decoder bounds what it holds itself: one line, or one frame.
            try channel.pipeline.syncOperations.addHandler(
                ByteToMessageHandler(AirFrameDecoder(samplesFollowFirstLine: samplesFollowFirstLine)))
            return try AirChannel(wrappingChannelSynchronously: channel)
        }
    }
}

/// When the air's blocks are due. Block n is due n·20 ms after the clock
/// started, whenever the clock is looked at, so lateness never accumulates: a
/// clock that wakes late produces every block it missed at once. More than
/// ``maximumCatchUp`` missed blocks (1 s) are not made up: the oldest are
/// skipped and the clock goes on from the present.
struct AudioTickClock: Sendable {
    static let maximumCatchUp = 50
    private static let periodNanoseconds: Int64 = 20_000_000

    /// The index of the next block to produce.
    private(set) var nextBlock: Int64 = 0

    /// When the next block is due, from the clock's start.
    var nextDeadline: Duration { .nanoseconds(nextBlock * Self.periodNanoseconds) }

    /// The blocks due `elapsed` after the start that were not produced yet:
    /// how many to produce now, and how many to skip because they are too old.
    mutating func advance(elapsed: Duration) -> (produce: Int, skipped: Int) {
        let (seconds, attoseconds) = elapsed.components
        let nanoseconds = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        guard nanoseconds >= 0 else { return (0, 0) }
        let due = nanoseconds / Self.periodNanoseconds + 1
        let behind = Int(due - nextBlock)
        guard behind > 0 else { return (0, 0) }
        nextBlock = due
        return behind > Self.maximumCatchUp ? (Self.maximumCatchUp, behind - Self.maximumCatchUp) : (behind, 0)
    }
}

/// White Gaussian noise of a given RMS, from a seeded generator.
struct GaussianNoise: Sendable {
    private var random: SplitMix64
    private let rms: Double

    /// A stream for `listener`: every listener's stream is independent, and the
    /// same for the same seed.
    init(seed: UInt64, listener: String, rms: Double) {
        // FNV-1a of the name, so a listener's stream does not depend on who else is there.
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in listener.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        var mixer = SplitMix64(seed: seed ^ hash)
        random = SplitMix64(seed: mixer.next())
        self.rms = rms
    }

    /// `count` samples (both outputs of each Box–Muller pair used).
    mutating func samples(_ count: Int) -> [Float] {
        var result = [Float](repeating: 0, count: count)
        var index = 0
        while index < count {
            let (first, second) = random.nextGaussianPair()
            result[index] = Float(rms * first)
            if index + 1 < count { result[index + 1] = Float(rms * second) }
            index += 2
        }
        return result
    }
}

/// A speaker's queue of samples not played yet, bounded.
struct SampleQueue: Sendable {
    let capacity: Int
    private var samples: [Float] = []
    private var start = 0

    init(capacity: Int) {
        self.capacity = capacity
    }

    var count: Int { samples.count - start }

    /// Appends `new` clamped to ±1, or nothing when it would not fit.
    mutating func append(_ new: [Float]) -> Bool {
        guard new.count <= capacity - count else { return false }
        if start > 0, start >= samples.count / 2 {
            samples.removeFirst(start)
            start = 0
        }
        let end = samples.count
        samples.append(contentsOf: new)
        for index in end..<samples.count where !(-1...1).contains(samples[index]) {
            samples[index] = min(max(samples[index], -1), 1)
        }
        return true
    }

    /// The next `length` samples, silence where the queue runs out.
    mutating func take(_ length: Int) -> [Float] {
        let available = min(length, count)
        var block = Array(samples[start..<start + available])
        start += available
        if start == samples.count {
            samples.removeAll(keepingCapacity: true)
            start = 0
        }
        if available < length { block.append(contentsOf: repeatElement(0, count: length - available)) }
        return block
    }

    mutating func removeAll() {
        samples = []
        start = 0
    }
}
