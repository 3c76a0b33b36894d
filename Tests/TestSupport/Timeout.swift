import Foundation
import Synchronization

/// A test step that did not finish in time.
public struct TimedOut: Error, CustomStringConvertible {
    public let what: String
    public var description: String { "timed out: \(what)" }
}

/// Runs `body`, failing with ``TimedOut`` if it has not finished after `seconds`.
/// The timeout only bounds a wait that is otherwise driven by an event; it never
/// stands in for one.
public func withTimeout<T: Sendable>(
    _ seconds: Double, _ what: String, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            throw TimedOut(what: what)
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

/// Values that arrive over time (signals, output lines), with a way to wait
/// until one that matters has arrived.
public final class Inbox<Value: Sendable>: Sendable {
    private struct State {
        var values: [Value] = []
        var waiters: [(id: UUID, matches: @Sendable (Value) -> Bool, continuation: CheckedContinuation<Value, any Error>)] = []
    }

    private let state = Mutex(State())

    public init() {}

    /// Everything received so far, oldest first.
    public var values: [Value] { state.withLock { $0.values } }

    public func put(_ value: Value) {
        let ready = state.withLock { state in
            state.values.append(value)
            // Each waiter's test runs once per value: ``nth(_:within:_:where:)``'s counts.
            var ready: [(id: UUID, matches: @Sendable (Value) -> Bool, continuation: CheckedContinuation<Value, any Error>)] = []
            state.waiters.removeAll { waiter in
                guard waiter.matches(value) else { return false }
                ready.append(waiter)
                return true
            }
            return ready
        }
        for waiter in ready { waiter.continuation.resume(returning: value) }
    }

    /// The first value, already received or still to come, that `matches`.
    public func first(
        within seconds: Double = 10, _ what: String = "an expected value",
        where matches: @escaping @Sendable (Value) -> Bool
    ) async throws -> Value {
        let id = UUID()
        do {
            return try await waitFirst(id: id, within: seconds, what, where: matches)
        } catch let timedOut as TimedOut {
            // Say what did come, so a failure in CI explains itself.
            let received = values
            throw TimedOut(what: "\(timedOut.what) (\(received.count) received; the last: "
                           + received.suffix(5).map { String(describing: $0) }.joined(separator: "; ") + ")")
        }
    }

    private func waitFirst(
        id: UUID, within seconds: Double, _ what: String, where matches: @escaping @Sendable (Value) -> Bool
    ) async throws -> Value {
        try await withTimeout(seconds, what) {
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    var cancelled = false
                    let existing: Value? = self.state.withLock { state in
                        if let found = state.values.first(where: matches) { return found }
                        // Checked under the lock that onCancel takes, so a waiter is never left behind.
                        cancelled = Task.isCancelled
                        if !cancelled { state.waiters.append((id, matches, continuation)) }
                        return nil
                    }
                    if let existing {
                        continuation.resume(returning: existing)
                    } else if cancelled {
                        continuation.resume(throwing: CancellationError())
                    }
                }
            } onCancel: {
                let waiter = self.state.withLock { state in
                    let waiter = state.waiters.first { $0.id == id }
                    state.waiters.removeAll { $0.id == id }
                    return waiter
                }
                waiter?.continuation.resume(throwing: CancellationError())
            }
        }
    }

    /// The `count`th value, already received or still to come, that `matches`.
    public func nth(
        _ count: Int, within seconds: Double = 10, _ what: String = "expected values",
        where matches: @escaping @Sendable (Value) -> Bool
    ) async throws -> Value {
        let seen = Mutex(0)
        return try await first(within: seconds, what) { value in
            guard matches(value) else { return false }
            return seen.withLock { seen in
                seen += 1
                return seen >= count
            }
        }
    }

    /// Forgets what was received, so later waits see only new values.
    public func clear() {
        state.withLock { $0.values.removeAll() }
    }
}
