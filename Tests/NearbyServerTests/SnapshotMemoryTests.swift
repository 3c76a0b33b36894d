import Foundation
import HummingbirdWSClient
import Logging
import ServerAPI
import TestSupport
import Testing

/// The report's attack on the real executable: two devices of one project
/// (the API key is all it takes), one publishing 40 messages of 100 KiB, the
/// other subscribing 16 times; the subscriber reports the publisher's token,
/// opens its stream and asks for a snapshot: 640 matches, 62.5 MiB of
/// content. Built and encoded whole, that cost the server hundreds of MiB at
/// once; a page at a time it costs about a page.
@Suite(.enabled(if: executable != nil, "needs the nearby-server executable (swift build --build-tests builds it)"),
       .timeLimit(.minutes(5)))
struct SnapshotMemoryTests {
    static let publications = 40
    static let subscriptions = 16
    static let contentBytes = 100 * 1024

    @Test func aLargeSnapshotCostsTheServerAboutAPage() async throws {
        try await withTemporaryDirectory { directory in
            let server = try await ServerProcess.start(in: directory)
            let created = try await run(["project", "create", "alpha", "--database", server.databasePath, "--json"])
            let apiKey = try #require(try JSONSerialization.jsonObject(with: Data(created.output.utf8)) as? [String: String])["apiKey"]!
            let client = CurlClient(baseURL: server.baseURL, directory: directory)
            let publisher: DeviceRegistration = try await client.call("POST", APIPath.devices, headers: ["X-Api-Key: \(apiKey)"])
            let subscriber: DeviceRegistration = try await client.call("POST", APIPath.devices, headers: ["X-Api-Key: \(apiKey)"])
            let expiry = UInt64(Date().timeIntervalSince1970 * 1000) + 3_600_000
            for index in 0..<Self.publications {
                let spec = PublicationSpec(namespace: "", type: "big", content: Data(repeating: UInt8(index), count: Self.contentBytes),
                                           mediums: [.ble], mode: .broadcast, expiresAtMs: expiry)
                let _: PublicationRecord = try await client.call("PUT", APIPath.publication(publisher.device, "p\(index)"),
                                                                 as: publisher, body: spec)
            }
            for index in 0..<Self.subscriptions {
                let spec = SubscriptionSpec(namespace: "", type: "", mediums: [.ble], mode: .scan, expiresAtMs: 0)
                let _: SubscriptionRecord = try await client.call("PUT", APIPath.subscription(subscriber.device, "s\(index)"),
                                                                  as: subscriber, body: spec)
            }
            let token: IssuedToken = try await client.call("POST", APIPath.tokens(publisher.device), as: publisher)
            let report = SightingReport(seen: [.init(token: token.token, medium: .ble, rssi: -50, distance: 1, seenAtMs: expiry)])
            let results: SightingResults = try await client.call("POST", APIPath.sightings(subscriber.device), as: subscriber, body: report)
            #expect(results.results.map(\.status) == [.ok])

            let before = try server.peakResidentBytes
            let pages = Inbox<Int>()
            let matches = Inbox<Int>()
            let logger = quietLogger()
            try await withTimeout(120, "the whole snapshot") {
                let configuration = WebSocketClientConfiguration(additionalHeaders: [.authorization: "Bearer \(subscriber.secret)"])
                try await WebSocketClient.connect(url: "ws://127.0.0.1:\(server.port)\(APIPath.stream(subscriber.device))",
                                                  configuration: configuration, logger: logger) { inbound, outbound, _ in
                    try await outbound.write(.text(#"{"request":"snapshot"}"#))
                    var count = 0
                    var pageCount = 0
                    // As nearbyd reads its stream.
                    for try await message in inbound.messages(maxSize: ClientBatchLimits.maxStreamMessageBytes) {
                        guard case .text(let text) = message,
                              case .snapshot(let page, let more) = try JSONDecoder().decode(StreamEvent.self, from: Data(text.utf8))
                        else { continue }
                        count += page.count
                        pageCount += 1
                        if !more { break }
                    }
                    pages.put(pageCount)
                    matches.put(count)
                    try await outbound.close(.normalClosure, reason: nil)
                }
            }
            let growth = try server.peakResidentBytes - before
            #expect(try await matches.first { _ in true } == Self.publications * Self.subscriptions)
            #expect(try await pages.first { _ in true } > 1)
            // 62.5 MiB of content went out. Whole, it took 217 MiB at once; a page
            // at a time (1 MiB by default) the server grew by 10 MiB, up to 56 MiB
            // while the machine was busy (allocator arenas of more threads).
            #expect(growth < 100 << 20, "the server's peak resident memory grew by \(growth >> 20) MiB")
            await server.stop()
        }
    }
}

/// The REST calls of the test through curl, as a client other than nearbyd makes them.
struct CurlClient {
    let baseURL: String
    let directory: URL

    func call<Response: Decodable>(_ method: String, _ path: String, headers: [String] = [],
                                   as device: DeviceRegistration? = nil, body: (some Encodable)? = nil as String?) async throws -> Response {
        var arguments = ["-sS", "--fail-with-body", "-X", method, baseURL + path]
        for header in headers + (device.map { ["Authorization: Bearer \($0.secret)"] } ?? []) {
            arguments += ["-H", header]
        }
        if let body {
            let file = directory.appendingPathComponent("body-\(UUID().uuidString).json")
            try JSONEncoder().encode(body).write(to: file)
            defer { try? FileManager.default.removeItem(at: file) }
            arguments += ["-H", "Content-Type: application/json", "--data-binary", "@\(file.path)"]
            return try await Self.decode(runProgram("/usr/bin/curl", arguments))
        }
        return try await Self.decode(runProgram("/usr/bin/curl", arguments))
    }

    private static func decode<Response: Decodable>(_ result: ProgramResult) throws -> Response {
        guard result.status == 0 else { throw UnexpectedResponse(description: "curl: \(result.output)") }
        return try JSONDecoder().decode(Response.self, from: Data(result.output.utf8))
    }
}
