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
/// to start when the hard limit is lower.
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
