import Logging

/// The logger a connection's own work is handed (Hummingbird's child
/// channel `handle`), where what goes wrong is the peer's doing: a TLS
/// handshake that fails or is cut off, a scan, a reset. Anyone on the network
/// can cause those at will, so they are logged at debug, never above:
/// one error line each would let a flood reach journald's rate limit and
/// hide the server's real errors.
struct PeerLogHandler: LogHandler {
    private var inner: any LogHandler

    init(_ inner: any LogHandler) {
        self.inner = inner
    }

    var logLevel: Logger.Level {
        get { inner.logLevel }
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
        var event = event
        event.level = min(event.level, .debug)
        // The Logger checked the event's own level against ours; the lowered one is checked here.
        guard inner.logLevel <= event.level else { return }
        inner.log(event: event)
    }
}

extension Logger {
    /// This logger with everything lowered to debug at most (``PeerLogHandler``).
    var peerErrorsAtDebug: Logger {
        var logger = self
        logger.handler = PeerLogHandler(handler)
        return logger
    }
}
