import Foundation

/// Devices that authenticated, by the SHA-256 of their secret, so that a
/// device's requests after its first cost no database read.
///
/// Whatever deletes a device from storage removes it here after that. A
/// lookup that missed reads storage and then inserts what it found, which
/// must not put back a device removed in between: every removal moves the
/// generation on, and an insert read at an older generation is dropped.
struct DeviceCache {
    private var bySecretHash: [Data: DeviceRecord] = [:]
    /// Secret hashes by project and device id, for removals.
    private var byProject: [String: [String: Data]] = [:]
    private(set) var generation: UInt64 = 0
    /// When each device's last-seen time was last written, so that it is
    /// written at most once per ``NearbyService/lastSeenResolutionMs``.
    private var seenWrittenAtMs: [String: UInt64] = [:]

    func device(secretHash: Data) -> DeviceRecord? {
        bySecretHash[secretHash]
    }

    /// Keeps `record`, read from storage when the cache was at `generation`,
    /// unless a device was removed since.
    mutating func insert(_ record: DeviceRecord, secretHash: Data, readAt generation: UInt64) {
        guard generation == self.generation else { return }
        bySecretHash[secretHash] = record
        byProject[record.project, default: [:]][record.id] = secretHash
    }

    mutating func remove(_ device: DeviceRecord) {
        remove(id: device.id, project: device.project)
    }

    mutating func remove(id: String, project: String) {
        generation += 1
        seenWrittenAtMs[id] = nil
        guard let secretHash = byProject[project]?.removeValue(forKey: id) else { return }
        bySecretHash[secretHash] = nil
        if byProject[project]?.isEmpty == true { byProject[project] = nil }
    }

    /// Whether the device's last-seen time is due to be written at `nowMs`
    /// (it was not within `resolutionMs`); if so it counts as written.
    mutating func seenWriteIsDue(_ id: String, nowMs: UInt64, resolutionMs: UInt64) -> Bool {
        if let written = seenWrittenAtMs[id], written + resolutionMs > nowMs { return false }
        seenWrittenAtMs[id] = nowMs
        return true
    }

    /// Removes the devices of `projects` except those in `keeping`; returns
    /// the ids removed.
    mutating func remove(projects: Set<String>, keeping: Set<String>) -> Set<String> {
        generation += 1
        var removed = Set<String>()
        for project in projects {
            guard var devices = byProject[project] else { continue }
            for (id, secretHash) in devices where !keeping.contains(id) {
                bySecretHash[secretHash] = nil
                seenWrittenAtMs[id] = nil
                devices[id] = nil
                removed.insert(id)
            }
            byProject[project] = devices.isEmpty ? nil : devices
        }
        return removed
    }
}
