/// Which connections the server keeps, and which it lets go to make room.
///
/// A connection is *unauthenticated* from its acceptance until its SASL
/// authentication succeeds, and *authenticated* after. The two are bounded
/// separately, so that connections that never log in cannot take the places
/// of application servers that do:
///
/// - Authenticated connections: at most `maximumAuthenticatedPerTenant` of
///   one tenant (the login's bare JID: a project's sender ID), so that one
///   project cannot take every place from the others, and at most
///   `maximumAuthenticated` in all; one more is refused when it
///   authenticates (``authenticate(_:tenant:)``).
/// - Unauthenticated connections: at most `maximumUnauthenticated`, and
///   `maximumUnauthenticatedPerGroup` from one ``PeerAddressGroup``. A new
///   connection is never refused for them: the *slowest* of its group makes
///   room when its group is full, else the slowest of the largest groups (the
///   addresses holding the most). So a flood from other addresses cannot
///   displace an application server's connection while any of them holds
///   more than its address does, and one address's flood displaces only
///   itself.
///
/// The slowest is the one that has come least far, and of those the one that
/// got there first: a connection that has sent nothing yet, then one in its
/// TLS handshake, then one past it. A client sends its ClientHello as soon as
/// it is connected (often before the server has accepted it), so it leaves
/// the first class at once, while idle connections stay in it.
///
/// Pure bookkeeping, with no I/O or clock: the server asks, and closes what
/// it is told to close. Finding the slowest looks at every unauthenticated
/// connection, which is cheap at the sizes the configuration allows.
struct ConnectionAdmission<ID: Hashable> {
    let maximumAuthenticated: Int
    let maximumAuthenticatedPerTenant: Int
    let maximumUnauthenticated: Int
    let maximumUnauthenticatedPerGroup: Int

    /// How far an unauthenticated connection has come.
    private enum Progress: Int, Comparable {
        case silent, handshaking, negotiating

        static func < (lhs: Progress, rhs: Progress) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    private struct Waiting {
        let group: PeerAddressGroup
        var progress: Progress
        /// When it got this far, as a count of events.
        var since: UInt64
    }

    private var waiting: [ID: Waiting] = [:]
    private var groupSizes: [PeerAddressGroup: Int] = [:]
    /// Each authenticated connection's tenant.
    private var authenticated: [ID: String] = [:]
    private var tenantSizes: [String: Int] = [:]
    private var events: UInt64 = 0

    init(maximumAuthenticated: Int, maximumAuthenticatedPerTenant: Int, maximumUnauthenticated: Int,
         maximumUnauthenticatedPerGroup: Int) {
        precondition(maximumAuthenticated > 0 && maximumAuthenticatedPerTenant > 0 && maximumUnauthenticated > 0
            && maximumUnauthenticatedPerGroup > 0)
        self.maximumAuthenticated = maximumAuthenticated
        self.maximumAuthenticatedPerTenant = maximumAuthenticatedPerTenant
        self.maximumUnauthenticated = maximumUnauthenticated
        self.maximumUnauthenticatedPerGroup = maximumUnauthenticatedPerGroup
    }

    /// Which limit a new connection reached.
    enum Limit: Equatable {
        /// `maximumUnauthenticatedPerGroup`
        case perGroup
        /// `maximumUnauthenticated`
        case total
    }

    var unauthenticatedCount: Int { waiting.count }
    var authenticatedCount: Int { authenticated.count }

    /// Takes a new connection from `group`, which has sent nothing yet.
    /// Returns the connection it displaces, if a limit was reached (that one
    /// is no longer counted, and is to be closed), and the limit.
    mutating func admit(_ id: ID, from group: PeerAddressGroup) -> (id: ID, limit: Limit)? {
        var displaced: (id: ID, limit: Limit)?
        if groupSizes[group, default: 0] >= maximumUnauthenticatedPerGroup {
            displaced = slowest { $0 == group }.map { ($0, .perGroup) }
        } else if waiting.count >= maximumUnauthenticated {
            let largest = groupSizes.values.max()
            displaced = slowest { groupSizes[$0] == largest }.map { ($0, .total) }
        }
        if let displaced { remove(displaced.id) }
        events += 1
        waiting[id] = Waiting(group: group, progress: .silent, since: events)
        groupSizes[group, default: 0] += 1
        return displaced
    }

    /// The connection sent its first bytes (the start of its TLS handshake).
    mutating func receivedFirstBytes(_ id: ID) {
        advance(id, to: .handshaking)
    }

    /// The connection finished its TLS handshake.
    mutating func handshakeCompleted(_ id: ID) {
        advance(id, to: .negotiating)
    }

    /// What ``authenticate(_:)`` decided.
    enum Authentication: Equatable {
        /// It counts as authenticated from now on.
        case admitted
        /// `maximumAuthenticated` are authenticated already; it stays as it was.
        case full
        /// `maximumAuthenticatedPerTenant` of its tenant are; it stays as it was.
        case tenantFull
        /// It is no longer counted (displaced meanwhile).
        case unknown
    }

    /// The connection authenticated as one of `tenant`'s.
    mutating func authenticate(_ id: ID, tenant: String) -> Authentication {
        guard waiting[id] != nil else { return .unknown }
        guard tenantSizes[tenant, default: 0] < maximumAuthenticatedPerTenant else { return .tenantFull }
        guard authenticated.count < maximumAuthenticated else { return .full }
        removeWaiting(id)
        authenticated[id] = tenant
        tenantSizes[tenant, default: 0] += 1
        return .admitted
    }

    /// Authenticated connections of `tenant`.
    func authenticatedCount(of tenant: String) -> Int {
        tenantSizes[tenant, default: 0]
    }

    /// The connection is gone.
    mutating func remove(_ id: ID) {
        removeWaiting(id)
        guard let tenant = authenticated.removeValue(forKey: id) else { return }
        tenantSizes[tenant, default: 1] -= 1
        if tenantSizes[tenant] == 0 { tenantSizes[tenant] = nil }
    }

    private mutating func advance(_ id: ID, to progress: Progress) {
        guard let current = waiting[id]?.progress, current < progress else { return }
        events += 1
        waiting[id]?.progress = progress
        waiting[id]?.since = events
    }

    /// The slowest unauthenticated connection of the groups `included` takes.
    private func slowest(of included: (PeerAddressGroup) -> Bool) -> ID? {
        var slowest: (id: ID, progress: Progress, since: UInt64)?
        for (id, connection) in waiting where included(connection.group) {
            if let current = slowest, (current.progress, current.since) < (connection.progress, connection.since) { continue }
            slowest = (id, connection.progress, connection.since)
        }
        return slowest?.id
    }

    private mutating func removeWaiting(_ id: ID) {
        guard let group = waiting.removeValue(forKey: id)?.group else { return }
        groupSizes[group, default: 1] -= 1
        if groupSizes[group] == 0 { groupSizes[group] = nil }
    }
}
