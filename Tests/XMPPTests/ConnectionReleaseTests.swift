import Testing
@_spi(Testing) @testable import XMPP

/// What a connection leaves behind once closed.
@Suite(.timeLimit(.minutes(1)))
struct ConnectionReleaseTests {
    /// Found by xmpp-fuzz under LeakSanitizer: the handler kept its channel
    /// handler context, which keeps the handler, so every closed connection
    /// left its handler, libxml2 parser and pipeline behind (36 KB each).
    @Test(arguments: ["", "<stream:stream to='elsewhere' version='1.0' xmlns='jabber:client' xmlns:stream='http://etherx.jabber.org/streams'>"])
    func aClosedConnectionsStreamHandlerIsFreed(input: String) async throws {
        weak var released: AnyObject?
        do {
            let connection = try await DeadlineTests.Connection()
            try await connection.completeTLS()
            try await connection.send(input)
            released = try await connection.channel.pipeline.handler(type: XMPPStreamHandler.self).get()
            #expect(released != nil)
            // Past every deadline and the close that ends an orderly stream.
            await connection.advance(by: .seconds(60))
            await connection.finish()
        }
        #expect(released == nil)
    }
}
