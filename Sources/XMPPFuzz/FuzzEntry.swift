// Coverage-guided fuzzing of a client's XMPP stream (Sources/XMPP): the XML
// stream parser, and the stream handler's negotiation (stream header, SASL,
// bind, stanzas, deadlines) fed the same bytes; plus a plain replay runner for
// builds without the fuzzer (README.md).

import Dispatch
import FuzzReplay
import Logging
import NIOCore
import NIOEmbedded
import NIOTLS
@_spi(Testing) import XMPP

/// An input is one byte that says how the rest is cut into reads, then what a
/// client sends once TLS is up. 0xFF: a read ends at each 0xFF byte (which
/// UTF-8 never has, so the stream loses nothing by it), as a client that waits
/// for each answer sends; 0: one read of it all; N: N bytes each.
enum FuzzProperty {
    static let separator: UInt8 = 0xFF

    static func check(_ input: [UInt8]) {
        guard let first = input.first else { return }
        let rest = input.dropFirst()
        let reads: [[UInt8]]
        if first == separator {
            reads = rest.split(separator: separator, omittingEmptySubsequences: true).map(Array.init)
        } else {
            let size = first == 0 ? max(rest.count, 1) : Int(first)
            reads = stride(from: rest.startIndex, to: rest.endIndex, by: size).map { Array(rest[$0..<min($0 + size, rest.endIndex)]) }
        }
        ParserProperty.check(Array(reads.joined()), reads: reads)
        StreamProperty.check(reads: reads)
    }
}

/// The parser reads a stream the same whichever way it is cut: the same
/// events, in order, as far as both got; an error in one and not the other
/// only for a stanza over the size limit, which is checked between reads (so a
/// cut decides how far it is read first); and an error, once reported, stays.
enum ParserProperty {
    /// Small, so that inputs of a few KiB reach the limit.
    static let maximumStanzaBytes = 1024

    static func check(_ stream: [UInt8], reads: [[UInt8]]) {
        let whole = XMLStreamParser(maximumStanzaBytes: maximumStanzaBytes)
        let (wholeEvents, wholeError) = stream.withUnsafeBytes { whole.feed($0) }
        let cut = XMLStreamParser(maximumStanzaBytes: maximumStanzaBytes)
        var cutEvents: [XMLStreamEvent] = []
        var cutError: XMLStreamParserError?
        for read in reads where cutError == nil {
            let (events, error) = read.withUnsafeBytes { cut.feed($0) }
            cutEvents += events
            cutError = error
        }
        let common = min(wholeEvents.count, cutEvents.count)
        guard wholeEvents.prefix(common) == cutEvents.prefix(common) else {
            fatalError("events differ with the cut: \(wholeEvents) against \(cutEvents)")
        }
        switch (wholeError, cutError) {
        case (nil, nil):
            guard wholeEvents.count == cutEvents.count else { fatalError("events differ with the cut: \(wholeEvents) against \(cutEvents)") }
        case (nil, .stanzaTooLarge?), (.stanzaTooLarge?, nil), (_?, _?):
            break
        case (nil, let error?), (let error?, nil):
            fatalError("an error (\(error)) in one cut only")
        }
        if let wholeError {
            let (events, again) = Array("<message/>".utf8).withUnsafeBytes { whole.feed($0) }
            guard events.isEmpty, again == wholeError else { fatalError("the error \(wholeError) did not stay") }
        }
    }
}

/// Whatever a client sends, the server's side of the stream is well-formed:
/// one stream header (a new one after SASL success), stanzas, at most one
/// stream error, then `</stream:stream>` and nothing after it; and a closed
/// connection was closed with it. The reads are given one at a time as the
/// server asks for them (it stops asking while it waits for the service), and
/// then the clock runs past every deadline.
enum StreamProperty {
    static let configuration = XMPPServerConfiguration(
        host: "127.0.0.1", port: 0, domain: "fuzz.test", certificateChainPEM: "", privateKeyPEM: "",
        maximumStanzaBytes: 4096, tlsHandshakeTimeout: .seconds(10), negotiationTimeout: .seconds(20),
        idleTimeout: .seconds(30), pingTimeout: .seconds(10), maximumQueuedStanzas: 4)

