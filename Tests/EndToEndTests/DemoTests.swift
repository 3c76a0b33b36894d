import Foundation
import Testing
import TestSupport

/// The README's demo, as a user runs it: `dist/demo.sh` with the built programs.
@Suite struct DemoTests {
    @Test func theDemoShowsAMessageFoundAndLost() async throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../dist/demo.sh").standardizedFileURL.path
        let result = try await runProgram("/bin/bash", [script, Programs.directory])
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains("B: found demo/chat"))
        #expect(result.output.contains("B: lost  demo/chat"))
        #expect(result.output.contains("Done: found when near, lost when apart"))
    }
}
