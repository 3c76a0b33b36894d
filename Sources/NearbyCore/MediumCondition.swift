/// Whether a medium can be used now, and if not, whose move it is.
public enum MediumCondition: Sendable, Equatable, CustomStringConvertible {
    case ready
    /// The hardware is off, blocked or absent (for BLE: the adapter is not
    /// powered, rfkill-blocked, missing, or bluetoothd is not running; with the
    /// simulator: nearby-air cannot be reached). The user can fix it.
    case unavailable
    /// The system refuses the daemon (BlueZ or the bus policy deny it access).
    case refused

    public var description: String {
        switch self {
        case .ready: "ready"
        case .unavailable: "unavailable"
        case .refused: "refused"
        }
    }
}
