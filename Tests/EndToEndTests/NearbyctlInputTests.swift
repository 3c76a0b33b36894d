import Foundation
import Testing
import TestSupport

/// `nearbyctl publish --file` names a file it cannot read and says why, in one
/// line, before it talks to nearbyd.
@Suite struct NearbyctlInputTests {
    @Test func aFileThatCannotBeReadIsNamedWithWhy() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        for (file, why) in [(directory.file("nothere"), "No such file or directory"), (directory.path, "Is a directory")] {
            let result = try await runProgramSeparately(Programs.path("nearbyctl"), [
                "publish", "--bus", "unix:path=\(directory.file("no-bus"))", "--api-key", "k", "--file", file,
            ])
            #expect(result.status == 1, "\(file)")
            #expect(result.errors == "nearbyctl: cannot read \(file): \(why)\n")
        }
    }
}
