import CSystemd

/// Notices the moment a peer leaves the bus (its connection closes or it
/// crashes), through sd-bus's name tracking.
@BusActor
public final class PeerWatch {
    public let name: String
    private var track: OpaquePointer?
    private let onVanish: @BusActor () -> Void

    /// Starts watching the unique or well-known `name`; `onVanish` runs once, when it goes.
    public init(_ connection: BusConnection, name: String,
                onVanish: @escaping @BusActor () -> Void) throws(DBusError) {
        self.name = name
        self.onVanish = onVanish
        var track: OpaquePointer?
        let vanished: sd_bus_track_handler_t = { _, userdata in
            BusActor.assumeIsolated(userdata) { userdata in
                Unmanaged<PeerWatch>.fromOpaque(userdata!).takeUnretainedValue().vanished()
            }
            return 0
        }
        try check(sd_bus_track_new(connection.bus, &track, vanished, Unmanaged.passUnretained(self).toOpaque()),
                  "tracking \(name)")
        self.track = track
        let added = sd_bus_track_add_name(track, name)
        if added < 0 {
            cancel()
            throw .system(added, "tracking \(name)")
        }
    }

    isolated deinit {
        cancel()
    }

    /// Stops watching; `onVanish` will not run.
    public func cancel() {
        if let track { sd_bus_track_unref(track) }
        track = nil
    }

    private func vanished() {
        guard track != nil else { return }
        cancel()
        onVanish()
    }
}
