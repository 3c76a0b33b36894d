import CALSA
import Glibc

/// Which way audio flows through a PCM.
public enum PCMDirection: Sendable {
    case playback
    case capture
}

/// The sample format agreed with the device. The API always uses `Float`.
/// `.int16` means the PCM refused Float32, so the wrapper converts.
public enum PCMSampleFormat: Sendable {
    case float32
    case int16
}

/// Settings for opening a PCM.
public struct PCMConfiguration: Sendable {
    /// The ALSA PCM name. The default, `"default"`, goes through the
    /// PipeWire or PulseAudio ALSA plugin when one is installed.
    public var pcm: String
    /// An ALSA configuration file to load on top of the system configuration.
    /// Its definitions can use the system's own, such as `pcm.null`. It is for
    /// tests and for hosts with their own ALSA configuration. When nil, only
    /// the system configuration is used.
    public var configFile: String?
    /// The length of one period, which is one unit of transfer and one wake-up
    /// of the audio thread. The default, 20 ms, is short enough for a beacon
    /// and long enough that a busy host seldom misses a wake-up.
    public var period: Duration
    /// How many periods the device buffer holds (at least 2). The default, 4
    /// (about 80 ms at 20 ms periods), lets the audio thread be late by up to
    /// three periods before an xrun.
    public var periods: Int

    public init(pcm: String = "default", configFile: String? = nil,
                period: Duration = .milliseconds(20), periods: Int = 4) {
        self.pcm = pcm
        self.configFile = configFile
        self.period = period
        self.periods = periods
    }
}

/// Owns one open `snd_pcm_t`, configured for interleaved mono audio at
/// 48000 Hz, or at 44100 Hz when 48000 Hz is not offered.
///
/// The handle is in non-blocking mode. Call `wait(interruptingOn:)` before
/// `read(into:)` or `write(_:)`; the file descriptor you pass lets another
/// thread interrupt the wait. `read` and `write` recover from xruns and
/// suspends on their own. They throw only when the stream cannot continue.
///
/// The type is non-copyable and not `Sendable`: exactly one owner uses the
/// handle, and `deinit` closes it.
public struct PCMStream: ~Copyable {
    /// Rates accepted, most preferred first. Other rates are refused rather
    /// than resampled: ALSA's built-in resampler damps and aliases the
    /// near-ultrasonic band that the daemon uses.
    public static let acceptedRates = [48000, 44100]

    public let pcm: String
    public let direction: PCMDirection
    /// The sample rate obtained from the device, in Hz.
    public let rate: Int
    public let format: PCMSampleFormat
    /// The period size obtained from the device, in frames.
    public let periodFrames: Int
    /// The buffer size obtained from the device, in frames.
    public let bufferFrames: Int
    /// Xruns (overruns or underruns) and suspends recovered from so far. Each
    /// one is a gap in the audio.
    public private(set) var xruns = 0

    private let handle: OpaquePointer
    /// Holds S16 samples on their way to or from the device when it refused Float32.
    private var int16Buffer: [Int16] = []

    /// Opens the PCM and configures it. A capture stream starts running at once.
    public init(_ direction: PCMDirection, configuration: PCMConfiguration = PCMConfiguration()) throws(ALSAError) {
        let pcm = configuration.pcm
        let handle = try Self.open(pcm, direction, configFile: configuration.configFile)
        do throws(ALSAError) {
            let setup = try Self.configure(handle, pcm: pcm, direction: direction, configuration: configuration)
            if direction == .capture {
                // Capture produces nothing, and poll() never fires, until the stream is started.
                try check(snd_pcm_start(handle), pcm, "start capture")
            }
            (rate, format, periodFrames, bufferFrames) = setup
        } catch {
            snd_pcm_close(handle)
            throw error
        }
        self.pcm = pcm
        self.direction = direction
        self.handle = handle
    }

    deinit {
        snd_pcm_close(handle)
    }

