import Partitions
import Synchronization

/// Which replica serves each partition, as this replica's last round of
/// leases saw it: read on every request for a device, so without an actor
/// hop; written once a round.
final class PartitionDirectory: Sendable {
    let replica: String
    private let owners = Mutex<[Member?]>(Array(repeating: nil, count: Partition.count))

    init(replica: String) {
        self.replica = replica
    }

    func update(_ owners: [Member?]) {
        self.owners.withLock { $0 = owners }
    }

    /// The other replica that serves `device`; nil when this one does: it
    /// owns the device's partition, or nobody does now (a replica died and
    /// its leases have not run out), when this one serves rather than turns
    /// the device away.
    func elsewhere(device: some StringProtocol) -> Member? {
        let partition = Partition.of(device: String(device))
        guard let owner = owners.withLock({ $0[partition] }), owner.id != replica else { return nil }
        return owner
    }
}
