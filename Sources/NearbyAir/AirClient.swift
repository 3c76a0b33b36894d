import NIOCore
import NIOPosix
import NearbyCore
import Synchronization

/// A connection to nearby-air: requests with their replies, and the broadcasts
/// this connection's device hears.
public final class AirClient: Sendable {
    /// What this connection's device hears; ends when the connection does.
    public let heard: AsyncStream<Heard>
    private let heardSink: AsyncStream<Heard>.Continuation
    private let outgoing: AsyncStream<String>.Continuation
    private let replies = Replies()
    private let connection: Task<Void, Never>

    /// Connects to the air at `socketPath`. A socket that cannot be reached
    /// is an ``AirProtocolError`` naming it and saying what to do.
    public init(socketPath: String) async throws {
        let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
        do {
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(unixDomainSocketPath: socketPath) { channel in LineFraming.wrap(channel) }
        } catch {
            throw AirProtocolError(AirSocket.unreachable(socketPath, error))
        }
        (heard, heardSink) = AsyncStream.makeStream(of: Heard.self, bufferingPolicy: .bufferingNewest(1024))
        let (lines, outgoing) = AsyncStream.makeStream(of: String.self)
        self.outgoing = outgoing
        let replies = self.replies
        let heardSink = self.heardSink
        connection = Task {
            try? await channel.executeThenClose { inbound, outbound in
                try await withThrowingTaskGroup { group in
                    group.addTask {
                        for await line in lines { try await outbound.write(ByteBuffer(string: line + "\n")) }
                    }
                    for try await frame in inbound {
                        switch try? AirCoding.decodeMessage(String(buffer: frame)) {
                        case .heard(let heard):
                            heardSink.yield(heard)
                        case let reply?:
                            replies.complete(reply)
                        case nil:
                            continue
                        }
                    }
                    group.cancelAll()
                }
            }
            heardSink.finish()
            replies.closeAll()
        }
    }

    deinit {
        close()
    }

    /// Sends a request and waits for its reply; throws the air's error message.
    /// ``AirRequest/audio(device:)`` is refused: ``AirAudioLink`` opens audio links.
    @discardableResult
    public func request(_ request: AirRequest) async throws -> AirMessage {
        if case .audio = request {
            // An audio link is a connection of its own, carrying frames this client does not read.
            throw AirProtocolError("open audio links with AirAudioLink")
        }
        let reply = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<AirMessage, any Error>) in
            guard let id = replies.register(continuation) else {
                continuation.resume(throwing: AirProtocolError("the connection to the air is closed"))
                return
            }
            outgoing.yield(AirCoding.encode(id: id, request))
        }
        if case .failed(_, let message) = reply { throw AirProtocolError(message) }
        return reply
    }

    /// Closes the connection; the air detaches this connection's device.
    public func close() {
        outgoing.finish()
        connection.cancel()
    }
}

/// Requests waiting for their replies, by id.
private final class Replies: Sendable {
    private struct State {
        var next = 1
        var waiting: [Int: CheckedContinuation<AirMessage, any Error>] = [:]
        var closed = false
    }

    private let state = Mutex(State())

    /// The id for a new request, or nil once the connection is closed.
    func register(_ continuation: CheckedContinuation<AirMessage, any Error>) -> Int? {
        state.withLock { state in
            guard !state.closed else { return nil }
            let id = state.next
            state.next += 1
            state.waiting[id] = continuation
            return id
        }
    }

    func complete(_ reply: AirMessage) {
        let id: Int
        switch reply {
        case .ok(let replyID), .failed(let replyID, _), .devices(let replyID, _): id = replyID
        case .heard: return
        }
        state.withLock { $0.waiting.removeValue(forKey: id) }?.resume(returning: reply)
    }

    func closeAll() {
        let orphans = state.withLock { state in
            state.closed = true
            defer { state.waiting.removeAll() }
            return Array(state.waiting.values)
        }
        for waiter in orphans { waiter.resume(throwing: AirProtocolError("the air closed the connection")) }
    }
}
