@_spi(Testing) import DaemonCore
import NearbyCore

/// A ``RunTable`` with its objects' runs kept by id, as the core keeps them
/// in its objects: the table's tests speak of objects by name.
struct RunsByID {
    var table = RunTable()
    private(set) var runs: [String: Run] = [:]

    @discardableResult
    mutating func set(_ id: String, to run: Run?) -> RunChange {
        var slot = runs[id]
        defer { runs[id] = slot }
        return table.set(&slot, to: run)
    }

    @discardableResult
    mutating func reconcile(_ id: String, _ request: RunRequest, permitted: Bool, background: Bool) -> Transition {
        var slot = runs[id]
        defer { runs[id] = slot }
        return table.reconcile(&slot, request, permitted: permitted, background: background)
    }

    @discardableResult
    mutating func end(_ id: String) -> Transition {
        var slot = runs[id]
        defer { runs[id] = slot }
        return table.end(&slot)
    }

    subscript(id: String) -> Run? { runs[id] }
    func nearby(_ id: String) -> Placement? { runs[id]?.nearby }
    func beaconsRun(_ id: String) -> Bool { runs[id]?.beacons ?? false }
    func usage(of account: Account, on medium: Medium) -> LinkUsage { table.usage(of: account, on: medium) }
    func scans(_ account: Account, on medium: Medium) -> Bool { table.scans(account, on: medium) }
    func mediums(usedBy manager: ObjectIdentifier) -> Set<Medium> { table.mediums(usedBy: manager) }
    var totals: RunTable.Totals { table.totals }
    /// The totals worked out afresh from every object's run.
    func recomputed() -> RunTable.Totals { RunTable.recomputed(from: runs.values) }
}
