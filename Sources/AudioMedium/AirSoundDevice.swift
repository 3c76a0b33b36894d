import NearbyAir
import NearbyCore

/// nearby-air's acoustic space as a sound device: the device's audio link
/// carries what its speaker plays and what its microphone hears. One link
/// serves both, opened while either is and closed with the last of them.
public actor AirSoundDevice: SoundDevice {
    private let socketPath: String
    private let device: String
    private let attachAt: Position?
    private var link: AirAudioLink?
    private var attachment: AirClient?
    private var users = 0
    /// Counts links, so that closing a speaker or microphone of a link that
    /// already ended does not touch its successor.
    private var generation = 0
    private var microphones: [Int: AsyncStream<[Float]>.Continuation] = [:]
    private var nextMicrophone = 0

    /// - Parameter attachAt: where to attach the device first; nil when another
    ///   medium of the daemon (BLE in the air) attaches it.
    public init(socketPath: String, device: String, attachAt: Position?) {
        self.socketPath = socketPath
        self.device = device
        self.attachAt = attachAt
    }

    public func openMicrophone() async throws(SoundDeviceError) -> any Microphone {
        let (_, generation) = try await open()
        nextMicrophone += 1
        let number = nextMicrophone
        let (blocks, continuation) = AsyncStream.makeStream(of: [Float].self, bufferingPolicy: .bufferingNewest(100))
        microphones[number] = continuation
        return AirMicrophone(blocks: blocks) { await self.closeMicrophone(number, of: generation) }
    }

    public func openSpeaker() async throws(SoundDeviceError) -> any Speaker {
        let (link, generation) = try await open()
        return AirSpeaker(link: link) { await self.release(generation) }
    }

    private func open() async throws(SoundDeviceError) -> (AirAudioLink, generation: Int) {
        if let link {
            users += 1
            return (link, generation)
        }
        do {
            if let attachAt, attachment == nil {
                let client = try await AirClient(socketPath: socketPath)
                do {
                    try await client.request(.attach(device: device, position: attachAt))
                } catch {
                    client.close()
                    throw error
                }
                attachment = client
            }
            let link = try await AirAudioLink(socketPath: socketPath, device: device)
            self.link = link
            users = 1
            generation += 1
            Task { await self.pump(link) }
            return (link, generation)
        } catch {
            attachment?.close()
            attachment = nil
            throw .unavailable("nearby-air: \(error)")
        }
    }

    /// Hands each block the air sends to every open microphone; when the link
    /// ends (the air went away), the microphones end too.
    private func pump(_ link: AirAudioLink) async {
        for await block in link.captured {
            for microphone in microphones.values { microphone.yield(block) }
        }
        guard self.link === link else { return }
        for microphone in microphones.values { microphone.finish() }
        microphones = [:]
        users = 0
        generation += 1
        link.close()
        self.link = nil
        attachment?.close()
        attachment = nil
    }

    private func closeMicrophone(_ number: Int, of generation: Int) {
        microphones.removeValue(forKey: number)?.finish()
        release(generation)
    }

    private func release(_ generation: Int) {
        guard generation == self.generation, link != nil else { return }
        users -= 1
        guard users == 0 else { return }
        link?.close()
        link = nil
        attachment?.close()
        attachment = nil
    }
}

private final class AirMicrophone: Microphone {
    let blocks: AsyncStream<[Float]>
    let closing: @Sendable () async -> Void
    var sampleRate: Int { AirAudioLink.sampleRate }
    /// The blocks end before `close` only when the air goes away.
    var failure: SoundDeviceError? { .unavailable("the connection to nearby-air closed") }

    init(blocks: AsyncStream<[Float]>, closing: @escaping @Sendable () async -> Void) {
        self.blocks = blocks
        self.closing = closing
    }

    func close() async { await closing() }
}

private final class AirSpeaker: Speaker {
    let link: AirAudioLink
    let closing: @Sendable () async -> Void
    var sampleRate: Int { AirAudioLink.sampleRate }

    init(link: AirAudioLink, closing: @escaping @Sendable () async -> Void) {
        self.link = link
        self.closing = closing
    }

    func play(_ samples: [Float]) async throws(SoundDeviceError) {
        do {
            try await link.play(samples)
        } catch {
            throw .unavailable("nearby-air: \(error)")
        }
    }

    func close() async { await closing() }
}
