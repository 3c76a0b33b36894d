import Dispatch
import Glibc
import Synchronization
import TestSupport

/// nearby-bench ended by a signal (Ctrl-C, `kill`, a closed terminal) takes
/// the programs it started with it: a signal runs no deinit, and the bus,
/// nearby-air, nearby-server and the daemons of a cluster would otherwise
/// be left running. A PostgreSQL cluster of the server benchmark, started
/// through `pg_ctl`, is not among them (stop it with `pg_ctl stop`).
enum SignalExit {
    /// The signal sources, kept for the life of the process.
    private static let sources = Mutex<[any DispatchSourceSignal]>([])

    /// From now on SIGINT, SIGTERM and SIGHUP kill the programs started and
    /// end nearby-bench with the shell's status for the signal (128 + its number).
    static func install() {
        sources.withLock { sources in
            guard sources.isEmpty else { return }
            for number in [SIGINT, SIGTERM, SIGHUP] {
                // Handled by the source alone, not by the default action.
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
                source.setEventHandler {
                    ChildProcess.killAll()
                    exit(128 + number)
                }
                source.resume()
                sources.append(source)
            }
        }
    }
}
