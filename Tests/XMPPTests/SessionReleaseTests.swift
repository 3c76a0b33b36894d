import Foundation
import Logging
import NIOCore
import Synchronization
import Testing
import TestSupport
@_spi(Testing) @testable import XMPP

/// What an application server's session leaves behind once it has ended, as
/// slixmpp ends it: nothing. The soak measured about 16 KB kept per ended
/// session (doc/performance.md, "Churn and soak"): each closed connection
/// kept its stream handler, and through it its session, parser and pipeline.
@Suite(.timeLimit(.minutes(3)))
struct SessionReleaseTests {
    /// How a session ends.
    enum Ending: String, CaseIterable, Sendable {
        /// The application server is killed (SIGKILL): the socket just closes.
        case killed
        /// It ends its stream (`</stream:stream>`) and disconnects.
        case left
        /// The service ends the stream (``XMPPSession/close(_:)``).
        case closedByService
    }

    /// A weak reference to a stream handler, read on its event loop only.
    final class WeakHandler {
        weak var handler: XMPPStreamHandler?
        init(_ handler: XMPPStreamHandler) { self.handler = handler }
    }

    /// A weak reference to a session.
    final class WeakSession: Sendable {
        weak let session: XMPPSession?
        init(_ session: XMPPSession) { self.session = session }
    }

    /// Echoes each message; ends the session on "bye". Keeps nothing of a
    /// session but weak references to it and its handler.
    struct WatchingService: XMPPService {
        let sessions = Inbox<WeakSession>()
        let handlers = Inbox<NIOLoopBound<WeakHandler>>()
        let ended = Inbox<Void>()

        func authenticate(username: String, password: String) async -> Bool {
            username == XMPPServerTests.username && password == XMPPServerTests.password
        }

        func serve(_ session: XMPPSession) async {
            sessions.put(WeakSession(session))
            let handler = session.handler
            if let watched = try? await handler.eventLoop.submit({
                NIOLoopBound(WeakHandler(handler.value), eventLoop: handler.eventLoop)
            }).get() {
                handlers.put(watched)
            }
            for await stanza in session.stanzas {
                let text = stanza.child(named: "gcm", namespace: "google:mobile:data")?.text ?? ""
                if text == "bye" {
                    await session.close(nil)
                    break
                }
                try? await session.send(XMLElement("message", elements: [
                    XMLElement("gcm", namespace: "google:mobile:data", text: "echo: " + text),
                ]))
            }
            ended.put(())
        }
    }

    /// Sessions ended one after another, each after a message both ways,
    /// leave the server holding no connection, no serving task, no admission
    /// place, and no stream handler or session of theirs.
    @Test(arguments: Ending.allCases)
    func endedSessionsLeaveNothingBehind(ending: Ending) async throws {
        let configuration = XMPPServerConfiguration(
            host: "127.0.0.1", port: 0, domain: XMPPServerTests.domain,
            certificateChainPEM: XMPPServerTests.certificate.certificatePEM,
            privateKeyPEM: XMPPServerTests.certificate.privateKeyPEM)
        let service = WatchingService()
        let server = XMPPServer(configuration: configuration, service: service, logger: Logger(label: "xmpp-test"))
        let port = try await server.start()
        do {
            let count = 3
            for index in 1...count {
                try await runSession(port: port, ending: ending)
                _ = try await service.ended.nth(index, within: 30, "serve to return") { _ in true }
            }
            // Connections closed (their pipelines emptied) and serving tasks done, having let go
            // of their sessions: nothing else may hold a handler or a session now.
            try await withTimeout(10, "the server to let go of every connection") { await server.released() }
            #expect(server.holdings == .none)
            let handlers = service.handlers.values
            #expect(handlers.count == count)
            for watched in handlers {
                #expect(try await watched.eventLoop.submit { watched.value.handler == nil }.get(), "a stream handler is kept")
            }
            #expect(service.sessions.values.count == count)
            #expect(service.sessions.values.allSatisfy { $0.session == nil }, "a session is kept")
        } catch {
            await server.shutdown(gracePeriod: .zero)
            throw error
        }
        await server.shutdown(gracePeriod: .zero)
    }

    /// One slixmpp session: logs in, has "hi" echoed, then ends as `ending` says.
    private func runSession(port: Int, ending: Ending) async throws {
        let arguments: [String] = switch ending {
        case .killed: ["--send", "hi", "--stay"]
        case .left: ["--send", "hi", "--expect", "1"]
        case .closedByService: ["--send", "hi", "--send", "bye", "--stay"]
        }
        let client = try await ChildProcess(
            name: "slixmpp", executable: XMPPServerTests.python,
            arguments: [XMPPServerTests.clientScript, "--port", "\(port)", "--jid", XMPPServerTests.username,
                        "--password", XMPPServerTests.password, "--ca", XMPPServerTests.certificate.file] + arguments)
        defer { client.signal(SIGKILL) }
        try await client.waitForLine(containing: "gcm echo: hi", within: 30)
        switch ending {
        case .killed:
            client.signal(SIGKILL)
            _ = try await client.waitForExit(within: 30)
        case .left, .closedByService:
            try await client.waitForLine(containing: "disconnected", within: 30)
            #expect(try await client.waitForExit(within: 30) == 0, "\(client.output)")
        }
    }
}
