import Foundation

/// RIFF WAVE files: mono audio in and out of `nearby-modem`, for listening to
/// a burst or decoding a recording.
public enum WAV {
    public enum Error: Swift.Error, Equatable, CustomStringConvertible {
        case notWAV
        case truncated
        case unsupportedFormat(tag: Int, bitsPerSample: Int)

        public var description: String {
            switch self {
            case .notWAV: "not a RIFF WAVE file"
            case .truncated: "the file ends inside a chunk"
            case let .unsupportedFormat(tag, bits):
                "unsupported sample format (format tag \(tag), \(bits) bits): use 16-bit PCM or 32-bit float"
            }
        }
    }

    /// A 32-bit float mono file of `samples`.
    public static func encode(_ samples: [Float], sampleRate: Int) -> Data {
        var data = Data()
        func append<T: FixedWidthInteger>(_ value: T) { withUnsafeBytes(of: value.littleEndian) { data.append(contentsOf: $0) } }
        let payload = samples.count * 4
        data.append(contentsOf: Array("RIFF".utf8)); append(UInt32(36 + payload))
        data.append(contentsOf: Array("WAVE".utf8))
        data.append(contentsOf: Array("fmt ".utf8)); append(UInt32(16))
        append(UInt16(3)); append(UInt16(1)); append(UInt32(sampleRate)); append(UInt32(sampleRate * 4))
        append(UInt16(4)); append(UInt16(32))
        data.append(contentsOf: Array("data".utf8)); append(UInt32(payload))
        for sample in samples { append(sample.bitPattern) }
        return data
    }

    /// The first channel of a 16-bit PCM or 32-bit float file, and its rate.
    public static func decode(_ data: Data) throws -> (samples: [Float], sampleRate: Int) {
        let bytes = [UInt8](data)
        func integer(_ offset: Int, _ size: Int) throws -> Int {
            guard offset + size <= bytes.count else { throw Error.truncated }
            return (0..<size).reduce(0) { $0 | Int(bytes[offset + $1]) << (8 * $1) }
        }
        guard bytes.count >= 12, bytes[0..<4].elementsEqual("RIFF".utf8), bytes[8..<12].elementsEqual("WAVE".utf8) else {
            throw Error.notWAV
        }
        var offset = 12
        var format: (tag: Int, channels: Int, rate: Int, bits: Int)?
        while offset + 8 <= bytes.count {
            let size = try integer(offset + 4, 4)
            let body = offset + 8
            if bytes[offset..<(offset + 4)].elementsEqual("fmt ".utf8) {
                var tag = try integer(body, 2)
                if tag == 0xFFFE { tag = try integer(body + 24, 2) }  // WAVE_FORMAT_EXTENSIBLE: the subformat GUID's first bytes
                format = (tag, try integer(body + 2, 2), try integer(body + 4, 4), try integer(body + 14, 2))
            } else if bytes[offset..<(offset + 4)].elementsEqual("data".utf8) {
                guard let format, format.channels > 0 else { throw Error.notWAV }
                guard body + size <= bytes.count else { throw Error.truncated }
                let width = format.bits / 8
                let frame = width * format.channels
                let frames = size / max(frame, 1)
                switch (format.tag, format.bits) {
                case (1, 16):
                    return ((0..<frames).map { Float(Int16(truncatingIfNeeded: (try? integer(body + $0 * frame, 2)) ?? 0)) / 32768 }, format.rate)
                case (3, 32):
                    return ((0..<frames).map { Float(bitPattern: UInt32((try? integer(body + $0 * frame, 4)) ?? 0)) }, format.rate)
                default:
                    throw Error.unsupportedFormat(tag: format.tag, bitsPerSample: format.bits)
                }
            }
            offset = body + size + (size & 1)
        }
        throw format == nil ? Error.notWAV : Error.truncated
    }
}
