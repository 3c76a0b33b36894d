import Foundation
@testable import ALSA

/// A private temporary directory for one test. It holds the test's ALSA
/// configuration file and the raw audio files that the `file` plugin reads
/// and writes. The test calls `remove()` when done.
///
/// ALSA setup: the file is handed to the ALSA types as
/// `PCMConfiguration.configFile`. They load it on top of a private copy of the
/// system configuration and open the PCM with `snd_pcm_open_lconf`. Nothing
/// process-wide changes (no ALSA_CONFIG_PATH, no ~/.asoundrc), so tests
/// running in parallel in one process cannot see each other's PCMs.
final class ALSAFixture {
    let directory: String

    init(pcms: (ALSAFixture) -> String) throws {
        let pattern = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("alsa-test-XXXXXX").path
        var template = Array(pattern.utf8CString)
        guard let path = mkdtemp(&template) else { throw POSIXError(.init(rawValue: errno)!) }
        directory = String(cString: path)
        try pcms(self).write(toFile: configFile, atomically: false, encoding: .utf8)
    }

    var configFile: String { path("asoundrc") }

    func path(_ name: String) -> String { "\(directory)/\(name)" }

    func configuration(_ pcm: String) -> PCMConfiguration {
        PCMConfiguration(pcm: pcm, configFile: configFile)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Writes `values` as raw native-endian samples, as the `file` plugin's
/// `infile` expects.
func writeRaw<T: BitwiseCopyable>(_ values: [T], to path: String) throws {
    try values.withUnsafeBytes { Data($0) }.write(to: URL(fileURLWithPath: path))
}

/// Reads a raw file written by the `file` plugin (`format raw`).
func readRaw<T: BitwiseCopyable>(_ type: T.Type, from path: String) throws -> [T] {
    let data = try Data(contentsOf: URL(fileURLWithPath: path))
    return data.withUnsafeBytes { Array($0.bindMemory(to: T.self)) }
}

/// A named pipe used as the `file` plugin's `infile`, filled before the PCM
/// opens it. The test holds the write end open, so once the data has been
/// read, the plugin's read(2) blocks instead of reaching end of file. (At end
/// of file, this alsa-lib (1.2.8) still returns full periods, filled with
/// whatever the slave produced. With `null` that is stale buffer contents,
/// produced as fast as the CPU allows, and the drop-oldest policy would throw
/// the real data away before a test could read it.)
///
/// A blocked read inside libasound cannot be interrupted, so the test calls
/// `closeWriter()` before stopping the capture.
final class PrefilledFIFO {
    private let writer: Int32

    init<T: BitwiseCopyable>(path: String, samples: [T]) throws {
        guard mkfifo(path, 0o600) == 0 else { throw POSIXError(.init(rawValue: errno)!) }
        // O_RDWR opens without waiting for a reader. The data must fit in the
        // pipe's 64 KiB buffer, or this write would block.
        writer = open(path, O_RDWR)
        guard writer >= 0 else { throw POSIXError(.init(rawValue: errno)!) }
        let size = samples.count * MemoryLayout<T>.stride
        precondition(size <= 65536, "more data than a pipe buffer holds")
        let written = samples.withUnsafeBytes { write(writer, $0.baseAddress, size) }
        guard written == size else { throw POSIXError(.init(rawValue: errno)!) }
    }

    func closeWriter() {
        close(writer)
    }
}

/// Polls `condition` every millisecond until it holds or `timeout` passes.
/// The wait ends when the condition holds, not after a fixed sleep.
func waitUntil(timeout: Duration = .seconds(20), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now > deadline { return false }
        try? await Task.sleep(for: .milliseconds(1))
    }
    return true
}

/// Reads `capture.chunks` until `count` samples have arrived.
func collect(_ count: Int, from capture: PCMCapture) async throws -> [PCMCapture.Chunk] {
    var chunks: [PCMCapture.Chunk] = []
    var total = 0
    for try await chunk in capture.chunks {
        chunks.append(chunk)
        total += chunk.samples.count
        if total >= count { break }
    }
    return chunks
}

/// A 19 kHz tone burst at 48 kHz, the kind of signal the daemon sends.
func toneBurst(count: Int) -> [Float] {
    (0..<count).map { Float(0.5 * sin(2 * Double.pi * 19_000 * Double($0) / 48_000)) }
}
