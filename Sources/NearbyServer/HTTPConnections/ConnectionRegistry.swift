import NIOCore
import OrderedCollections
import Synchronization

/// Every open connection to the HTTP API, by client address, with which of
/// them are idle: the one place that decides whether a new connection may
/// stay. Shared by the guards of all connections (``ConnectionGuard``), on
/// whatever event loop each runs.
///
/// A connection is *idle* while it is not in a request: from its accept until
/// its first request head is whole, and between a response and the next
/// head. Those are the connections a client holds without using them (the
/// attack is thousands of half-sent heads), so when a limit is reached the
/// one idle longest makes room: of the connection's own address when that
/// address is full, else of the address holding the most. A connection in a
/// request or an open WebSocket is never taken. Only when nothing of the kind
/// is idle is the new connection refused.
///
/// A WebSocket (a device's stream or channel) holds its connection for as
/// long as the device likes, so WebSockets are also counted by the device's
/// project: at most `perProject` of one project's, so that devices holding a
/// project's public API key, from however many addresses, can never take the
/// last connections from another project's.
final class ConnectionRegistry: Sendable {
    struct Limits: Sendable, Equatable {
        /// Connections at once, all addresses together.
        var total: Int
        /// Connections at once from one ``ClientAddress``.
        var perAddress: Int
        /// WebSockets of one project's devices at once.
        var perProject: Int

        init(total: Int, perAddress: Int, perProject: Int? = nil) {
            self.total = total
            self.perAddress = perAddress
            self.perProject = perProject ?? total
        }
    }

    /// A connection's handle in the registry.
    typealias ID = UInt64

    enum Admission {
        /// The connection may stay; `evicted` was the idle connection that
        /// made room for it, to be closed by the caller.
        case admitted(ID, evicted: (any Channel)?)
        /// The connection must go: every slot it could take is busy.
        case refused(Refusal)
    }

    enum Refusal: Equatable {
        case address(limit: Int)
        case total(limit: Int)
    }

    private struct Entry {
        let channel: any Channel
        let address: ClientAddress
        var isIdle: Bool
        /// The project of the device whose WebSocket this is.
        var project: String?
    }

    private struct State {
        var nextID: ID = 0
        var entries: [ID: Entry] = [:]
        var byChannel: [ObjectIdentifier: ID] = [:]
        var countByAddress: [ClientAddress: Int] = [:]
        var socketsByProject: [String: Int] = [:]
        /// Idle connections in the order they became idle: the first is the oldest.
        var idle: OrderedSet<ID> = []
        var idleByAddress: [ClientAddress: OrderedSet<ID>] = [:]
    }

    let limits: Limits
    private let state = Mutex(State())

    init(limits: Limits) {
        self.limits = limits
    }

    /// Connections held now.
    var count: Int { state.withLock { $0.entries.count } }

    /// Takes a slot for a new connection (idle until its first head is whole),
    /// making room by evicting the oldest idle connection of its address, or
    /// of all, when a limit is reached.
    func admit(_ channel: any Channel, from address: ClientAddress) -> Admission {
        state.withLock { state in
            var evicted: ID?
            if state.countByAddress[address, default: 0] >= limits.perAddress {
                guard let oldest = state.idleByAddress[address]?.first else {
                    return .refused(.address(limit: limits.perAddress))
                }
                evicted = oldest
            } else if state.entries.count >= limits.total {
                guard let oldest = Self.oldestIdleOfTheFullestAddress(state) else { return .refused(.total(limit: limits.total)) }
                evicted = oldest
            }
            let victim = evicted.flatMap { Self.remove($0, from: &state) }
            state.nextID += 1
            let id = state.nextID
            state.entries[id] = Entry(channel: channel, address: address, isIdle: true)
            state.byChannel[ObjectIdentifier(channel)] = id
            state.countByAddress[address, default: 0] += 1
            state.idle.append(id)
            state.idleByAddress[address, default: []].append(id)
            return .admitted(id, evicted: victim?.channel)
        }
    }

    /// The connection is in a request (or became a WebSocket): it cannot be
    /// evicted. False when it was evicted already: the caller closes it.
    func setBusy(_ id: ID) -> Bool {
        state.withLock { state in
            guard var entry = state.entries[id] else { return false }
            if entry.isIdle {
                entry.isIdle = false
                state.entries[id] = entry
                state.idle.remove(id)
                state.idleByAddress[entry.address]?.remove(id)
            }
            return true
        }
    }

