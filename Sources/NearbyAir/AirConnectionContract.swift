import NIOCore
import NIOExtras
import NearbyCore

/// What nearby-air promises about any bytes a connection may bring: checked
/// on every input by the air-fuzz harness (Sources/AirFuzz), which reaches it
/// through this SPI.
///
/// - The air's framing (``AirFrameDecoder``: lines, then sample frames after
///   an `audio` first line) reads the same frames however the bytes are cut
///   into reads, refuses the same way, and never holds more than one line
///   (``AirFrameDecoder/maximumLineBytes``) or one frame (1 s of samples).
/// - The clients' framing (``LineFraming``) holds no more than its limit.
/// - A line is a request the air takes within its rules (names, payloads,
///   powers, finite positions) and that reads back from its own encoding, or
///   a named refusal; read as the air's own line (as clients read them), the
///   same.
/// - The space those requests and sample frames drive never hears a
///   broadcast stronger than it was sent at 1 cm, and its microphones hear
///   finite samples.
@_spi(Testing) public enum AirConnectionContract {
    /// The device a control connection attaches, and the one an audio link opens.
    static let peer = "peer"

    /// Checks one connection that brings `reads`, one after another.
    public static func check(reads: [[UInt8]]) {
        let cut = frames(of: reads)
        let whole = frames(of: [Array(reads.joined())])
        let common = min(cut.frames.count, whole.frames.count)
        expect(cut.frames.prefix(common) == whole.frames.prefix(common), "frames differ with the cut", reads)
        switch (cut.error, whole.error) {
        case (nil, nil):
            expect(cut.frames.count == whole.frames.count, "frames differ with the cut", reads)
        case (_?, _?):
            break
        case (let error?, nil), (nil, let error?):
            expect(false, "an error (\(error)) in one cut only", reads)
        }
        checkLineFraming(reads, air: cut.frames)
        var space = Space()
        for frame in cut.frames { space.take(frame, reads) }
    }

    // MARK: Framing

    /// A frame as compared across cuts.
    struct Frame: Equatable {
        enum Kind { case line, samplesFollow, samples }
        let kind: Kind
        let bytes: [UInt8]
    }

    /// The frames the air's decoder reads from `reads`, and the error that ended them.
    private static func frames(of reads: [[UInt8]]) -> (frames: [Frame], error: AirProtocolError?) {
        var decoder = AirFrameDecoder(samplesFollowFirstLine: AirFraming.opensAudioLink)
        var buffer = ByteBuffer()
        var frames: [Frame] = []
        let held = max(AirFrameDecoder.maximumLineBytes, 4 + 4 * AirAudio.maximumFrameSamples)
        for read in reads {
            buffer.writeBytes(read)
            do {
                while let frame = try decoder.next(from: &buffer) {
                    switch frame {
                    case .line(let line): frames.append(Frame(kind: .line, bytes: Array(buffer: line)))
                    case .samplesFollow(let line): frames.append(Frame(kind: .samplesFollow, bytes: Array(buffer: line)))
                    case .samples(let payload):
                        let samples = AirAudio.samples(in: payload)
                        expect((1...AirAudio.maximumFrameSamples).contains(samples.count) && payload.readableBytes == 4 * samples.count,
                               "a frame of \(payload.readableBytes) bytes taken", reads)
                        frames.append(Frame(kind: .samples, bytes: Array(buffer: payload)))
                    }
                }
            } catch {
                return (frames, error)
            }
            expect(buffer.readableBytes <= held, "\(buffer.readableBytes) bytes held waiting for a line or frame", reads)
            buffer.discardReadBytes()
        }
        return (frames, nil)
    }

    /// The clients' framing, fed the same reads: the lines the air's decoder
    /// reads, as far as both read (the air's decoder refuses a connection that
    /// is not lines earlier).
    private static func checkLineFraming(_ reads: [[UInt8]], air: [Frame]) {
        let processor = NIOSingleStepByteToMessageProcessor(LineBasedFrameDecoder(), maximumBufferSize: LineFraming.maximumLineBytes)
        var lines: [Frame] = []
        for read in reads {
            do {
                try processor.process(buffer: ByteBuffer(bytes: read)) { line in
                    lines.append(Frame(kind: .line, bytes: Array(buffer: line)))
                }
            } catch {
                break
            }
        }
        let airLines = air.prefix { $0.kind == .line }
        let common = min(lines.count, airLines.count)
        expect(lines.prefix(common) == airLines.prefix(common), "the clients' framing reads other lines than the air's", reads)
    }

    // MARK: Requests and the space

    /// The air's state as one connection's frames change it, checked as it goes.
    private struct Space {
        var space = AirSpace(parameters: AirParameters())
        var attached: String?
        var audioLink: String?
        var requestID = 0

        mutating func take(_ frame: Frame, _ reads: [[UInt8]]) {
            switch frame.kind {
            case .line, .samplesFollow:
                let text = String(decoding: frame.bytes, as: UTF8.self)
                readAsTheAirsLine(text, reads)
                guard let (id, request) = request(in: text, reads) else { return }
                if frame.kind == .samplesFollow {
                    guard case .audio(let device) = request else { return AirConnectionContract.expect(false, "frames after a line that is no audio request", reads) }
                    if space.position(of: device) == nil { try? space.attach(device, at: Position(x: 1, y: 0)) }
                    audioLink = (try? space.openAudio(device)).map { device }
                } else {
                    perform(request, id: id, reads)
                }
            case .samples:
                guard let device = audioLink else { return }
                let samples = AirAudio.samples(in: ByteBuffer(bytes: frame.bytes))
                do {
                    try space.play(device, samples)
                } catch {
                    // The air closes the link: a non-finite sample, or a full queue.
                    AirConnectionContract.expect(!error.message.isEmpty, "a refusal that says nothing", reads)
                    audioLink = nil
                    space.closeAudio(device)
                    return
                }
                for (_, block) in space.audioTick() {
                    AirConnectionContract.expect(block.count == AirAudio.blockSamples && block.allSatisfy(\.isFinite), "a microphone heard a non-finite sample", reads)
                }
            }
        }

