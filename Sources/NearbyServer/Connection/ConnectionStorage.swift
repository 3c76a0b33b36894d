import Foundation

/// The connection server's part of ``ServerStorage``: application servers'
/// keys, devices' upstream messages until their verdict has been kept long
/// enough to answer a repeat, downstream messages until the device has them,
/// and delivery receipts until an application server acknowledges them.
/// Every method is one transaction.
public protocol ConnectionStorage: Sendable {
    // MARK: Server keys

    /// Replaces the project's server key (the password of its application servers).
    func replaceServerKey(project: String, serverKeyHash: Data, createdAtMs: UInt64) async throws
    /// Whether `serverKeyHash` is the project's server key.
    func isServerKey(_ serverKeyHash: Data, of project: String) async throws -> Bool

    // MARK: Devices, as application servers address them

    /// What an application server's `to` names within `project`.
    func registration(_ device: String, project: String) async throws -> RegistrationState

    // MARK: Upstream

    /// The project's messages without a verdict, oldest first, after `position`.
    func pendingUpstream(project: String, after position: Int64, limit: Int) async throws -> [StoredUpstream]
    /// Claims for `replica`, until `untilMs`, up to `limit` of the project's
    /// messages without a verdict that no replica holds (never claimed,
    /// released, or claimed until `nowMs` at the latest) and whose time has
    /// not run out by `nowMs`, oldest first. A message received without time
    /// (TTL 0) counts as in time for `graceMs` after it was received. Of
    /// replicas claiming at once, each message goes to one.
    func claimUpstream(project: String, replica: String, nowMs: UInt64, untilMs: UInt64, graceMs: UInt64,
                       limit: Int) async throws -> [StoredUpstream]
    /// Gives up to `limit` messages without a verdict whose time ran out by
    /// `nowMs` (TTL 0: `graceMs` after they were received) and that no
    /// replica holds the verdict `verdict` says, soonest expired first;
    /// returns them, settled.
    func settleExpiredUpstream(nowMs: UInt64, graceMs: UInt64, limit: Int,
                               verdict: @Sendable (StoredUpstream) -> UpstreamVerdict) async throws -> [StoredUpstream]
    /// Forgets settled messages whose time ran out before `beforeMs`.
    func purgeSettledUpstream(expiredBeforeMs: UInt64) async throws

    // MARK: Downstream

    /// The device's messages, oldest first.
    func pendingDownstream(device: String) async throws -> [StoredDownstream]
    /// Removes the device's message with this id; returns it.
    func removeDownstream(device: String, messageId: String) async throws -> StoredDownstream?
    /// Removes and returns messages whose time ran out by `nowMs`, oldest first.
    func removeExpiredDownstream(nowMs: UInt64) async throws -> [StoredDownstream]

    // MARK: Receipts

    /// Keeps a message for the project's application servers (a delivery
    /// receipt), dropping the project's oldest beyond `limit`; returns how
    /// many were dropped.
    func addReceipt(_ receipt: StoredReceipt, limit: Int) async throws -> Int
    /// The project's receipts, oldest first, after `position`.
    func receipts(project: String, after position: Int64, limit: Int) async throws -> [StoredReceipt]
    /// Claims for `replica`, until `untilMs`, up to `limit` of the project's
    /// receipts that no replica holds (as ``claimUpstream(project:replica:nowMs:untilMs:graceMs:limit:)``), oldest first.
    func claimReceipts(project: String, replica: String, nowMs: UInt64, untilMs: UInt64, limit: Int) async throws -> [StoredReceipt]
    // MARK: Claims

    /// Gives up every replica's claims: a server alone on its database, at
    /// start, knows that no one holds them any more.
    func releaseAllClaims() async throws

    // MARK: Group commit

    /// Applies `writes` in one transaction and returns each one's outcome,
    /// in the order given: what ``ConnectionWriter`` gathered from the
    /// sessions and channels while the previous batch committed. The writes
    /// apply stage by stage (``ConnectionWrite/stage``), each stage's in
    /// the order given: writes in flight at once do not depend on each
    /// other, except that a claim sees every other write of its batch. A
    /// write that fails (its device or project was deleted meanwhile) fails
    /// alone; the others commit.
    func write(_ writes: [ConnectionWrite]) async throws -> [Result<ConnectionWriteResult, any Error>]
}

