/// How hard a medium listens.
public enum ScanMode: Int, Sendable, Comparable, CustomStringConvertible {
    case off
    /// Passive listening that may hear less, later, for less power: what
    /// background and low-power strategies ask for. A backend without such a
    /// mode listens fully.
    case lowPower
    case full

    public static func < (lhs: ScanMode, rhs: ScanMode) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String {
        switch self {
        case .off: "off"
        case .lowPower: "low-power"
        case .full: "full"
        }
    }
}
