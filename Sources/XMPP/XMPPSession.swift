import NIOCore
import Synchronization

/// Why ``XMPPSession/send(_:)`` failed.
public enum XMPPSessionError: Error, Sendable {
    /// The stream has ended or is ending: nothing more can be sent on it.
    case streamClosed
}

/// One authenticated, bound XMPP stream, as the service sees it.
public final class XMPPSession: Sendable {
    /// The SASL authentication identity as a bare JID (e.g. `myproject@gcm.nearbyd.test`).
    public let username: String
    /// The full JID bound to the stream (`username/resource`).
    public let jid: String
    /// The stream's id (from the server's stream header), for logs.
    public let streamID: String
    /// Incoming `<message>` stanzas, in order. Finishes when the stream ends
    /// (peer closed, stream error, ``close(_:)``) or when the iterating task is
    /// cancelled. The connection stops reading while too many wait here, so a
    /// slow consumer slows the peer down instead of filling memory.
    /// Iterate it from one task only.
    public let stanzas: AsyncStream<XMLElement>

    private let queue: StanzaQueue
    /// The connection's handler, on its event loop.
    let handler: NIOLoopBound<XMPPStreamHandler>

    init(username: String, jid: String, streamID: String, handler: NIOLoopBound<XMPPStreamHandler>) {
        self.username = username
        self.jid = jid
        self.streamID = streamID
        self.handler = handler
        let queue = StanzaQueue()
        self.queue = queue
        stanzas = AsyncStream(unfolding: {
            guard let stanza = await queue.next() else { return nil }
            handler.eventLoop.execute { handler.value.stanzaTaken() }
            return stanza
        })
    }

    /// Writes one stanza (serialized in the stream's `jabber:client` namespace),
    /// returning once it is handed to the connection. Throws
    /// ``XMPPSessionError/streamClosed`` once the stream is ending.
    public func send(_ stanza: XMLElement) async throws {
        try await send(contentsOf: [stanza])
    }

    /// Writes `stanzas` in order as one write and one flush (one TLS record
    /// where they fit), returning once they are handed to the connection.
    /// Throws ``XMPPSessionError/streamClosed`` once the stream is ending.
    public func send(contentsOf stanzas: [XMLElement]) async throws {
        let xml = stanzas.map { $0.xml(inheriting: Namespace.client) }.joined()
        try await handler.eventLoop.flatSubmit { [handler] in handler.value.send(xml) }.get()
    }

    /// Ends the stream: with the stream error `error`, or gracefully (`</stream:stream>`)
    /// if `nil`. Returns when the connection is closed (the peer has a few seconds
    /// to close its side). Does nothing more if the stream is already ending.
    public func close(_ error: StreamError?) async {
        await close(error, text: nil)
    }

    /// Ends the stream with the stream error `error` and a human-readable `text`.
    public func close(_ error: StreamError?, text: String?) async {
        try? await handler.eventLoop.flatSubmit { [handler] in handler.value.closeStream(error, text: text) }.get()
    }

    // Called by the connection, on its event loop.

    /// Queues a received stanza.
    func deliver(_ stanza: XMLElement) { queue.push(stanza) }

    /// Ends ``stanzas`` after what is already queued.
    func finish() { queue.finish() }
}

/// The stanzas between a connection and the service: pushed on the event loop,
/// taken by the service's task.
final class StanzaQueue: Sendable {
    private struct State {
        var stanzas: [XMLElement] = []
        var finished = false
        var waiter: CheckedContinuation<XMLElement?, Never>?
    }

    private let state = Mutex(State())

    func push(_ stanza: XMLElement) {
        let waiter: CheckedContinuation<XMLElement?, Never>? = state.withLock { state in
            guard !state.finished else { return nil }
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.stanzas.append(stanza)
            return nil
        }
        waiter?.resume(returning: stanza)
    }

    func finish() {
        let waiter = state.withLock { state in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// The next stanza, or `nil` once finished and drained or when the task is cancelled.
    func next() async -> XMLElement? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ready: XMLElement?? = state.withLock { state in
                    if !state.stanzas.isEmpty { return .some(state.stanzas.removeFirst()) }
                    if state.finished || Task.isCancelled { return .some(nil) }
                    state.waiter = continuation
                    return .none
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            let waiter = state.withLock { state in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume(returning: nil)
        }
    }
}
