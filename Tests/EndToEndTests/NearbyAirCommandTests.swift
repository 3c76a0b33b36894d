import Foundation
import Testing
import TestSupport

/// nearby-air's commands say what they did, and what went wrong, in one line.
@Suite(.timeLimit(.minutes(1))) struct NearbyAirCommandTests {
    @Test func placingMovingAndRemovingABeaconEachSayWhatTheyDid() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let socket = directory.file("air.sock")
        let air = try await ChildProcess(name: "nearby-air", executable: Programs.path("nearby-air"),
                                         arguments: ["serve", "--socket", socket])
        try await air.waitForLine(containing: "listening on")
        let program = Programs.path("nearby-air")
        let placed = try await runProgram(program, ["beacon", "add", "--socket", socket, "b1", "eddystone-uid",
                                                    "00112233445566778899/aabbccddeeff", "--at", "1", "2"])
        #expect(placed.status == 0)
        #expect(placed.output == "placed beacon b1: eddystone-uid 00112233445566778899/aabbccddeeff at (1.0, 2.0, 0.0), -59 dBm at 1 m\n")
        let moved = try await runProgram(program, ["move", "--socket", socket, "b1", "3", "4"])
        #expect(moved.output == "moved b1 to (3.0, 4.0, 0.0)\n")
        let removed = try await runProgram(program, ["beacon", "remove", "--socket", socket, "b1"])
        #expect(removed.output == "removed beacon b1\n")
        await air.stop()

        // With nothing listening, the socket is named with the cause.
        let unreachable = try await runProgram(program, ["list", "--socket", socket])
        #expect(unreachable.status == 1)
        #expect(unreachable.output.contains("cannot reach nearby-air at \(socket): "), "\(unreachable.output)")
    }
}
