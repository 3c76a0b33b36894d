import AudioModem
import Foundation
import Logging
import Mediums
import NearbyCore

/// The audio medium: tokens as near-ultrasonic bursts (``TokenModulator``)
/// out of a speaker, and heard by demodulating the microphone without pause
/// (``TokenDemodulator``).
///
/// The speaker plays each token being broadcast in turn, one burst at a time,
/// with the gap between burst starts drawn uniformly from 0.5 to 1.5 times
/// `interval`: two devices whose bursts collide once are unlikely to collide
/// again. The microphone is open only while the daemon listens, the speaker
/// only while it broadcasts. The medium is ready when both can be opened;
/// a refusal (permissions) is `.refused`, what MicrophonePermissionError reports.
public actor AudioMedium: MediumBackend {
    public struct Settings: Sendable {
        /// Peak level of a burst, dBFS (0: full scale).
        public var volume: Double
        /// The level a burst at `volume` is heard at from one metre, dBFS: the
        /// audio counterpart of BLE's tx power, for distance estimates.
        public var referenceLevel: Double
        /// Mean time between the starts of two bursts.
        public var interval: Duration
        /// The demodulator's detection threshold.
        public var threshold: Double

        public init(volume: Double = -6, referenceLevel: Double = -6, interval: Duration = .seconds(2),
                    threshold: Double = TokenDemodulator.defaultThreshold) {
            self.volume = volume
            self.referenceLevel = referenceLevel
            self.interval = interval
            self.threshold = threshold
        }
    }

    public nonisolated let medium = Medium.audio
    public nonisolated var sightings: AsyncStream<Sighting> { reports.sightings }
    public nonisolated var conditionChanges: AsyncStream<MediumCondition> { reports.conditionChanges }
    private let reports = MediumReports()
    private let device: any SoundDevice
    private let settings: Settings
    private let logger: Logger

    private var tokens: [Token] = []
    private var listening = false
    /// The broadcaster and the listener, numbered so that one that ends after
    /// being replaced does not clear its successor.
    private var speaking: (number: Int, task: Task<Void, Never>)?
    private var hearing: (number: Int, task: Task<Void, Never>)?
    private var started = 0
    private var condition = MediumCondition.unavailable
    /// Wakes run() to check the device again after a failure.
    private var failures: AsyncStream<Void>.Continuation?
    /// Each token's burst at the speaker's rate, made once.
    private var waveforms: [Token: (sampleRate: Int, samples: [Float])] = [:]

    /// `clock` times the sightings.
    public init(device: any SoundDevice, settings: Settings = Settings(), logger: Logger, clock: any WallClock = SystemWallClock()) {
        self.device = device
        self.settings = settings
        self.logger = logger
        self.clock = clock
    }

    private let clock: any WallClock

    public func broadcast(_ tokens: Set<Token>) async {
        self.tokens = tokens.sorted { $0.hex < $1.hex }
        waveforms = waveforms.filter { tokens.contains($0.key) }
        if tokens.isEmpty {
            speaking?.task.cancel()
            speaking = nil
        } else {
            startSpeaking()
        }
    }

    /// Sound has one way of listening: low-power is full.
    public func scan(_ mode: ScanMode) async {
        listening = mode != .off
        if !listening {
            hearing?.task.cancel()
            hearing = nil
        } else {
            startHearing()
        }
    }

    private func startSpeaking() {
        guard speaking == nil, condition == .ready, !tokens.isEmpty else { return }
        started += 1
        let number = started
        speaking = (number, Task { await self.speak(number) })
    }

    private func startHearing() {
        guard hearing == nil, condition == .ready, listening else { return }
        started += 1
        let number = started
        hearing = (number, Task { await self.hear(number) })
    }

    /// Checks that the speaker and the microphone open; while they do not, checks
    /// again with a growing delay (0.5 s to 30 s). Once they do, the broadcaster
    /// and listener run as asked, and a failure of either starts the checks again.
    public func run() async {
        let (wakeups, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        failures = continuation
        var delay = Duration.milliseconds(500)
        while !Task.isCancelled {
            let found = await probe()
            set(found)
            if found == .ready {
                delay = .milliseconds(500)
                startSpeaking()
                startHearing()
                for await _ in wakeups { break }
            } else {
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(30))
            }
        }
        speaking?.task.cancel()
        hearing?.task.cancel()
    }

    private func probe() async -> MediumCondition {
        do {
            let microphone = try await device.openMicrophone()
            await microphone.close()
            let speaker = try await device.openSpeaker()
            await speaker.close()
            return .ready
        } catch .refused(let reason) {
            logger.warning("the sound device refuses nearbyd: \(reason)")
            return .refused
        } catch {
            logger.debug("the sound device cannot be used: \(error)")
            return .unavailable
        }
    }

    private func set(_ condition: MediumCondition) {
        guard condition != self.condition else { return }
        self.condition = condition
        reports.conditionSink.yield(condition)
    }

    private func failed(_ error: SoundDeviceError, _ what: String) {
        logger.warning("\(what) failed: \(error)")
        set(error.isRefusal ? .refused : .unavailable)
        failures?.yield()
    }

    /// Plays bursts until cancelled or the speaker fails.
    private func speak(_ number: Int) async {
        defer { if speaking?.number == number { speaking = nil } }
        let speaker: any Speaker
        do {
            speaker = try await device.openSpeaker()
        } catch {
            failed(error, "opening the speaker")
            return
        }
        var next = 0
        while !Task.isCancelled, !tokens.isEmpty {
            let token = tokens[next % tokens.count]
            next += 1
            do {
                try await speaker.play(waveform(for: token, sampleRate: speaker.sampleRate))
            } catch {
                failed(error, "playing")
                break
            }
            let gap = settings.interval * Double.random(in: 0.5...1.5)
            try? await Task.sleep(for: gap)
        }
        await speaker.close()
    }

    private func waveform(for token: Token, sampleRate: Int) -> [Float] {
        if let cached = waveforms[token], cached.sampleRate == sampleRate { return cached.samples }
        let gain = Float(pow(10, settings.volume / 20))
        let samples = TokenModulator(sampleRate: Double(sampleRate)).waveform(for: token).map { $0 * gain }
        waveforms[token] = (sampleRate, samples)
        return samples
    }

    /// Listens until cancelled or the microphone fails.
    private func hear(_ number: Int) async {
        defer { if hearing?.number == number { hearing = nil } }
        let microphone: any Microphone
        do {
            microphone = try await device.openMicrophone()
        } catch {
            failed(error, "opening the microphone")
            return
        }
        let failure = await Self.demodulate(microphone, settings: settings, clock: clock, into: reports.sightingSink)
        if let failure, !Task.isCancelled { failed(failure, "capturing") }
    }

    /// Runs the demodulator over what the microphone hears, off the actor:
    /// the signal processing must not hold up the daemon's requests.
    private static func demodulate(_ microphone: any Microphone, settings: Settings, clock: any WallClock,
                                   into sightings: AsyncStream<Sighting>.Continuation) async -> SoundDeviceError? {
        var demodulator = TokenDemodulator(sampleRate: microphone.sampleRate, threshold: settings.threshold)
        for await block in microphone.blocks {
            if Task.isCancelled { break }
            for heard in demodulator.process(block) {
                // The level stands in for RSSI and the reference level for tx power:
                // both follow the same 20·log10(distance) law.
                sightings.yield(Sighting(token: heard.token, medium: .audio, rssi: Int(heard.level.rounded()),
                                         txPower: Int(settings.referenceLevel.rounded()),
                                         seenAtMilliseconds: clock.nowMs))
            }
        }
        let failure = microphone.failure
        await microphone.close()
        return failure
    }
}

extension SoundDeviceError {
    var isRefusal: Bool {
        if case .refused = self { return true }
        return false
    }
}
