import DBus
import Foundation
import Testing
import TestSupport

/// Publications that came and went leave nothing behind in nearbyd: each of
/// its bus objects and the core's record of it hold each other until the
/// object ends, so a path that ended one without letting go would keep every
/// message ever published. Large messages make such a leak plain in the
/// daemon's resident memory.
@Suite(.serialized, .timeLimit(.minutes(3))) struct WhatEndsIsFreedTests {
    /// 64 KiB: 1,000 of them kept would be 64 MiB.
    static let content = [UInt8](repeating: 0x5a, count: 64 << 10)
    /// What the daemon's memory may grow by over a run that would leak at least 64 MiB.
    static let allowanceMiB = 24

    @Test @BusActor func unpublishedAndLeftBehindPublicationsAreFreed() async throws {
        try await withCluster { cluster in
            let device = try await cluster.addDevice("A", at: (0, 0))
            let key = try await cluster.createProject("freed")

            // Unpublished, one after another: the same memory serves each while nothing is kept.
            let client = try RawClient(device.busAddress)
            let manager = try await client.createManager(key)
            func pairs(_ count: Int) async throws {
                for _ in 0..<count {
                    let publication = try await client.publish(manager, Self.content, "freed")
                    _ = try await client.call(publication, "org.nearbyd.Publication1", "Unpublish")
                }
            }
            try await pairs(100)
            let before = try BadInputTests.residentMiB(device.daemon.pid)
            try await pairs(1_000)
            let unpublished = try BadInputTests.residentMiB(device.daemon.pid)
            #expect(unpublished - before < Self.allowanceMiB, "Unpublish: resident \(before) MiB before, \(unpublished) MiB after")

            // Left behind by clients that went away: 200 clients of five publications each.
            for _ in 0..<200 {
                let leaving = try RawClient(device.busAddress)
                let manager = try await leaving.createManager(key)
                for _ in 0..<5 { _ = try await leaving.publish(manager, Self.content, "freed") }
                leaving.connection.close()
            }
            // What nearbyd has not yet seen leave is a few clients' 320 KiB at most.
            let left = try BadInputTests.residentMiB(device.daemon.pid)
            #expect(left - before < Self.allowanceMiB, "clients that left: resident \(before) MiB before, \(left) MiB after")
        }
    }
}