    /// The connection finished a request and waits for the next: it is the
    /// newest idle one. False when it was evicted already.
    func setIdle(_ id: ID) -> Bool {
        state.withLock { state in
            guard var entry = state.entries[id] else { return false }
            if !entry.isIdle {
                entry.isIdle = true
                state.entries[id] = entry
                state.idle.append(id)
                state.idleByAddress[entry.address, default: []].append(id)
            }
            return true
        }
    }

    /// `channel` is to become a WebSocket of a device of `project`: whether
    /// the project's share (``Limits/perProject``) has room for it. When it
    /// has, the WebSocket counts against it until the connection closes.
    func claimSocket(_ channel: any Channel, for project: String) -> Bool {
        state.withLock { state in
            guard let id = state.byChannel[ObjectIdentifier(channel)], var entry = state.entries[id] else { return false }
            if entry.project == project { return true }
            guard entry.project == nil, state.socketsByProject[project, default: 0] < limits.perProject else { return false }
            entry.project = project
            state.entries[id] = entry
            state.socketsByProject[project, default: 0] += 1
            return true
        }
    }

    /// Whose connection `channel` is (a load balancer's client, when it
    /// sent a PROXY protocol header), while it is held.
    func address(of channel: any Channel) -> ClientAddress? {
        state.withLock { state in state.byChannel[ObjectIdentifier(channel)].flatMap { state.entries[$0]?.address } }
    }

    /// The connection closed.
    func remove(_ id: ID) {
        state.withLock { state in _ = Self.remove(id, from: &state) }
    }

    /// The connection idle longest of the addresses holding the most
    /// connections among those holding an idle one: a flood from one
    /// address makes room from itself before anyone else's. Looks at every
    /// address and idle connection, only when the server is full.
    private static func oldestIdleOfTheFullestAddress(_ state: State) -> ID? {
        let most = state.idleByAddress.lazy.filter { !$0.value.isEmpty }.map { state.countByAddress[$0.key, default: 0] }.max()
        return state.idle.first { state.entries[$0].map { state.countByAddress[$0.address] == most } ?? false }
    }

    private static func remove(_ id: ID, from state: inout State) -> Entry? {
        guard let entry = state.entries.removeValue(forKey: id) else { return nil }
        state.byChannel[ObjectIdentifier(entry.channel)] = nil
        if let project = entry.project {
            let sockets = state.socketsByProject[project, default: 1] - 1
            state.socketsByProject[project] = sockets > 0 ? sockets : nil
        }
        let remaining = state.countByAddress[entry.address, default: 1] - 1
        state.countByAddress[entry.address] = remaining > 0 ? remaining : nil
        if entry.isIdle {
            state.idle.remove(id)
            state.idleByAddress[entry.address]?.remove(id)
            if state.idleByAddress[entry.address]?.isEmpty == true { state.idleByAddress[entry.address] = nil }
        }
        return entry
    }
}

/// Who a connection counts against in the per-address limit: its IPv4
/// address, or the /64 of its IPv6 address (one subscriber's network holds a
/// whole /64, so counting single IPv6 addresses would bound nothing).
public struct ClientAddress: Hashable, Sendable, CustomStringConvertible {
    public let description: String

    /// An address already in its counted form (tests, and callers without a socket).
    public init(_ text: String) {
        description = text
    }

    public init(_ address: SocketAddress?) {
        switch address {
        case .v4(let v4)?:
            self.init(ipv4: withUnsafeBytes(of: v4.address.sin_addr) { Array($0) })
        case .v6(let v6)?:
            self.init(ipv6: withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) })
        case .unixDomainSocket?, nil:
            self.init("local")
        }
    }

    /// An IPv4 address's four bytes, in network order.
    init(ipv4 bytes: some Collection<UInt8>) {
        self.init(bytes.map(String.init).joined(separator: "."))
    }

    /// An IPv6 address's sixteen bytes, in network order.
    init(ipv6 bytes: some Collection<UInt8>) {
        let bytes = Array(bytes)
        // ::ffff:a.b.c.d is an IPv4 client on a dual-stack socket.
        if bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF {
            self.init(ipv4: bytes[12...])
        } else {
            let groups = stride(from: 0, to: 8, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
            self.init(groups.joined(separator: ":") + "::/64")
        }
    }
}
