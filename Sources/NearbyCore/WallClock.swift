#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// A source of wall-clock time, in milliseconds since the Unix epoch (the unit
/// of every time in the server's API and the daemon's records). Everything
/// that expires or times out asks one it was given, so tests can move time by
/// hand instead of sleeping.
public protocol WallClock: Sendable {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    var nowMs: UInt64 { get }
}

/// The system's real-time clock.
public struct SystemWallClock: WallClock {
    public init() {}

    public var nowMs: UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return UInt64(time.tv_sec) * 1000 + UInt64(time.tv_nsec) / 1_000_000
    }
}

/// A clock that stands still until told to move: for tests.
public final class ManualWallClock: WallClock {
    private let current: Mutex<UInt64>

    public init(nowMs: UInt64) {
        current = Mutex(nowMs)
    }

    public var nowMs: UInt64 { current.withLock { $0 } }

    /// Moves the clock forward.
    public func advance(byMs milliseconds: UInt64) {
        current.withLock { $0 += milliseconds }
    }

    /// Moves the clock forward by whole seconds.
    public func advance(bySeconds seconds: UInt64) {
        advance(byMs: seconds * 1000)
    }
}
