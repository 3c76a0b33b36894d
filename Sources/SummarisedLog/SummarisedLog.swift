import Logging
import Synchronization

/// An event anyone on the network can cause at will (a refused connection, a
/// refused login), logged at most once per `interval` for each kind: the
/// first at once, and those that come within the interval after it only
/// counted, their number told with the next line of the kind. One line per
/// event would let a flood push the server's other lines past journald's
/// rate limit; no line at all would hide the flood from its operator.
public final class SummarisedLog: Sendable {
    private struct Kind {
        /// When its last line was written.
        var loggedAt: Duration
        /// Events since that line, not logged.
        var unlogged: Int
    }

    private let logger: Logger
    private let level: Logger.Level
    private let interval: Duration
    private let now: @Sendable () -> Duration
    private let kinds = Mutex<[String: Kind]>([:])

    /// `now` is the time on any monotonic scale (tests move it by hand); by
    /// default the continuous clock's since this log was made.
    public init(logger: Logger, level: Logger.Level = .notice, interval: Duration = .seconds(60),
                now: (@Sendable () -> Duration)? = nil) {
        self.logger = logger
        self.level = level
        self.interval = interval
        if let now {
            self.now = now
        } else {
            let origin = ContinuousClock.now
            self.now = { ContinuousClock.now - origin }
        }
    }

    /// Notes one event of `kind`: logs `message` (with the count of those
    /// of the kind not logged since the last line) when the kind's last line
    /// is `interval` old or there has been none; else counts it.
    public func note(_ kind: String, _ message: @autoclosure () -> String, metadata: @autoclosure () -> Logger.Metadata = [:]) {
        let time = now()
        let unlogged: Int? = kinds.withLock { kinds in
            if var known = kinds[kind], time - known.loggedAt < interval {
                known.unlogged += 1
                kinds[kind] = known
                return nil
            }
            let unlogged = kinds[kind]?.unlogged ?? 0
            kinds[kind] = Kind(loggedAt: time, unlogged: 0)
            return unlogged
        }
        guard let unlogged else { return }
        var metadata = metadata()
        if unlogged > 0 { metadata["notLoggedSinceTheLastLine"] = "\(unlogged)" }
        logger.log(level: level, "\(message())", metadata: metadata)
    }
}