    static func check(reads: [[UInt8]]) {
        let done = DispatchSemaphore(value: 0)
        Task {
            do {
                try await run(reads)
            } catch {
                fatalError("the harness failed: \(error)")
            }
            done.signal()
        }
        done.wait()
    }

    static func run(_ reads: [[UInt8]]) async throws {
        let server = XMPPServer(configuration: configuration, service: FuzzService(),
                                logger: Logger(label: "xmpp-fuzz") { _ in SwiftLogNoOpLogHandler() })
        let channel = NIOAsyncTestingChannel()
        let gate = try await channel.testingEventLoop.executeInContext {
            try server.serve(withoutTLS: channel)
            let gate = ReadGate()
            try channel.pipeline.syncOperations.addHandler(gate, position: .first)
            return NIOLoopBound(gate, eventLoop: channel.eventLoop)
        }
        try await channel.connect(to: SocketAddress(ipAddress: "192.0.2.1", port: 49152))
        try await channel.testingEventLoop.executeInContext {
            channel.pipeline.syncOperations.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil))
        }
        var output = OutputCheck()
        for read in reads {
            channel.pipeline.read()
            guard await ReadGate.readRequested(gate) else { break }
            try await channel.writeInbound(ByteBuffer(bytes: read))
            try await output.take(from: channel)
        }
        // Past the negotiation deadline, or through idle timeouts, pings and their deadlines.
        for _ in 0..<4 { await channel.testingEventLoop.advanceTime(by: .seconds(30)) }
        try await output.take(from: channel)
        output.finish(closed: !channel.isActive)
        _ = try? await channel.finish(acceptAlreadyClosed: true)
    }
}

/// Takes the one application server the harness logs in as; drains its stanzas.
struct FuzzService: XMPPService {
    func authenticate(username: String, password: String) async -> Bool {
        username == "app@fuzz.test" && password == "key"
    }

    func serve(_ session: XMPPSession) async {
        for await _ in session.stanzas {}
    }
}

/// At the pipeline's head: tells when the server asks for more input, which
/// it does not while it waits (for the service, or for stanzas to be taken).
final class ReadGate: ChannelDuplexHandler {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny

    private var requested = false
    private var closed = false
    private var waiter: CheckedContinuation<Bool, Never>?

    func read(context: ChannelHandlerContext) {
        requested = true
        resume()
        context.read()
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed = true
        resume()
        context.fireChannelInactive()
    }

    /// Whether the server asked for more input (true) or closed (false).
    static func readRequested(_ gate: NIOLoopBound<ReadGate>) async -> Bool {
        await withCheckedContinuation { continuation in
            gate.eventLoop.execute {
                gate.value.waiter = continuation
                gate.value.resume()
            }
        }
    }

    private func resume() {
        guard let waiter, requested || closed else { return }
        self.waiter = nil
        let asked = requested
        requested = false
        waiter.resume(returning: asked && !closed)
    }
}

/// Reads the server's output as a client would, with the project's own parser.
struct OutputCheck {
    private let parser = XMLStreamParser(maximumStanzaBytes: 1 << 20)
    private var restart = false
    private var ended = false
    private var written = false

    mutating func take(from channel: NIOAsyncTestingChannel) async throws {
        while let buffer = try await channel.readOutbound(as: ByteBuffer.self) {
            written = true
            if restart {
                parser.reset()
                restart = false
            }
            let (events, error) = buffer.withUnsafeReadableBytes { parser.feed($0) }
            if let error { fatalError("the server wrote \(String(buffer: buffer)): \(error)") }
            for event in events {
                if ended { fatalError("the server wrote after its </stream:stream>: \(event)") }
                switch event {
                case .stanza(let stanza) where stanza.name == "success": restart = true
                case .streamClosed: ended = true
                default: break
                }
            }
        }
    }

    func finish(closed: Bool) {
        if closed, written, !ended { fatalError("the connection closed without </stream:stream>") }
    }
}

/// libFuzzer's driver when built for fuzzing, else a replay of the inputs
/// named on the command line (FuzzHarness).
@main
enum Main {
    static func main() {
        FuzzHarness.main("xmpp-fuzz", property: FuzzProperty.check)
    }
}
