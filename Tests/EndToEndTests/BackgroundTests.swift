import Foundation
import NearbyMessages
import Testing
import TestSupport

/// A manager in the background: only objects with AllowInBackground run, on
/// BLE; the others wait, inactive, and resume in the foreground.
@Suite(.serialized) struct BackgroundTests {
    @Test func onlyObjectsAllowedInTheBackgroundRunThereAndAllResumeInTheForeground() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("background")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (2, 0))
            let publisher = try await MessageManager(a, apiKey: key)
            let stays = try await publisher.publish("stays", strategy: Strategy(allowInBackground: true))
            let pauses = try await publisher.publish("pauses")
            let listener = try await MessageManager(b, apiKey: key)
            let subscriber = try await listener.record()
            try await subscriber.wait(.found, "stays")
            try await subscriber.wait(.found, "pauses")

            // The daemon has moved the objects before it answers the Set.
            try await publisher.setBackground(true)
            #expect(try await pauses.status == "inactive")
            #expect(try await stays.status != "inactive")
            try await subscriber.wait(.lost, "pauses")

            // A subscription without AllowInBackground waits too.
            try await listener.setBackground(true)
            #expect(try await subscriber.subscription.status == "inactive")
            subscriber.events.clear()
            try await listener.setBackground(false)
            try await subscriber.wait(.found, "stays")

            try await publisher.setBackground(false)
            try await subscriber.wait(.found, "pauses")
            #expect(try await pauses.status != "inactive")
            #expect(!subscriber.kinds.contains("lost /chat 'stays'"), "\(subscriber.kinds)")
        }
    }
}
