import DBus
import NearbyCore
import ServerAPI
import Upstream

// What ``UpstreamService`` needs of the managers, the direct channels and the
// outbox, and no more: the daemon gives it its bus objects, ``DirectChannel``s
// and ``Outbox``; the unit tests give it stand-ins, a manual clock, and no bus.

/// A one-shot timer ``UpstreamService`` arms for the next TTL and for the
/// verdicts' retention: a ``BusTimer`` in the daemon, one the unit tests fire
/// by hand as they move their clock.
@BusActor
protocol UpstreamTimer: AnyObject {
    /// The action will not run.
    func cancel()
}

/// Arms a timer: the action runs once, after the delay, unless cancelled first.
typealias ArmUpstreamTimer = @BusActor (Duration, @escaping @BusActor () -> Void) -> any UpstreamTimer

extension BusTimer: UpstreamTimer {}

/// A manager as ``UpstreamService`` sees it: whose it is, whether it wants its
/// account's direct channel, and the signals its owner hears (``ManagerObject``
/// on the bus).
@BusActor
protocol UpstreamManager {
    /// The user's registration under the manager's API key: whose channel and outbox rows.
    var account: Account { get }
    /// The app the manager belongs to: whose messages it is told of.
    var appID: String { get }
    /// `DirectChannel`: the app wants its account's channel.
    var directChannel: Bool { get }
    /// `Background`: a wish for the channel waits while it is true.
    var background: Bool { get }
    /// `SendSucceeded` or `SendFailed` to the owner.
    func emitVerdict(_ messageID: String, _ verdict: Outbox.Verdict)
    /// `MessageReceived` to the owner.
    func emitMessageReceived(_ message: ChannelDownstream)
    /// The account's channel opened or closed (`DirectChannelConnected`).
    func directChannelConnectedChanged()
}

/// The direct channel of one ``Account`` as ``UpstreamService`` drives it
/// (``DirectChannel`` on the network). A class: the service tells its
/// channels apart by identity, and their callbacks hold them weakly.
@BusActor
protocol UpstreamChannel: AnyObject {
    var account: Account { get }
    /// Connecting (or connected) while true; setting it false closes the channel at once.
    var wanted: Bool { get set }
    /// Open: what ``send(_:)`` is given now is written.
    var isOpen: Bool { get }
    /// Hears each time the channel opens or closes, on the bus actor, in order.
    var onOpenChanged: (Bool) -> Void { get set }
    /// Hears what the server writes while the channel is open, in order.
    var onEvent: (ChannelEvent) -> Void { get set }
    /// Writes `request` if the channel is open; otherwise it is dropped.
    func send(_ request: ChannelRequest)
}

/// The durable outbox as ``UpstreamService`` uses it (``Outbox``, SQLite).
/// Sendable with async methods: the store does its work off the bus actor,
/// behind its own queue, and the service waits for it without blocking the
/// bus thread.
protocol OutboxStore: Sendable {
    /// Keeps `entry` until it is settled; throws an ``Outbox/Refusal`` (or
    /// the disk's error) when it is not taken.
    func add(_ entry: Outbox.Entry) async throws
    /// Gives a pending message its verdict and returns it; nil when it is not
    /// pending. `told`: removed at once instead of kept for its app.
    func settle(_ account: Account, appID: String, messageID: String, _ verdict: Outbox.Verdict, nowMs: UInt64,
                told: Bool) async throws -> Outbox.Entry?
    /// Keeps a settled message taken out for its app after all.
    func keep(_ entry: Outbox.Entry, nowMs: UInt64) async throws
    /// Fails and returns the pending messages whose TTL has run out, outside the accounts in `sparing`.
    func failExpired(nowMs: UInt64, sparing: Set<Account>) async throws -> [Outbox.Entry]
    /// Takes out and returns an app's settled messages: its app is being told.
    func takeSettled(_ account: Account, appID: String) async throws -> [Outbox.Entry]
    /// Removes the verdicts no app came back for within the retention; returns how many.
    func dropUntold(nowMs: UInt64) async throws -> Int
    /// The pending messages of every app of `account`, in the order they were accepted.
    func pending(_ account: Account) async throws -> [Outbox.Entry]
    /// Every message whose app has not been told how it ended.
    func all() async throws -> [Outbox.Entry]
    /// When the next TTL runs out, outside the accounts in `sparing`.
    func nextExpiryMs(sparing: Set<Account>) async throws -> UInt64?
}

extension Outbox: OutboxStore {}

extension DirectChannel: UpstreamChannel {}
