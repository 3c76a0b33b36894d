import Synchronization

/// A token bucket of `burst` tokens, one coming back every `intervalMs`,
/// kept as the one time at which it is full again (the generic cell rate
/// algorithm): no timers, and nothing to keep for a bucket that is full.
struct TokenBucket: Sendable, Equatable {
    let burst: Int
    let intervalMs: UInt64
    /// When the bucket holds `burst` tokens again; at or before now, it is full.
    private(set) var fullAtMs: UInt64 = 0

    init(burst: Int, intervalMs: UInt64) {
        self.burst = burst
        self.intervalMs = intervalMs
    }

    /// `perMinute` tokens a minute, as many at once.
    init(perMinute: Int) {
        self.init(burst: perMinute, intervalMs: max(1, 60_000 / UInt64(perMinute)))
    }

    /// How long until a token is there: 0 when one is there now.
    func wait(nowMs: UInt64) -> UInt64 {
        let full = max(fullAtMs, nowMs)
        let span = UInt64(burst - 1) * intervalMs
        let earliest = full > span ? full - span : 0
        return earliest > nowMs ? earliest - nowMs : 0
    }

    /// Takes a token, which must be there (``wait(nowMs:)`` is 0).
    mutating func take(nowMs: UInt64) {
        fullAtMs = max(fullAtMs, nowMs) + intervalMs
    }

    func isFull(nowMs: UInt64) -> Bool { fullAtMs <= nowMs }
}

/// How fast devices may register: per client address and per project, each
/// a ``TokenBucket``. An API key ships inside every app, so anyone may
/// register; these keep one address, or all addresses together, from filling
/// a project with devices (the attack: 100,000 registrations at 458 a second,
/// after which every real install was refused).
///
/// Buckets that are full again are forgotten at the sweep. The addresses
/// tracked are bounded: beyond `maxTrackedAddresses` new addresses share one
/// bucket, so many addresses gain an attacker nothing over one.
final class RegistrationLimiter: Sendable {
    struct Limits: Sendable, Equatable {
        var perAddressPerMinute: Int
        var perProjectPerMinute: Int
        var maxTrackedAddresses = 65_536
    }

    /// Which limit refused a registration, and when to try again.
    struct Refusal: Error, Equatable {
        enum Limit: Equatable { case address, project }
        let limit: Limit
        let retryAfterMs: UInt64
    }

    private struct State {
        var byAddress: [ClientAddress: TokenBucket] = [:]
        var untracked: TokenBucket
        var byProject: [String: TokenBucket] = [:]
        var nextSweepMs: UInt64 = 0
    }

    let limits: Limits
    private let state: Mutex<State>

    init(limits: Limits) {
        self.limits = limits
        state = Mutex(State(untracked: TokenBucket(perMinute: limits.perAddressPerMinute)))
    }

    /// Takes a registration from `address` for `project` at `nowMs`, or says
    /// which limit refuses it: then nothing is taken.
    func admit(from address: ClientAddress, project: String, nowMs: UInt64) throws(Refusal) {
        try state.withLock { state throws(Refusal) in
            if state.byAddress[address] == nil && state.byAddress.count >= limits.maxTrackedAddresses {
                state.byAddress = state.byAddress.filter { !$0.value.isFull(nowMs: nowMs) }
            }
            let tracked = state.byAddress[address] != nil || state.byAddress.count < limits.maxTrackedAddresses
            var addressBucket = tracked
                ? state.byAddress[address] ?? TokenBucket(perMinute: limits.perAddressPerMinute)
                : state.untracked
            var projectBucket = state.byProject[project] ?? TokenBucket(perMinute: limits.perProjectPerMinute)
            let addressWait = addressBucket.wait(nowMs: nowMs)
            guard addressWait == 0 else { throw Refusal(limit: .address, retryAfterMs: addressWait) }
            let projectWait = projectBucket.wait(nowMs: nowMs)
            guard projectWait == 0 else { throw Refusal(limit: .project, retryAfterMs: projectWait) }
            addressBucket.take(nowMs: nowMs)
            projectBucket.take(nowMs: nowMs)
            if tracked { state.byAddress[address] = addressBucket } else { state.untracked = addressBucket }
            state.byProject[project] = projectBucket
        }
    }

    /// Forgets the buckets that are full again, at most once a minute (a
    /// full bucket left in place only takes memory).
    func sweep(nowMs: UInt64) {
        state.withLock { state in
            guard nowMs >= state.nextSweepMs else { return }
            state.nextSweepMs = nowMs + 60_000
            state.byAddress = state.byAddress.filter { !$0.value.isFull(nowMs: nowMs) }
            state.byProject = state.byProject.filter { !$0.value.isFull(nowMs: nowMs) }
        }
    }

    /// Buckets held, for tests of the bound.
    var trackedAddresses: Int { state.withLock { $0.byAddress.count } }
}
