import Foundation
import Logging
import NearbyAir
import NearbyCore
import Testing

/// Runs an AirServer on a fresh socket for the length of `body`.
private func withAir(_ body: (String) async throws -> Void) async throws {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("air-\(UUID().uuidString.prefix(8)).sock").path
    let server = AirServer(parameters: AirParameters(interval: 0.05), logger: Logger(label: "test-air"))
    let (listening, ready) = AsyncStream.makeStream(of: Void.self)
    let running = Task { try await server.run(socketPath: path) { ready.yield() } }
    for await _ in listening { break }
    defer { running.cancel() }
    try await body(path)
}

/// The first broadcast heard on `client` that satisfies `condition`.
private func firstHeard(_ client: AirClient, where condition: @escaping @Sendable (Heard) -> Bool) async -> Heard? {
    for await heard in client.heard where condition(heard) { return heard }
    return nil
}

@Suite struct AirServerTests {
    let token: [UInt8] = [8, 7, 6, 5, 4, 3, 2, 1]

    @Test func attachedDevicesHearEachOther() async throws {
        try await withAir { path in
            let a = try await AirClient(socketPath: path)
            let b = try await AirClient(socketPath: path)
            try await a.request(.attach(device: "A", position: Position(x: 0, y: 0)))
            try await b.request(.attach(device: "B", position: Position(x: 10, y: 0)))
            try await b.request(.scan(medium: .ble, enabled: true))
            try await a.request(.advertise(id: "t", medium: .ble, payload: token, txPower: -59))
            let heard = await firstHeard(b) { _ in true }
            #expect(heard == Heard(medium: .ble, payload: token, rssi: -79, txPower: -59, sender: "A"))

            // A controller moves B while everything runs; B hears the new strength.
            let control = try await AirClient(socketPath: path)
            try await control.request(.move(device: "B", position: Position(x: 1, y: 0)))
            #expect(await firstHeard(b) { $0.rssi == -59 } != nil)
            guard case .devices(_, let devices) = try await control.request(.list) else {
                Issue.record("list answered something else")
                return
            }
            #expect(devices.map(\.name) == ["A", "B"])
            #expect(devices.first?.broadcasts == 1)
            for client in [a, b, control] { client.close() }
        }
    }

    @Test func errorsAreAnsweredAndTheConnectionStays() async throws {
        try await withAir { path in
            let a = try await AirClient(socketPath: path)
            await #expect(throws: AirProtocolError("attach a device first")) {
                try await a.request(.scan(medium: .ble, enabled: true))
            }
            try await a.request(.attach(device: "A", position: Position(x: 0, y: 0)))
            let b = try await AirClient(socketPath: path)
            await #expect(throws: AirProtocolError("a device named 'A' is already attached")) {
                try await b.request(.attach(device: "A", position: Position(x: 0, y: 0)))
            }
            await #expect(throws: AirProtocolError("no device named 'Z'")) {
                try await b.request(.move(device: "Z", position: Position(x: 0, y: 0)))
            }
            try await a.request(.scan(medium: .ble, enabled: true))
            a.close()
            b.close()
        }
    }
}
