import CSystemd
import Glibc

/// Tells the service manager how the service is doing (sd_notify). Does
/// nothing when not started by systemd (`NOTIFY_SOCKET` unset).
public enum ServiceNotifier {
    /// Start-up is complete: `Type=notify` units become active now.
    public static func ready(status: String? = nil) {
        send("READY=1" + (status.map { "\nSTATUS=\($0)" } ?? ""))
    }

    /// The service is reloading its configuration; `ready` follows when done.
    /// The monotonic time goes with it, as systemd 253's `Type=notify-reload` wants.
    public static func reloading() {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        send("RELOADING=1\nMONOTONIC_USEC=\(UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000)")
    }

    /// Shutdown has begun.
    public static func stopping() {
        send("STOPPING=1")
    }

    private static func send(_ state: String) {
        _ = sd_notify(0, state)
    }
}
