import Foundation
import Hummingbird
import NearbyCore
@testable import NearbyServer
import Testing
import TestSupport

/// doc/server-api/openapi.yaml held to the routes nearby-server serves: every
/// operation the document describes is routed, and every route is described.
/// (Its schemas are checked against the server's answers by the end-to-end
/// tests, and the document itself by openapi-spec-validator.)
@Suite struct OpenAPIContractTests {
    static let document = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("doc/server-api/openapi.yaml")

    /// "METHOD /path" of every operation under `paths:`, a custom method's
    /// `:verb` after a path parameter left out: the server routes
    /// `/v1beta1/beacons/{beacon}:activate` as `/v1beta1/beacons/{beacon}`
    /// and reads the verb itself (a parameter takes the whole segment).
    static func documented() throws -> Set<String> {
        let text = try String(contentsOf: document, encoding: .utf8)
        var operations: Set<String> = []
        var inPaths = false
        var path: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "paths:" { inPaths = true; continue }
            guard inPaths else { continue }
            // The next top-level key ends the paths.
            if let first = line.first, first != " ", first != "#" { break }
            if let match = line.wholeMatch(of: #/  (/[^ ]*):/#) {
                path = String(match.1).replacing(#/(\{[a-z]+\}):[A-Za-z]+$/#) { String($0.1) }
            } else if let match = line.wholeMatch(of: #/    (get|put|post|delete|patch):/#), let path {
                operations.insert("\(match.1.uppercased()) \(path)")
            }
        }
        return operations
    }

    /// "METHOD /path" of every route of the server's router, `:name` written `{name}`.
    static func routed() async throws -> Set<String> {
        try await withTemporaryDirectory { directory in
            let configuration = testConfiguration(databasePath: directory.appendingPathComponent("nearby.sqlite").path)
            let server = try await NearbyServer.open(configuration: configuration, clock: ManualWallClock(nowMs: startMs),
                                                     logger: quietLogger())
            let router = HTTPAPI(service: server.service).makeRouter()
            return Set(router.routes.map { route in
                let path = route.path.description.replacing(#/(^|/):([a-z]+)/#) { "\($0.1){\($0.2)}" }
                return "\(route.method.rawValue) \(path.hasPrefix("/") ? path : "/" + path)"
            })
        }
    }

    @Test func everyDocumentedOperationIsRoutedAndEveryRouteDocumented() async throws {
        let documented = try Self.documented()
        let routed = try await Self.routed()
        // The parser read the document: its first and last operations are there.
        #expect(documented.contains("GET /v1/health"))
        #expect(documented.contains("POST /v1beta1/beaconinfo:getforobserved"))
        #expect(documented.subtracting(routed).isEmpty, "described but not routed: \(documented.subtracting(routed).sorted())")
        #expect(routed.subtracting(documented).isEmpty, "routed but not described: \(routed.subtracting(documented).sorted())")
    }
}
