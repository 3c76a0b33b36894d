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
