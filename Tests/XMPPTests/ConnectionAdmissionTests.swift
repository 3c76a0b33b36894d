import NIOCore
import Testing
@testable import XMPP

/// Which connections the server keeps and which make room, at each limit's edge.
@Suite(.timeLimit(.minutes(1)))
struct ConnectionAdmissionTests {
    static let a = PeerAddressGroup(try! SocketAddress(ipAddress: "192.0.2.1", port: 1))
    static let b = PeerAddressGroup(try! SocketAddress(ipAddress: "192.0.2.2", port: 1))

    func admission(authenticated: Int = 10, perTenant: Int = 10, unauthenticated: Int = 10,
                   perGroup: Int = 10) -> ConnectionAdmission<Int> {
        ConnectionAdmission(maximumAuthenticated: authenticated, maximumAuthenticatedPerTenant: perTenant,
                            maximumUnauthenticated: unauthenticated, maximumUnauthenticatedPerGroup: perGroup)
    }

    @Test func upToTheUnauthenticatedLimitNothingIsDisplacedAndOneMoreDisplacesTheOldest() {
        var admission = admission(unauthenticated: 3)
        for id in 1...3 { #expect(admission.admit(id, from: Self.a) == nil) }
        #expect(admission.unauthenticatedCount == 3)
        let displaced = admission.admit(4, from: Self.b)
        #expect(displaced?.id == 1 && displaced?.limit == .total)
        #expect(admission.unauthenticatedCount == 3)
    }

    @Test func theSlowestMakesRoom() {
        var admission = admission(unauthenticated: 3)
        for id in 1...3 { _ = admission.admit(id, from: Self.a) }
        admission.receivedFirstBytes(1)
        admission.receivedFirstBytes(2)
        admission.handshakeCompleted(1)
        // First a connection that has sent nothing, though younger than the others.
        #expect(admission.admit(4, from: Self.a)?.id == 3)
        admission.receivedFirstBytes(4)
        // Then the first still in its TLS handshake, though one past it is older.
        #expect(admission.admit(5, from: Self.a)?.id == 2)
        // A newcomer that stays silent goes before those that have begun.
        #expect(admission.admit(6, from: Self.a)?.id == 5)
        admission.receivedFirstBytes(6)
        admission.handshakeCompleted(4)
        admission.handshakeCompleted(6)
        // Reported twice, or out of turn: no change of order.
        admission.handshakeCompleted(1)
        admission.receivedFirstBytes(1)
        // When every one is past TLS, the one that finished it first.
        #expect(admission.admit(7, from: Self.a)?.id == 1)
        admission.handshakeCompleted(7)
        #expect(admission.admit(8, from: Self.a)?.id == 4)
    }

    @Test func theLargestGroupMakesRoomSoAFloodFromOtherAddressesSparesALoneConnection() {
        var admission = admission(unauthenticated: 4)
        let lone = PeerAddressGroup(try! SocketAddress(ipAddress: "198.51.100.9", port: 1))
        #expect(admission.admit(0, from: lone) == nil)
        // The lone connection is the oldest and the slowest of all (silent), yet
        // stays while the flood's addresses hold more than its address does.
        for id in 1...100 {
            let displaced = admission.admit(id, from: id.isMultiple(of: 2) ? Self.a : Self.b)
            #expect(displaced == nil || displaced?.id != 0)
        }
        #expect(admission.unauthenticatedCount == 4)
        // With every address holding one, the slowest of all goes: the lone one now.
        var even = self.admission(unauthenticated: 3)
        for (id, group) in [(0, lone), (1, Self.a), (2, Self.b)] { _ = even.admit(id, from: group) }
        even.receivedFirstBytes(1)
        even.receivedFirstBytes(2)
        #expect(even.admit(3, from: Self.a)?.id == 0)
    }

    @Test func oneGroupAtItsLimitMakesRoomFromItsOwnConnections() {
        var admission = admission(unauthenticated: 10, perGroup: 2)
        #expect(admission.admit(1, from: Self.a) == nil)
        #expect(admission.admit(2, from: Self.b) == nil)
        #expect(admission.admit(3, from: Self.a) == nil)
        admission.receivedFirstBytes(1)
        admission.handshakeCompleted(1)
        admission.receivedFirstBytes(3)
        // The group's slowest, though an older one of it is further.
        let displaced = admission.admit(4, from: Self.a)
        #expect(displaced?.id == 3 && displaced?.limit == .perGroup)
        #expect(admission.admit(5, from: Self.a)?.id == 4)
        admission.handshakeCompleted(5)
        #expect(admission.admit(6, from: Self.a)?.id == 1)
        // The other group, with a silent connection older than all of these, is left alone.
        #expect(admission.admit(7, from: Self.b) == nil)
        #expect(admission.unauthenticatedCount == 4)
    }

    @Test func authenticatedConnectionsAreCountedApartUpToTheirLimit() {
        var admission = admission(authenticated: 2, unauthenticated: 2)
        for id in 1...2 { _ = admission.admit(id, from: Self.a) }
        #expect(admission.authenticate(1, tenant: "p") == .admitted)
        #expect(admission.authenticate(2, tenant: "p") == .admitted)
        #expect(admission.authenticatedCount == 2 && admission.unauthenticatedCount == 0)
        // Their slots are not the unauthenticated ones: two more come in without displacing anyone.
        #expect(admission.admit(3, from: Self.a) == nil)
        #expect(admission.admit(4, from: Self.a) == nil)
        #expect(admission.authenticate(3, tenant: "p") == .full)
        #expect(admission.unauthenticatedCount == 2)
        // An authenticated connection that goes frees its slot.
        admission.remove(1)
        #expect(admission.authenticate(3, tenant: "p") == .admitted)
        // A displaced connection is not authenticated afterwards.
        #expect(admission.admit(5, from: Self.a) == nil)
        #expect(admission.admit(6, from: Self.a)?.id == 4)
        admission.remove(2)
        #expect(admission.authenticate(4, tenant: "p") == .unknown)
    }

    /// One tenant (a project's sender ID) holding its share leaves the rest
    /// to the others: its next login is refused before the server is full,
    /// and another's is taken; one of its own going gives its place back.
    @Test func oneTenantTakesItsShareAndNeverTheLastPlace() {
        var admission = admission(authenticated: 4, perTenant: 2, unauthenticated: 10)
        for id in 1...6 { _ = admission.admit(id, from: Self.a) }
        #expect(admission.authenticate(1, tenant: "greedy") == .admitted)
        #expect(admission.authenticate(2, tenant: "greedy") == .admitted)
        #expect(admission.authenticate(3, tenant: "greedy") == .tenantFull)
        #expect(admission.authenticatedCount(of: "greedy") == 2 && admission.unauthenticatedCount == 4)
        #expect(admission.authenticate(4, tenant: "other") == .admitted)
        #expect(admission.authenticate(5, tenant: "third") == .admitted)
        // The server is full now: a tenant below its share meets the total.
        #expect(admission.authenticate(6, tenant: "other") == .full)
        admission.remove(1)
        #expect(admission.authenticatedCount(of: "greedy") == 1)
        #expect(admission.authenticate(3, tenant: "greedy") == .admitted)
        for id in 1...6 { admission.remove(id) }
        #expect(admission.authenticatedCount == 0 && admission.authenticatedCount(of: "greedy") == 0)
    }

    @Test func removingEveryConnectionLeavesNothingCounted() {
        var admission = admission(unauthenticated: 5, perGroup: 3)
        for id in 1...20 { _ = admission.admit(id, from: id.isMultiple(of: 2) ? Self.a : Self.b) }
        _ = admission.authenticate(20, tenant: "p")
        for id in 1...20 { admission.remove(id) }
        #expect(admission.unauthenticatedCount == 0 && admission.authenticatedCount == 0)
        // And the groups are empty again: the limit per group applies afresh.
        #expect(admission.admit(21, from: Self.a) == nil)
        #expect(admission.admit(22, from: Self.a) == nil)
        #expect(admission.admit(23, from: Self.a) == nil)
    }

    @Test(arguments: [
        ("192.0.2.7", "192.0.2.7", true),
        ("192.0.2.7", "192.0.2.8", false),
        ("2001:db8:0:1::1", "2001:db8:0:1:ffff::2", true),
        ("2001:db8:0:1::1", "2001:db8:0:2::1", false),
        ("::ffff:192.0.2.7", "192.0.2.7", true),
    ])
    func peerAddressGroups(first: String, second: String, same: Bool) throws {
        let one = PeerAddressGroup(try SocketAddress(ipAddress: first, port: 1))
        let other = PeerAddressGroup(try SocketAddress(ipAddress: second, port: 2))
        #expect((one == other) == same)
    }

    @Test func peerAddressGroupsNameThemselves() throws {
        #expect(PeerAddressGroup(try SocketAddress(ipAddress: "192.0.2.7", port: 1)).description == "192.0.2.7")
        #expect(PeerAddressGroup(try SocketAddress(ipAddress: "2001:db8:0:1::1", port: 1)).description == "2001:db8:0:1::/64")
        #expect(PeerAddressGroup(nil).description == "local")
    }
}
