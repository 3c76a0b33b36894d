import NearbyCore

/// The lowest layer of one medium: what broadcasts tokens and hears other
/// devices' tokens. BLE through BlueZ, audio through ALSA, or either through the
/// simulated air; everything above it is the same code.
public protocol MediumBackend: Sendable {
    var medium: Medium { get }

    /// Broadcasts exactly `tokens` from now on (none: stop broadcasting).
    func broadcast(_ tokens: Set<Token>) async

    /// Starts or stops listening.
    func scan(_ enabled: Bool) async

    /// Every token heard, as heard.
    var sightings: AsyncStream<Sighting> { get }

    /// Each change of availability, as it happens (the medium starts unavailable).
    var availabilityChanges: AsyncStream<Bool> { get }

    /// Runs the backend (connecting, reconnecting) until the task is cancelled.
    func run() async
}