        /// The line as the air reads a request: taken within its rules and reading back, or refused with a message.
        func request(in text: String, _ reads: [[UInt8]]) -> (Int, AirRequest)? {
            let decoded: (id: Int, request: AirRequest)
            do {
                decoded = try AirCoding.decodeRequest(text)
            } catch {
                AirConnectionContract.expect(!error.message.isEmpty, "a refusal that says nothing", reads)
                return nil
            }
            let again = try? AirCoding.decodeRequest(AirCoding.encode(id: decoded.id, decoded.request))
            AirConnectionContract.expect(again?.id == decoded.id && again?.request == decoded.request, "a request that does not read back: \(decoded)", reads)
            switch decoded.request {
            case .attach(let name, let position), .placeBeacon(let name, let position, _, _):
                AirConnectionContract.expect((1...64).contains(name.utf8.count) && [position.x, position.y, position.z].allSatisfy(\.isFinite),
                       "a device \(name.debugDescription) at \(position) taken", reads)
            case .move(_, let position):
                AirConnectionContract.expect([position.x, position.y, position.z].allSatisfy(\.isFinite), "a move to \(position) taken", reads)
            case .audio(let name):
                AirConnectionContract.expect((1...64).contains(name.utf8.count), "an audio link of \(name.debugDescription) taken", reads)
            case .advertise, .stopAdvertising, .scan, .removeBeacon, .list:
                break
            }
            switch decoded.request {
            case .advertise(_, _, let payload, let txPower):
                AirConnectionContract.expect((1...255).contains(payload.count) && (-127...20).contains(txPower), "an advertisement out of bounds taken", reads)
            case .placeBeacon(_, _, let payload, let txPower):
                AirConnectionContract.expect((1...31).contains(payload.count) && (-127...20).contains(txPower), "a beacon out of bounds taken", reads)
            default:
                break
            }
            return decoded
        }

        /// A client reads the line as one of the air's: a message that reads back, or a refusal.
        func readAsTheAirsLine(_ text: String, _ reads: [[UInt8]]) {
            guard let message = try? AirCoding.decodeMessage(text) else { return }
            AirConnectionContract.expect((try? AirCoding.decodeMessage(AirCoding.encode(message))) == message, "a message that does not read back: \(message)", reads)
        }

        /// What the air does with a control connection's request, on the space.
        mutating func perform(_ request: AirRequest, id: Int, _ reads: [[UInt8]]) {
            var deliveries: [AirSpace.Delivery] = []
            do throws(AirProtocolError) {
                switch request {
                case .attach(let device, let position):
                    guard attached == nil else { return }
                    try space.attach(device, at: position)
                    attached = device
                case .advertise(let advert, let medium, let payload, let txPower):
                    deliveries = try space.advertise(attached ?? Self.unattached, id: advert, medium: medium, payload: payload, txPower: txPower)
                case .stopAdvertising(let advert):
                    try space.stopAdvertising(attached ?? Self.unattached, id: advert)
                case .scan(let medium, let enabled):
                    deliveries = try space.scan(attached ?? Self.unattached, medium: medium, enabled: enabled)
                case .move(let device, let position):
                    deliveries = try space.move(device, to: position)
                case .placeBeacon(let name, let position, let payload, let txPower):
                    deliveries = try space.placeBeacon(name, at: position, payload: payload, txPower: txPower)
                case .removeBeacon(let name):
                    try space.removeBeacon(name)
                case .list, .audio:
                    break
                }
            } catch {
                AirConnectionContract.expect(!error.message.isEmpty, "a refusal that says nothing", reads)
            }
            let devices = space.describe()
            for delivery in deliveries + space.tick() {
                let names = devices.map(\.name)
                AirConnectionContract.expect(names.contains(delivery.recipient) && names.contains(delivery.heard.sender), "a delivery to or from no device", reads)
                // Nothing is heard louder than at 1 cm, the nearest the space lets devices be.
                AirConnectionContract.expect(delivery.heard.rssi <= delivery.heard.txPower + 40 && Double(delivery.heard.rssi) >= space.parameters.sensitivity - 1,
                       "a broadcast heard at \(delivery.heard.rssi) dBm", reads)
            }
            AirConnectionContract.expect((try? AirCoding.decodeMessage(AirCoding.encode(.devices(id: id, devices)))) == .devices(id: id, devices),
                   "the device list does not read back", reads)
        }

        /// Requests before `attach` name no device; the air refuses them, the space must too.
        static let unattached = ""
    }

    fileprivate static func expect(_ condition: Bool, _ promise: @autoclosure () -> String, _ reads: [[UInt8]]) {
        if !condition {
            let shown = reads.prefix(8).map { String(decoding: $0.prefix(200), as: UTF8.self).debugDescription }
            fatalError("nearby-air: \(promise()), for \(reads.count) reads of \(reads.reduce(0) { $0 + $1.count }) bytes in all: \(shown)")
        }
    }
}
