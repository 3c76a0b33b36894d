import ConfigFile
import NIOCore
#if canImport(Glibc)
import Glibc
#endif

/// The file descriptors the configured limits let the server hold at once,
/// against what the process may open (`RLIMIT_NOFILE`, systemd's
/// `LimitNOFILE=`). Connections beyond the descriptors would not be refused
/// with an answer: `accept` would fail and every client would wait, the
/// attack the connection limits are there to stop. So the two are sized
/// together: the server raises its soft limit to what it needs, and refuses
/// to start when the hard limit is lower. The one exception is `[http]
/// max-connections` left at its default, sized for a dedicated server: where
/// the hard limit is lower (a shell's 4096), it is lowered to fit
/// (``fittingDefault(_:hardLimit:processors:)``), so that a plain
/// `nearby-server serve` starts; a value someone configured is never lowered.
public struct DescriptorBudget: Sendable, Equatable {
    /// Descriptors besides connections: the database (a writer and five
    /// readers, each with the file, its WAL and its shared memory), the
    /// listening sockets, standard streams, the journal, and slack.
    public static let fixedReserve = 64
    /// Per processor: each event loop thread's epoll, event and timer descriptors, and one more.
    public static let perProcessor = 4

    public let httpConnections: Int
    public let xmppConnections: Int
    public let processors: Int

    public init(_ configuration: ServerConfiguration, processors: Int = System.coreCount) {
        httpConnections = configuration.http.maxConnections
        // The XMPP endpoint holds its logged-in connections and, apart, those not yet logged in.
        xmppConnections = configuration.xmpp.isEnabled
            ? configuration.xmpp.maxConnections + configuration.xmpp.maxUnauthenticatedConnections : 0
        self.processors = processors
    }

    public var needed: Int { httpConnections + xmppConnections + Self.fixedReserve + Self.perProcessor * processors }

    /// The sum, as doc/nearby-server.md writes it.
    public var arithmetic: String {
        "[http] max-connections \(httpConnections) + [xmpp] max-connections and max-unauthenticated-connections "
            + "\(xmppConnections) + \(Self.fixedReserve)"
            + " + \(Self.perProcessor) × \(processors) processors = \(needed)"
    }

    /// `[http] max-connections` lowered from its default to fit a hard limit.
    public struct LoweredDefault: Sendable, Equatable, CustomStringConvertible {
        public let configuration: ServerConfiguration
        public let hardLimit: Int

        /// The log's notice: the setting, the limit, and how to have the default.
        public var description: String {
            "[http] max-connections lowered from its default \(ServerConfiguration.HTTP.defaultMaxConnections) to "
                + "\(configuration.http.maxConnections) to fit the file descriptor limit (RLIMIT_NOFILE hard limit \(hardLimit), "
                + "systemd's LimitNOFILE=): raise that limit to hold more connections, or set [http] max-connections to silence this"
        }
    }

    /// `configuration` with `[http] max-connections` lowered so that the
    /// budget fits `hardLimit`, when it was left at its default and does not
    /// fit; nil when it fits, was configured, or cannot be lowered far enough
    /// (below `max-connections-per-address`): ``apply()`` then refuses, saying the sum.
    public static func fittingDefault(_ configuration: ServerConfiguration, hardLimit: Int,
                                      processors: Int = System.coreCount) -> LoweredDefault? {
        let budget = DescriptorBudget(configuration, processors: processors)
        guard !configuration.http.maxConnectionsConfigured, budget.needed > hardLimit else { return nil }
        let room = hardLimit - (budget.needed - budget.httpConnections)
        guard room >= configuration.http.maxConnectionsPerAddress else { return nil }
        var lowered = configuration
        lowered.http.maxConnections = room
        return LoweredDefault(configuration: lowered, hardLimit: hardLimit)
    }

    /// The process's hard descriptor limit (what ``apply()`` may raise the soft one to).
    public static func hardLimit() throws(ConfigurationError) -> Int {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            throw ConfigurationError("cannot read the file descriptor limit (RLIMIT_NOFILE): errno \(errno)")
        }
        return Int(clamping: limit.rlim_max)
    }

    /// Raises the process's soft descriptor limit to ``needed`` if it is
    /// lower; fails when the hard limit is. Returns the soft limit in force.
    @discardableResult
    public func apply() throws(ConfigurationError) -> Int {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            throw ConfigurationError("cannot read the file descriptor limit (RLIMIT_NOFILE): errno \(errno)")
        }
        let wanted = rlim_t(needed)
        guard limit.rlim_cur < wanted else { return Int(clamping: limit.rlim_cur) }
        guard limit.rlim_max >= wanted else {
            throw ConfigurationError(
                "the connection limits need \(needed) file descriptors (\(arithmetic)) but the process may open only "
                    + "\(limit.rlim_max) (RLIMIT_NOFILE, systemd's LimitNOFILE=): raise that limit or lower the connection limits")
        }
        limit.rlim_cur = wanted
        guard setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            throw ConfigurationError("cannot raise the file descriptor limit (RLIMIT_NOFILE) to \(needed): errno \(errno)")
        }
        return needed
    }
}