/// One write of the connection server's hot path, as a batch holds it.
public enum ConnectionWrite: Sendable {
    /// Keeps a device's upstream message, unless the device sent it before
    /// (then the message as first kept, with its verdict if it has one), or
    /// the device has `limit` messages kept already (pending, or settled and
    /// kept to answer a repeat): ``ConnectionWriteResult/accepted(_:)``.
    case acceptUpstream(StoredUpstream, limit: Int)
    /// Gives the pending message with this id of the project's device (the
    /// oldest, when it sent that id from several apps) its verdict:
    /// ``ConnectionWriteResult/settled(_:)`` with it, or nil when there is none.
    case settleUpstream(project: String, device: String, messageId: String, verdict: UpstreamVerdict, atMs: UInt64)
    /// Removes the project's receipt with this message id:
    /// ``ConnectionWriteResult/removed(_:)``, whether there was one.
    case removeReceipt(project: String, messageId: String)
    /// Keeps a message for its device unless the device already has `limit`
    /// waiting: ``ConnectionWriteResult/added(_:)``, whether it was kept.
    case addDownstream(StoredDownstream, limit: Int)
    /// Gives up `replica`'s claims on these upstream messages and receipts
    /// (by position): ``ConnectionWriteResult/released``.
    case releaseClaims(replica: String, upstream: [Int64], receipts: [Int64])
    /// Extends `replica`'s claims on these upstream messages and receipts (by
    /// position) to `untilMs`; `releasingOthers`, gives up its claims on all
    /// others (a replica holds what its application servers' sessions hold,
    /// no more), which a replica may do only while it has no claim under
    /// way whose messages its sessions have not been given yet:
    /// ``ConnectionWriteResult/released``.
    case renewClaims(replica: String, upstream: [Int64], receipts: [Int64], untilMs: UInt64, releasingOthers: Bool)
    /// Claims up to `limit` of the project's receipts, and, for the room they
    /// leave, messages, as ``ConnectionStorage/claimReceipts(project:replica:nowMs:untilMs:limit:)`` and
    /// ``ConnectionStorage/claimUpstream(project:replica:nowMs:untilMs:graceMs:limit:)``:
    /// ``ConnectionWriteResult/claimed(receipts:upstream:)``.
    case claim(project: String, replica: String, nowMs: UInt64, untilMs: UInt64, graceMs: UInt64, limit: Int)

    /// When the write applies within its batch: devices' messages are kept
    /// and settled first, claims given back, and then claims made, so that
    /// they see all of it.
    public var stage: Int {
        switch self {
        case .acceptUpstream: 0
        case .settleUpstream: 1
        case .removeReceipt: 2
        case .addDownstream: 3
        case .releaseClaims, .renewClaims: 4
        case .claim: 5
        }
    }
}

/// What became of one ``ConnectionWrite``.
public enum ConnectionWriteResult: Sendable, Equatable {
    case accepted(UpstreamAcceptance)
    case settled(StoredUpstream?)
    case removed(Bool)
    case added(Bool)
    case released
    case claimed(receipts: [StoredReceipt], upstream: [StoredUpstream])
}

extension [ConnectionWrite] {
    /// The indices of the writes in the order they apply: by stage, each stage's in the order given.
    var applyingOrder: [Int] {
        indices.sorted { (self[$0].stage, $0) < (self[$1].stage, $1) }
    }
}

/// The writes of the hot path one at a time, each its own transaction: for
/// tests, the CLI, and the rare writes that need not wait for a batch.
extension ConnectionStorage {
    /// Applies one write in a transaction of its own.
    func writeAlone(_ write: ConnectionWrite) async throws -> ConnectionWriteResult {
        guard let result = try await self.write([write]).first else { throw GroupCommitMismatch() }
        return try result.get()
    }

    /// ``ConnectionWrite/acceptUpstream(_:limit:)`` alone.
    public func acceptUpstream(_ message: StoredUpstream, limit: Int) async throws -> UpstreamAcceptance {
        guard case .accepted(let acceptance) = try await writeAlone(.acceptUpstream(message, limit: limit)) else {
            throw GroupCommitMismatch()
        }
        return acceptance
    }

    /// ``ConnectionWrite/settleUpstream(project:device:messageId:verdict:atMs:)`` alone.
    public func settleUpstream(project: String, device: String, messageId: String, verdict: UpstreamVerdict,
                               atMs: UInt64) async throws -> StoredUpstream? {
        let write = ConnectionWrite.settleUpstream(project: project, device: device, messageId: messageId, verdict: verdict, atMs: atMs)
        guard case .settled(let message) = try await writeAlone(write) else { throw GroupCommitMismatch() }
        return message
    }

