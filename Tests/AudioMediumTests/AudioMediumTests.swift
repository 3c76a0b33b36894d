import AudioMedium
import Logging
import Mediums
import NearbyCore
import Synchronization
import Testing

/// A sound device whose speaker feeds its microphone, and whose access can be
/// refused or taken away: the lowest layer, so the medium above is the real one.
private final class LoopbackDevice: SoundDevice {
    enum Access { case granted, refused, missing }

    private struct State {
        var access = Access.granted
        var microphones: [AsyncStream<[Float]>.Continuation] = []
        var played = 0
        var openSpeakers = 0
        var openMicrophones = 0
    }

    private let state = Mutex(State())

    var played: Int { state.withLock { $0.played } }
    var openMicrophones: Int { state.withLock { $0.openMicrophones } }
    var openSpeakers: Int { state.withLock { $0.openSpeakers } }

    func set(_ access: Access) { state.withLock { $0.access = access } }

    private func check() throws(SoundDeviceError) {
        switch state.withLock({ $0.access }) {
        case .granted: return
        case .refused: throw .refused("permission denied")
        case .missing: throw .unavailable("no such device")
        }
    }

    func openMicrophone() async throws(SoundDeviceError) -> any Microphone {
        try check()
        let (blocks, continuation) = AsyncStream.makeStream(of: [Float].self)
        state.withLock {
            $0.microphones.append(continuation)
            $0.openMicrophones += 1
        }
        return Loopback(blocks: blocks) { [self] in self.state.withLock { $0.openMicrophones -= 1 } }
    }

    func openSpeaker() async throws(SoundDeviceError) -> any Speaker {
        try check()
        state.withLock { $0.openSpeakers += 1 }
        return Loopback(blocks: AsyncStream { $0.finish() }, onClose: { [self] in self.state.withLock { $0.openSpeakers -= 1 } },
                        onPlay: { [self] samples in
                            // Heard with a little silence around it, as a microphone would.
                            let heard = [Float](repeating: 0, count: 9_600) + samples.map { $0 * 0.1 } + [Float](repeating: 0, count: 19_200)
                            self.state.withLock { state in
                                state.played += 1
                                for microphone in state.microphones { microphone.yield(heard) }
                            }
                        })
    }

    private final class Loopback: Microphone, Speaker {
        let blocks: AsyncStream<[Float]>
        let onClose: @Sendable () -> Void
        let onPlay: @Sendable ([Float]) -> Void
        var sampleRate: Int { 48_000 }
        var failure: SoundDeviceError? { nil }

        init(blocks: AsyncStream<[Float]>, onClose: @escaping @Sendable () -> Void,
             onPlay: @escaping @Sendable ([Float]) -> Void = { _ in }) {
            self.blocks = blocks
            self.onClose = onClose
            self.onPlay = onPlay
        }

        func play(_ samples: [Float]) async throws(SoundDeviceError) { onPlay(samples) }
        func close() async { onClose() }
    }
}

@Suite struct AudioMediumTests {
    private let token = Token(hex: "00112233445566ff")!

    private func start(_ device: LoopbackDevice, clock: any WallClock = SystemWallClock()) -> (AudioMedium, Task<Void, Never>) {
        let medium = AudioMedium(device: device, settings: .init(interval: .milliseconds(500)), logger: Logger(label: "test"),
                                 clock: clock)
        return (medium, Task { await medium.run() })
    }

    @Test func whatItBroadcastsIsHeardWithItsLevelAsDistance() async throws {
        let device = LoopbackDevice()
        let clock = ManualWallClock(nowMs: 1_700_000_000_000)
        let (medium, task) = start(device, clock: clock)
        defer { task.cancel() }
        var conditions = medium.conditionChanges.makeAsyncIterator()
        #expect(await conditions.next() == .ready)
        await medium.scan(.full)
        await medium.broadcast([token])
        var sightings = medium.sightings.makeAsyncIterator()
        let sighting = try #require(await sightings.next())
        #expect(sighting.token == token && sighting.medium == .audio)
        // Played at −6 dBFS and heard at a tenth (−20 dB): 10 m by the 20·log10(d) law.
        #expect(sighting.rssi == -26 && sighting.txPower == -6)
        #expect(abs(sighting.distanceMeters - 10) < 1.5)
        // Timed by the medium's clock, the daemon's.
        #expect(sighting.seenAtMilliseconds == 1_700_000_000_000)
    }

    @Test func theSpeakerAndMicrophoneAreOpenOnlyWhileNeeded() async throws {
        let device = LoopbackDevice()
        let (medium, task) = start(device)
        defer { task.cancel() }
        var conditions = medium.conditionChanges.makeAsyncIterator()
        #expect(await conditions.next() == .ready)
        #expect(device.openMicrophones == 0 && device.openSpeakers == 0)
        await medium.scan(.lowPower)
        await medium.broadcast([token])
        try await until { device.openMicrophones == 1 && device.openSpeakers == 1 }
        await medium.scan(.off)
        await medium.broadcast([])
        try await until { device.openMicrophones == 0 && device.openSpeakers == 0 }
    }

    @Test func aRefusedDeviceIsRefusedUntilItIsGranted() async throws {
        let device = LoopbackDevice()
        device.set(.refused)
        let (medium, task) = start(device)
        defer { task.cancel() }
        var conditions = medium.conditionChanges.makeAsyncIterator()
        #expect(await conditions.next() == .refused)
        device.set(.granted)
        #expect(await conditions.next() == .ready)
    }

    @Test func aMissingDeviceIsUnavailable() async throws {
        let device = LoopbackDevice()
        device.set(.missing)
        let (medium, task) = start(device)
        defer { task.cancel() }
        await medium.scan(.full)
        device.set(.granted)
        var conditions = medium.conditionChanges.makeAsyncIterator()
        #expect(await conditions.next() == .ready)
        try await until { device.openMicrophones == 1 }
    }

    /// Polls `condition` every 10 ms for up to 10 s.
    private func until(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            guard ContinuousClock.now < deadline else { Issue.record("timed out"); return }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}
