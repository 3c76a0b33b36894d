import Foundation
import NearbyAir
import Testing

/// Where nearby-air listens by default, and what a client says when it is not there.
@Suite struct AirSocketTests {
    @Test func theDefaultIsTheUsersRuntimeDirectoryElseRun() {
        #expect(AirSocket.defaultPath(environment: ["XDG_RUNTIME_DIR": "/run/user/1000"]) == "/run/user/1000/nearby-air.sock")
        #expect(AirSocket.defaultPath(environment: ["XDG_RUNTIME_DIR": ""]) == "/run/nearby-air.sock")
        #expect(AirSocket.defaultPath(environment: [:]) == "/run/nearby-air.sock")
    }

    /// A real connection to paths that do not serve: the error names the path and the cause in words.
    @Test func aSocketThatCannotBeReachedIsNamedWithItsCause() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("air-socket-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let missing = directory.appendingPathComponent("none.sock").path
        let error = await #expect(throws: AirProtocolError.self) { _ = try await AirClient(socketPath: missing) }
        #expect(error?.message == "cannot reach nearby-air at \(missing): no such socket (is `nearby-air serve` running, with this socket?)")

        let plainFile = directory.appendingPathComponent("file.sock").path
        #expect(FileManager.default.createFile(atPath: plainFile, contents: Data()))
        let refused = await #expect(throws: AirProtocolError.self) { _ = try await AirClient(socketPath: plainFile) }
        #expect(refused?.message.hasPrefix("cannot reach nearby-air at \(plainFile): ") == true)
        #expect(refused?.message.contains("Error") == false, "\(refused?.message ?? "")")
    }
}