    /// ``ConnectionWrite/removeReceipt(project:messageId:)`` alone.
    public func removeReceipt(project: String, messageId: String) async throws -> Bool {
        guard case .removed(let removed) = try await writeAlone(.removeReceipt(project: project, messageId: messageId)) else {
            throw GroupCommitMismatch()
        }
        return removed
    }

    /// ``ConnectionWrite/addDownstream(_:limit:)`` alone.
    public func addDownstream(_ message: StoredDownstream, limit: Int) async throws -> Bool {
        guard case .added(let added) = try await writeAlone(.addDownstream(message, limit: limit)) else {
            throw GroupCommitMismatch()
        }
        return added
    }

    /// ``ConnectionWrite/renewClaims(replica:upstream:receipts:untilMs:releasingOthers:)`` alone.
    public func renewClaims(replica: String, upstream: [Int64], receipts: [Int64], untilMs: UInt64,
                            releasingOthers: Bool = true) async throws {
        _ = try await writeAlone(.renewClaims(replica: replica, upstream: upstream, receipts: receipts, untilMs: untilMs,
                                              releasingOthers: releasingOthers))
    }

    /// ``ConnectionWrite/releaseClaims(replica:upstream:receipts:)`` alone.
    public func releaseClaims(replica: String, upstream: [Int64], receipts: [Int64]) async throws {
        _ = try await writeAlone(.releaseClaims(replica: replica, upstream: upstream, receipts: receipts))
    }
}

/// What became of a device's upstream message offered to storage.
public enum UpstreamAcceptance: Sendable, Equatable {
    /// Kept, for the first time.
    case kept
    /// Sent before: the message as first kept, with its verdict if it has one.
    case known(StoredUpstream)
    /// Not kept: the device has this many messages kept already.
    case full(Int)
}

/// A registration id (a device id) as one project's application server sees it.
public enum RegistrationState: Sendable, Equatable {
    case registered
    /// The device was of this project and has been deleted.
    case unregistered
    /// Never a device of this project.
    case unknown
}

/// How an upstream message ended.
public enum UpstreamVerdict: Sendable, Equatable {
    /// An application server acknowledged it.
    case sent
    /// It will not be delivered: a CCS error code and why.
    case failed(error: String, description: String)
}

/// A device's upstream message as the server keeps it.
public struct StoredUpstream: Sendable, Equatable {
    /// Order of arrival (0 until stored).
    public var position: Int64
    public var project: String
    public var device: String
    public var app: String
    public var messageId: String
    public var data: [String: String]
    public var receivedAtMs: UInt64
    public var expiresAtMs: UInt64
    public var verdict: UpstreamVerdict?

    public init(position: Int64 = 0, project: String, device: String, app: String, messageId: String, data: [String: String],
                receivedAtMs: UInt64, expiresAtMs: UInt64, verdict: UpstreamVerdict? = nil) {
        self.position = position
        self.project = project
        self.device = device
        self.app = app
        self.messageId = messageId
        self.data = data
        self.receivedAtMs = receivedAtMs
        self.expiresAtMs = expiresAtMs
        self.verdict = verdict
    }
}

/// An application server's message for a device, until the device acknowledges it.
public struct StoredDownstream: Sendable, Equatable {
    public var project: String
    public var device: String
    public var messageId: String
    public var data: [String: String]
    public var receivedAtMs: UInt64
    /// 0 with `receivedAtMs`: TTL 0, now or never.
    public var expiresAtMs: UInt64
    public var receiptRequested: Bool

    public init(project: String, device: String, messageId: String, data: [String: String], receivedAtMs: UInt64,
                expiresAtMs: UInt64, receiptRequested: Bool) {
        self.project = project
        self.device = device
        self.messageId = messageId
        self.data = data
        self.receivedAtMs = receivedAtMs
        self.expiresAtMs = expiresAtMs
        self.receiptRequested = receiptRequested
    }
}

/// A message of the connection server itself for a project's application
/// servers (a delivery receipt), kept until one acknowledges it.
public struct StoredReceipt: Sendable, Equatable {
    public var position: Int64
    public var project: String
    /// `dr2:` and the original message id.
    public var messageId: String
    /// The `<gcm>` JSON to send.
    public var payload: String

    public init(position: Int64 = 0, project: String, messageId: String, payload: String) {
        self.position = position
        self.project = project
        self.messageId = messageId
        self.payload = payload
    }
}
