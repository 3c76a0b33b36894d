import CSystemd
import Foundation
import Logging
import Synchronization

/// A swift-log handler that writes structured records to the systemd journal:
/// MESSAGE, PRIORITY, CODE_FILE/LINE/FUNC, SYSLOG_IDENTIFIER, and each metadata
/// entry as a field of its own (`client` becomes `NEARBY_CLIENT`), so
/// `journalctl NEARBY_CLIENT=:1.42` finds one client's records.
public struct JournalLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    public var metadataProvider: Logger.MetadataProvider?
    private let identifier: String
    private let label: String

    public init(label: String, identifier: String) {
        self.label = label
        self.identifier = identifier
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var fields = [
            "MESSAGE=\(event.message)",
            "PRIORITY=\(Self.priority(event.level))",
            "SYSLOG_IDENTIFIER=\(identifier)",
            "CODE_FILE=\(event.file)",
            "CODE_LINE=\(event.line)",
            "CODE_FUNC=\(event.function)",
            "NEARBY_COMPONENT=\(label)",
        ]
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let extra = event.metadata { merged.merge(extra) { $1 } }
        for (key, value) in merged {
            fields.append("\(Self.fieldName(key))=\(value)")
        }
        Self.send(fields)
    }

    /// syslog priorities: journalctl -p filters on these.
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// Journal field names are upper-case letters, digits and underscores.
    static func fieldName(_ key: String) -> String {
        let cleaned = key.uppercased().unicodeScalars.map { scalar -> Character in
            (scalar.properties.isUppercase && scalar.isASCII) || ("0"..."9").contains(scalar) ? Character(scalar) : "_"
        }
        return String(("NEARBY_" + String(cleaned)).prefix(64))
    }

    /// One contiguous buffer of all fields, pointed into by the vectors only
    /// inside the closure that lends it: no pointer outlives its borrow.
    private static func send(_ fields: [String]) {
        var buffer: [UInt8] = []
        var ranges: [Range<Int>] = []
        ranges.reserveCapacity(fields.count)
        for field in fields {
            let start = buffer.count
            buffer.append(contentsOf: field.utf8)
            ranges.append(start..<buffer.count)
        }
        buffer.withUnsafeBytes { bytes in
            let vectors = ranges.map { range in
                iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress! + range.lowerBound),
                      iov_len: range.count)
            }
            _ = sd_journal_sendv(vectors, Int32(vectors.count))
        }
    }
}

/// Sets up swift-log for a service: the journal when systemd connected stderr to
/// it (as `JOURNAL_STREAM` tells), stderr otherwise.
public enum ServiceLogging {
    public static func bootstrap(identifier: String, level: Logger.Level) {
        let journal = isStderrTheJournal
        LoggingSystem.bootstrap { label in
            var handler: any LogHandler = journal
                ? JournalLogHandler(label: label, identifier: identifier)
                : StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return VerbosityLogHandler(handler)
        }
    }

    private static let verboseSwitch = Atomic(false)

    /// While true, every logger of the process records debug messages too,
    /// whatever its configured level (a daemon's run-time "debug logging" switch).
    public static var verbose: Bool {
        get { verboseSwitch.load(ordering: .relaxed) }
        set { verboseSwitch.store(newValue, ordering: .relaxed) }
    }

    /// systemd sets `JOURNAL_STREAM=DEV:INODE` for the stream it connected;
    /// it applies only while stderr is still that stream.
    static var isStderrTheJournal: Bool {
        guard let value = ProcessInfo.processInfo.environment["JOURNAL_STREAM"] else { return false }
        let parts = value.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var info = stat()
        guard fstat(STDERR_FILENO, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }
}

/// Wraps a handler so that ``ServiceLogging/verbose`` lowers its level to debug
/// while it is on; the configured level comes back when it is off.
struct VerbosityLogHandler: LogHandler {
    private var inner: any LogHandler

    init(_ inner: any LogHandler) {
        self.inner = inner
    }

    var logLevel: Logger.Level {
        get { ServiceLogging.verbose ? min(inner.logLevel, .debug) : inner.logLevel }
        set { inner.logLevel = newValue }
    }

    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        inner.log(event: event)
    }
}