    /// Blocks until the PCM can transfer audio (returns `true`) or until
    /// `descriptor` becomes readable (returns `false`, and takes priority).
    /// A `true` result can also mean an error is pending; the next
    /// `read` or `write` deals with it.
    public func wait(interruptingOn descriptor: Int32? = nil) throws(ALSAError) -> Bool {
        let descriptors = snd_pcm_poll_descriptors_count(handle)
        guard descriptors > 0 else {
            throw ALSAError(code: descriptors < 0 ? descriptors : -EINVAL, pcm: pcm, operation: "count poll descriptors")
        }
        let count = Int(descriptors)
        var fds = [pollfd](repeating: pollfd(), count: count)
        let filled = fds.withUnsafeMutableBufferPointer { snd_pcm_poll_descriptors(handle, $0.baseAddress, UInt32(count)) }
        try check(filled, pcm, "get poll descriptors")
        if let descriptor { fds.append(pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)) }
        while true {
            if poll(&fds, nfds_t(fds.count), -1) < 0 {
                if errno == EINTR { continue }
                throw ALSAError(code: -errno, pcm: pcm, operation: "poll")
            }
            if descriptor != nil, fds[count].revents != 0 { return false }
            var revents: UInt16 = 0
            let result = fds.withUnsafeMutableBufferPointer {
                snd_pcm_poll_descriptors_revents(handle, $0.baseAddress, UInt32(count), &revents)
            }
            try check(result, pcm, "decode poll events")
            // The PCM's file descriptors can wake up without it being ready, so poll again then.
            if Int32(revents) & (POLLIN | POLLOUT | POLLERR) != 0 { return true }
        }
    }

    /// Reads up to `buffer.count` frames into the start of `buffer` and
    /// returns how many were read. Returns 0 when none are ready or after
    /// recovering from an overrun or a suspend.
    public mutating func read(into buffer: inout [Float]) throws(ALSAError) -> Int {
        let handle = handle
        let frames = snd_pcm_uframes_t(buffer.count)
        let result: Int
        switch format {
        case .float32:
            result = buffer.withUnsafeMutableBytes { snd_pcm_readi(handle, $0.baseAddress, frames) }
        case .int16:
            if int16Buffer.count < buffer.count { int16Buffer = [Int16](repeating: 0, count: buffer.count) }
            result = int16Buffer.withUnsafeMutableBytes { snd_pcm_readi(handle, $0.baseAddress, frames) }
            for i in 0..<max(result, 0) { buffer[i] = Float(int16Buffer[i]) / 32768 }
        }
        return try transferred(result, "read")
    }

    /// Writes as many of `samples` as the device takes now and returns how
    /// many frames that was. Returns 0 when there is no room or after
    /// recovering from an underrun or a suspend. Samples should be within
    /// −1...1. On the S16 path they are clamped; Float32 passes them through.
    public mutating func write(_ samples: ArraySlice<Float>) throws(ALSAError) -> Int {
        let handle = handle
        let frames = snd_pcm_uframes_t(samples.count)
        let result: Int
        switch format {
        case .float32:
            result = samples.withUnsafeBytes { snd_pcm_writei(handle, $0.baseAddress, frames) }
        case .int16:
            int16Buffer.removeAll(keepingCapacity: true)
            int16Buffer.append(contentsOf: samples.lazy.map { Int16((min(max($0, -1), 1) * 32767).rounded()) })
            result = int16Buffer.withUnsafeBytes { snd_pcm_writei(handle, $0.baseAddress, frames) }
        }
        return try transferred(result, "write")
    }

    /// Blocks until all audio already written has played, then stops the stream.
    public mutating func drain() throws(ALSAError) {
        // In non-blocking mode snd_pcm_drain returns -EAGAIN instead of waiting.
        try check(snd_pcm_nonblock(handle, 0), pcm, "switch to blocking mode")
        try check(snd_pcm_drain(handle), pcm, "drain")
    }

    /// Stops the stream at once and discards the audio still buffered.
    public mutating func drop() throws(ALSAError) {
        try check(snd_pcm_drop(handle), pcm, "drop")
    }

    /// Makes the stream usable again after `code` (a negative errno) came back
    /// from `operation`. An overrun or underrun (-EPIPE) is handled by
    /// preparing the stream again. A suspend (-ESTRPIPE) is handled by
    /// resuming it, or by preparing it when the driver cannot resume. Both
    /// count as xruns. Any other code is thrown.
    mutating func recover(from code: Int32, operation: String) throws(ALSAError) {
        switch -code {
        case EPIPE:
            try check(snd_pcm_prepare(handle), pcm, "prepare after xrun")
        case ESTRPIPE:
            // -EAGAIN means the device is still waking up. Retry for up to about 1 s.
            var resumed = snd_pcm_resume(handle)
            var attempts = 0
            while resumed == -EAGAIN, attempts < 100 {
                usleep(10_000)
                attempts += 1
                resumed = snd_pcm_resume(handle)
            }
            if resumed < 0 { try check(snd_pcm_prepare(handle), pcm, "prepare after suspend") }
        default:
            throw ALSAError(code: code, pcm: pcm, operation: operation)
        }
        xruns += 1
        if direction == .capture, snd_pcm_state(handle) == SND_PCM_STATE_PREPARED {
            try check(snd_pcm_start(handle), pcm, "restart capture")
        }
    }

    /// Turns a `snd_pcm_readi`/`snd_pcm_writei` result into a frame count.
    private mutating func transferred(_ result: Int, _ operation: String) throws(ALSAError) -> Int {
        if result >= 0 { return result }
        if result == -Int(EAGAIN) { return 0 }
        try recover(from: Int32(result), operation: operation)
        return 0
    }

    private static func open(_ pcm: String, _ direction: PCMDirection, configFile: String?) throws(ALSAError) -> OpaquePointer {
        let stream = direction == .playback ? SND_PCM_STREAM_PLAYBACK : SND_PCM_STREAM_CAPTURE
        var handle: OpaquePointer?
        if let configFile {
            let tree = try loadConfiguration(configFile, pcm: pcm)
            defer { snd_config_delete(tree) }
            try check(snd_pcm_open_lconf(&handle, pcm, stream, SND_PCM_NONBLOCK, tree), pcm, "open")
        } else {
            try check(snd_pcm_open(&handle, pcm, stream, SND_PCM_NONBLOCK), pcm, "open")
        }
        return handle!
    }

    /// Returns a private copy of the system configuration with `path` loaded
    /// on top of it, as `~/.asoundrc` would be. The copy belongs to this open
    /// call alone, so it changes nothing process-wide. The caller deletes it.
    private static func loadConfiguration(_ path: String, pcm: String) throws(ALSAError) -> OpaquePointer {
        func failure(_ code: Int32, _ operation: String) -> ALSAError {
            .failed(pcm: pcm, operation: operation, code: code, message: String(cString: snd_strerror(code)))
        }
        var system: OpaquePointer?
        let updated = snd_config_update_ref(&system)
        guard updated >= 0, let system else { throw failure(updated, "load the system ALSA configuration") }
        defer { snd_config_unref(system) }
        var tree: OpaquePointer?
        let copied = snd_config_copy(&tree, system)
        guard copied >= 0, let tree else { throw failure(copied, "copy the ALSA configuration") }
        var input: OpaquePointer?
        let opened = snd_input_stdio_open(&input, path, "r")
        guard opened >= 0, let input else {
            snd_config_delete(tree)
            throw failure(opened, "read ALSA configuration \(path)")
        }
        let loaded = snd_config_load(tree, input)
        snd_input_close(input)
        guard loaded >= 0 else {
            snd_config_delete(tree)
            throw failure(loaded, "parse ALSA configuration \(path)")
        }
        return tree
    }

    private static func configure(
        _ handle: OpaquePointer, pcm: String, direction: PCMDirection, configuration: PCMConfiguration
    ) throws(ALSAError) -> (rate: Int, format: PCMSampleFormat, periodFrames: Int, bufferFrames: Int) {
        var hw: OpaquePointer?
        try check(snd_pcm_hw_params_malloc(&hw), pcm, "allocate hardware parameters")
        defer { snd_pcm_hw_params_free(hw) }
        try check(snd_pcm_hw_params_any(handle, hw), pcm, "query hardware parameters")
        // Only rates the device runs without resampling. See `acceptedRates`.
        try check(snd_pcm_hw_params_set_rate_resample(handle, hw, 0), pcm, "disable resampling")
        guard snd_pcm_hw_params_set_access(handle, hw, SND_PCM_ACCESS_RW_INTERLEAVED) == 0,
              snd_pcm_hw_params_set_channels(handle, hw, 1) == 0
        else { throw .unsupportedFormat(pcm: pcm) }

        let format: PCMSampleFormat
        if snd_pcm_hw_params_set_format(handle, hw, SND_PCM_FORMAT_FLOAT) == 0 {
            format = .float32
        } else if snd_pcm_hw_params_set_format(handle, hw, SND_PCM_FORMAT_S16) == 0 {
            format = .int16
        } else {
            throw .unsupportedFormat(pcm: pcm)
        }

        guard let rate = acceptedRates.first(where: { snd_pcm_hw_params_test_rate(handle, hw, UInt32($0), 0) == 0 }) else {
            // A bound may be exclusive: dir < 0 means "below max", dir > 0 means "above min".
            var low: UInt32 = 0, high: UInt32 = 0, lowDir: Int32 = 0, highDir: Int32 = 0
            snd_pcm_hw_params_get_rate_min(hw, &low, &lowDir)
            snd_pcm_hw_params_get_rate_max(hw, &high, &highDir)
            let lower = Int(low) + (lowDir > 0 ? 1 : 0)
            let upper = Int(high) - (highDir < 0 ? 1 : 0)
            throw .unsupportedRate(pcm: pcm, rates: lower...max(lower, upper))
        }
        try check(snd_pcm_hw_params_set_rate(handle, hw, UInt32(rate), 0), pcm, "set rate \(rate)")

        let seconds = configuration.period.components
        let periodSeconds = Double(seconds.seconds) + Double(seconds.attoseconds) * 1e-18
        var period = snd_pcm_uframes_t(max(1, (Double(rate) * periodSeconds).rounded()))
        var dir: Int32 = 0
        try check(snd_pcm_hw_params_set_period_size_near(handle, hw, &period, &dir), pcm, "set period size")
        var buffer = period * snd_pcm_uframes_t(max(2, configuration.periods))
        try check(snd_pcm_hw_params_set_buffer_size_near(handle, hw, &buffer), pcm, "set buffer size")
        try check(snd_pcm_hw_params(handle, hw), pcm, "apply hardware parameters")

        var sw: OpaquePointer?
        try check(snd_pcm_sw_params_malloc(&sw), pcm, "allocate software parameters")
        defer { snd_pcm_sw_params_free(sw) }
        try check(snd_pcm_sw_params_current(handle, sw), pcm, "query software parameters")
        // Wake up once per period, not once per frame.
        try check(snd_pcm_sw_params_set_avail_min(handle, sw, period), pcm, "set avail_min")
        if direction == .playback {
            // Start only when the buffer is full, so playback begins with its full margin against underruns.
            try check(snd_pcm_sw_params_set_start_threshold(handle, sw, buffer), pcm, "set start threshold")
        }
        try check(snd_pcm_sw_params(handle, sw), pcm, "apply software parameters")
        return (rate, format, Int(period), Int(buffer))
    }
}

/// Throws the classified error when `code`, a libasound return value, is negative.
func check(_ code: Int32, _ pcm: String, _ operation: String) throws(ALSAError) {
    if code < 0 { throw ALSAError(code: code, pcm: pcm, operation: operation) }
}
