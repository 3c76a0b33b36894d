import NearbyCore

/// The lowest layer of one medium: what broadcasts tokens and hears other
/// devices' tokens. BLE through BlueZ or raw HCI, audio through ALSA, or either
/// through the simulated air; everything above it is the same code.
public protocol MediumBackend: Sendable {
    var medium: Medium { get }

    /// Broadcasts exactly `tokens` from now on (none: stop broadcasting).
    func broadcast(_ tokens: Set<Token>) async

    /// Starts, changes or stops listening.
    func scan(_ mode: ScanMode) async

    /// Every token heard, as heard.
    var sightings: AsyncStream<Sighting> { get }

    /// Each change of the medium's condition, as it happens (a medium starts
    /// `.unavailable`).
    var conditionChanges: AsyncStream<MediumCondition> { get }

    /// Runs the backend (connecting, reconnecting) until the task is cancelled.
    func run() async
}

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

/// The two streams a backend reports through, and their ends to yield into.
/// Sightings keep the newest 1,024 when the daemon falls behind (old
/// hearings are worth less than new ones); conditions the newest 16.
public struct MediumReports: Sendable {
    public let sightings: AsyncStream<Sighting>
    public let conditionChanges: AsyncStream<MediumCondition>
    public let sightingSink: AsyncStream<Sighting>.Continuation
    public let conditionSink: AsyncStream<MediumCondition>.Continuation

    public init() {
        (sightings, sightingSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1024))
        (conditionChanges, conditionSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(16))
    }
}
