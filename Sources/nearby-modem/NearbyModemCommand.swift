import ArgumentParser
import AudioModem
import Foundation
import NearbyCore

@main
struct NearbyModem: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nearby-modem",
        abstract: "Encode a token into nearbyd's near-ultrasonic burst, or decode bursts from audio.",
        discussion: """
            The modem nearbyd uses to exchange tokens over sound: one 8-byte token per \
            burst of about 0.29 s of minimum-shift keying between 18.5 and 20 kHz, with \
            a CRC-24 and a polar code (doc/audio-modem.md).

            Raw audio is little-endian 32-bit float, mono, nominal full scale ±1, on \
            stdin and stdout (the contract of the ggwave comparison harness); --wav \
            reads or writes a WAV file instead.

            Examples:
              nearby-modem encode 0123456789abcdef --wav burst.wav && aplay burst.wav
              arecord -f FLOAT_LE -r 48000 -c 1 -t raw | nearby-modem decode --verbose

            EXIT STATUS
              0 when done (decode: whether or not a token was heard); 64 for a bad
              argument; 1 when a file cannot be read or written or is not a WAV file.
            """,
        subcommands: [Encode.self, Decode.self]
    )
}

struct Encode: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write the burst for a token: raw float32 samples on stdout, or a WAV file.")

    @Argument(help: "The token: 16 hex digits (8 bytes).")
    var token: String

    @Option(help: "Samples per second (44100 to 192000).")
    var rate = 48_000

    @Option(help: ArgumentHelp("Write a 32-bit float WAV file instead of raw samples on stdout.", valueName: "file"))
    var wav: String?

    func validate() throws {
        guard Token(hex: token) != nil else { throw ValidationError("a token is 16 hex digits, not \"\(token)\"") }
        guard (44_100...192_000).contains(rate) else { throw ValidationError("--rate must be 44100 to 192000") }
    }

    func run() throws {
        let samples = TokenModulator(sampleRate: Double(rate)).waveform(for: Token(hex: token)!)
        if let wav {
            try WAV.encode(samples, sampleRate: rate).write(to: URL(fileURLWithPath: wav))
        } else {
            FileHandle.standardOutput.write(samples.withUnsafeBufferPointer { Data(buffer: $0) })
        }
    }
}

struct Decode: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print each token decoded from audio, one lowercase hex line per burst, in order.")

    @Option(help: "Samples per second of raw input (44100 to 192000; a WAV file gives its own).")
    var rate = 48_000

    @Option(help: ArgumentHelp("Read a WAV file (16-bit PCM or 32-bit float; the first channel) instead of raw samples on stdin.",
                               valueName: "file"))
    var wav: String?

    @Option(help: "Detection threshold in multiples of the noise: lower hears fainter bursts and decodes more noise.")
    var threshold = TokenDemodulator.defaultThreshold

    @Flag(help: "Also print each burst's start (s), level (dBFS) and Eb/N0 (dB) on stderr.")
    var verbose = false

    func validate() throws {
        guard (44_100...192_000).contains(rate) else { throw ValidationError("--rate must be 44100 to 192000") }
        guard threshold > 0 else { throw ValidationError("--threshold must be positive") }
    }

    func run() throws {
        var heard: [HeardToken] = []
        var sampleRate = rate
        if let wav {
            let file = try WAV.decode(Data(contentsOf: URL(fileURLWithPath: wav)))
            guard (44_100...192_000).contains(file.sampleRate) else {
                throw ValidationError("\(wav) is sampled at \(file.sampleRate) Hz; the modem needs 44100 to 192000")
            }
            sampleRate = file.sampleRate
            var demodulator = TokenDemodulator(sampleRate: sampleRate, threshold: threshold)
            heard = demodulator.process(file.samples) + demodulator.finish()
            report(heard, sampleRate: sampleRate)
            return
        }
        var demodulator = TokenDemodulator(sampleRate: sampleRate, threshold: threshold)
        var carry = Data()
        while true {
            let chunk = FileHandle.standardInput.readData(ofLength: 1 << 16)
            if chunk.isEmpty { break }
            carry.append(chunk)
            let whole = carry.count / 4 * 4
            let samples = carry.prefix(whole).withUnsafeBytes { raw in
                raw.bindMemory(to: UInt32.self).map { Float(bitPattern: UInt32(littleEndian: $0)) }
            }
            carry = carry.suffix(from: carry.startIndex + whole)
            report(demodulator.process(samples), sampleRate: sampleRate)
        }
        report(demodulator.finish(), sampleRate: sampleRate)
    }

    private func report(_ heard: [HeardToken], sampleRate: Int) {
        for token in heard {
            // Unbuffered, so a pipe sees each token as it is heard.
            FileHandle.standardOutput.write(Data((token.token.hex + "\n").utf8))
            if verbose {
                let line = String(format: "%@ at %.3f s, level %.1f dBFS, Eb/N0 %.1f dB\n", token.token.hex,
                                  Double(token.sampleOffset) / Double(sampleRate), token.level, token.bitSNR)
                FileHandle.standardError.write(Data(line.utf8))
            }
        }
    }
}
