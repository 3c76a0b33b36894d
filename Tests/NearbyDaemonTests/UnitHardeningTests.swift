import Foundation
import Testing
import TestSupport

/// The shipped units' sandboxing as systemd itself rates it
/// (`systemd-analyze security --offline=true`, lower is tighter): at most
/// 3.0 for nearbyd, which serves local users and drives the radio and sound
/// cards, and 2.0 for nearby-server, which needs only its sockets and its
/// state directory. doc/security.md explains what each unit leaves open.
@Suite(.timeLimit(.minutes(1))) struct UnitHardeningTests {
    @Test(arguments: [("nearbyd.service", 3.0), ("nearby-server.service", 2.0)])
    func theUnitIsRatedAtMost(unit: String, limit: Double) async throws {
        let result = try await runProgram("/usr/bin/systemd-analyze", [
            "security", "--offline=true", "--no-pager", RepositoryFile.path("systemd/\(unit)"),
        ])
        #expect(result.status == 0, "\(result.output)")
        let rating = try #require(result.output.firstMatch(of: #/Overall exposure level for \S+: (\d+\.\d)/#), "\(result.output)")
        #expect(try #require(Double(String(rating.1))) <= limit, "\(unit): \(rating.1)")
    }
}
