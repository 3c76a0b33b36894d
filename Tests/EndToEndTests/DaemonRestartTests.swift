import Foundation
import NearbyMessages
import Testing
import TestSupport

/// An app never restarts because nearbyd did: the NearbyMessages library
/// makes its manager, publications and subscriptions again on the next
/// nearbyd, and reports the gap (lost messages, `starting`) meanwhile.
@Suite(.serialized) struct DaemonRestartTests {
    @Test func anAppsObjectsOutliveAKilledNearbyd() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("restart")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (3, 4))
            let publicationStatus = Inbox<String>()
            let publication = try await MessageManager(a, apiKey: key).publish("hello", statusChanged: { publicationStatus.put($0) })
            let subscriptionStatus = Inbox<String>()
            let subscriber = try await MessageManager(b, apiKey: key)
            let subscription = try await subscriber.record(statusChanged: { subscriptionStatus.put($0) })
            try await subscription.wait(.found, "hello")
            // Another manager of the app on B, in the background, with a subscription for an hour.
            let other = try await MessageManager(b, apiKey: key)
            try await other.setBackground(true)
            let lastingStatus = Inbox<String>()
            let lasting = try await other.record(strategy: Strategy(ttlSeconds: 3600), statusChanged: { lastingStatus.put($0) })

            // B's nearbyd dies: what B found is lost at once, and the subscription says why nothing runs.
            try await cluster.killDaemon("B")
            try await subscription.wait(.lost, "hello")
            _ = try await subscriptionStatus.first(within: 15, "starting") { $0 == "starting" }
            await #expect(throws: NearbyMessagesError.self) { _ = try await subscription.subscription.status }
            subscriptionStatus.clear()
            _ = try await lastingStatus.first(within: 15, "the background subscription starting") { $0 == "starting" }
            lastingStatus.clear()

            // B's nearbyd is back: both managers and their subscriptions are made again.
            try await cluster.startDaemonAgain("B")
            _ = try await subscription.events.nth(2, within: 20, "found again on the new nearbyd") {
                $0.kind == .found && $0.text == "hello"
            }
            _ = try await subscriptionStatus.first(within: 10, "active again") { $0 == "active" }
            #expect(try await subscription.subscription.status == "active")
            // The managers are made again one after the other: the second's is done once its subscription says so.
            _ = try await lastingStatus.first(within: 10, "the background subscription made again") { $0 != "starting" }
            #expect(try await other.background)
            #expect(try await lasting.subscription.status != "")

            // A's nearbyd dies and comes back: B loses the message, and finds it
            // again once A's publication is made again.
            try await cluster.killDaemon("A")
            _ = try await publicationStatus.first(within: 15, "the publication starting") { $0 == "starting" }
            _ = try await subscription.events.nth(2, within: 20, "lost with A's nearbyd") { $0.kind == .lost && $0.text == "hello" }
            publicationStatus.clear()
            try await cluster.startDaemonAgain("A")
            _ = try await subscription.events.nth(3, within: 20, "found with A's new nearbyd") {
                $0.kind == .found && $0.text == "hello"
            }
            _ = try await publicationStatus.first(within: 10, "the publication active again") { $0 == "active" }
            #expect(try await publication.status == "active")
            // B's own restart reported each change once. (Around A's restart, B
            // may also meet A's old publication, which the server keeps until
            // A's new nearbyd has synchronised with it: found and lost before
            // the new one is found.)
            #expect(Array(subscription.kinds.filter { $0.hasPrefix("found") || $0.hasPrefix("lost") }.prefix(4)) == [
                "found restart/chat 'hello'", "lost restart/chat 'hello'", "found restart/chat 'hello'",
                "lost restart/chat 'hello'",
            ])
            withExtendedLifetime((publication, lasting)) {}
        }
    }

    /// What the app ends while nearbyd is down is not made again, and the
    /// path it had, which the new nearbyd may give to another object, is
    /// never called again: ending it there would end that other object.
    @Test func whatEndsDuringTheGapStaysEndedAndItsOldPathIsLeftAlone() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("restart-gap")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (1, 0))
            let subscription = try await MessageManager(b, apiKey: key).record()
            let publisher = try await MessageManager(a, apiKey: key)
            var first: Publication? = try await publisher.publish("first")
            let secondStatus = Inbox<String>()
            let second = try await publisher.publish("second", statusChanged: { secondStatus.put($0) })
            try await subscription.wait(.found, "first")
            try await subscription.wait(.found, "second")

            try await cluster.killDaemon("A")
            try await subscription.wait(.lost, "first")
            try await subscription.wait(.lost, "second")
            secondStatus.clear()
            // Ended while nearbyd is down: nothing to call, and not made again.
            try await first?.unpublish()
            await #expect(throws: NearbyMessagesError.self) { _ = try await second.status }

            try await cluster.startDaemonAgain("A")
            _ = try await secondStatus.first(within: 20, "second active again") { $0 == "active" }
            // The new nearbyd numbers its objects afresh: "second" may have the path
            // "first" had. Dropping "first" now must not end it.
            first = nil
            let marker = try await publisher.publish("marker")
            try await subscription.wait(.found, "marker", within: 20)
            // Still there: asking for its status does not find it gone.
            #expect(try await second.status != "")
            // (B may meet A's old "first", which the server keeps until A's new
            // nearbyd has synchronised with it, found and lost again meanwhile.)
            #expect(subscription.events.values.last { $0.text == "first" }?.kind == .lost)
            withExtendedLifetime((first, marker)) {}
        }
    }

    /// What the app ended stays ended, and a TTL keeps counting across the
    /// restart: the subscription is made again with what it has left, and
    /// expires once.
    @Test func endedObjectsStayEndedAndTTLsKeepCounting() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("restart-ttl")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (1, 0))
            let subscription = try await MessageManager(b, apiKey: key).record()
            let publisher = try await MessageManager(a, apiKey: key)
            let ended = try await publisher.publish("ended")
            try await subscription.wait(.found, "ended")
            try await ended.unpublish()
            try await subscription.wait(.lost, "ended", within: 5)
            let short = try await MessageManager(b, apiKey: key).record(strategy: Strategy(ttlSeconds: 3))

            try await cluster.restartDaemon("A")
            try await cluster.restartDaemon("B")
            _ = try await short.events.first(within: 20, "the short subscription's expiry") { $0.kind == .expired }
            await #expect(throws: NearbyMessagesError.self) { _ = try await short.subscription.status }
            // The unpublished message is not published again.
            let marker = try await publisher.publish("marker")
            try await subscription.wait(.found, "marker", within: 20)
            #expect(!subscription.events.values.dropFirst(2).contains { $0.text == "ended" })
            #expect(short.events.values.filter { $0.kind == .expired }.count == 1)
            withExtendedLifetime(marker) {}
        }
    }
}
