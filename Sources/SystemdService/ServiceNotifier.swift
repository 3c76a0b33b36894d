import CSystemd

/// Tells the service manager how the service is doing (sd_notify). Does
/// nothing when not started by systemd (`NOTIFY_SOCKET` unset).
public enum ServiceNotifier {
    /// Start-up is complete: `Type=notify` units become active now.
    public static func ready(status: String? = nil) {
        send("READY=1" + (status.map { "\nSTATUS=\($0)" } ?? ""))
    }

    /// Shutdown has begun.
    public static func stopping() {
        send("STOPPING=1")
    }

    private static func send(_ state: String) {
        _ = sd_notify(0, state)
    }
}
