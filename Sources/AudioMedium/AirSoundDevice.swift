import NearbyAir
import NearbyCore

/// nearby-air's acoustic space as a sound device: the device's audio link
/// carries what its speaker plays and what its microphone hears. The link is
/// opened with the first speaker or microphone and kept while the air is
/// there (closing and opening it for every burst would race the air's
/// bookkeeping); what arrives while no microphone is open is dropped, and an
/// idle speaker plays silence. A device this attaches itself stays in the air,
/// as a device with its sound off is still where it is.
public actor AirSoundDevice: SoundDevice {
    private let socketPath: String
    private let device: String
    private let attachAt: Position?
    private var link: AirAudioLink?
    private var attachment: AirClient?
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
        _ = try await open()
        nextMicrophone += 1
        let number = nextMicrophone
        let (blocks, continuation) = AsyncStream.makeStream(of: [Float].self, bufferingPolicy: .bufferingNewest(100))
        microphones[number] = continuation
        return AirMicrophone(blocks: blocks) { await self.closeMicrophone(number) }
    }

    public func openSpeaker() async throws(SoundDeviceError) -> any Speaker {
        AirSpeaker(link: try await open())
    }

    private func open() async throws(SoundDeviceError) -> AirAudioLink {
        if let link { return link }
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
            Task { await self.pump(link) }
            return link
        } catch {
            // The air went away or never was: attach afresh next time.
            attachment?.close()
            attachment = nil
            throw .unavailable(error is AirProtocolError ? "\(error)" : "nearby-air: \(error)")
        }
    }

    /// Hands each block the air sends to every open microphone; when the link
    /// ends (the air went away), the microphones end too.
    private func pump(_ link: AirAudioLink) async {
        for await block in link.captured {
            for microphone in microphones.values { microphone.yield(block) }
        }
        for microphone in microphones.values { microphone.finish() }
        microphones = [:]
        self.link = nil
        attachment?.close()
        attachment = nil
    }

    private func closeMicrophone(_ number: Int) {
        microphones.removeValue(forKey: number)?.finish()
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
    var sampleRate: Int { AirAudioLink.sampleRate }

    init(link: AirAudioLink) { self.link = link }

    func play(_ samples: [Float]) async throws(SoundDeviceError) {
        do {
            try await link.play(samples)
        } catch {
            throw .unavailable("nearby-air: \(error)")
        }
    }

    /// The link stays: an idle speaker in the air is silent.
    func close() async {}
}
