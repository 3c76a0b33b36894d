import Foundation
import Logging
import Mediums
import NearbyCore
import Synchronization

/// BLE through a raw HCI socket (libbluetooth), for hosts that run without
/// bluetoothd: minimal images, gateways. Advertises nearbyd's token frame as a
/// legacy non-connectable advertisement from a fresh non-resolvable private
/// address, and scans passively for other devices' frames.
///
/// ## Concurrency
///
/// The HCI socket belongs to one dedicated thread, started by ``run()`` and
/// ended when its task is cancelled. Only that thread opens, writes, reads and
/// closes the socket (``HCISocket`` is not Sendable, so the compiler keeps it
/// there), and it sends one command at a time, waiting for the controller's
/// answer before the next.
///
/// Async callers never touch the socket: ``broadcast(_:)`` and ``scan(_:)``
/// record the wish under a mutex and signal an eventfd that the thread polls
/// next to the socket; the thread then brings the controller to the latest
/// wish. Sightings and condition changes leave the thread through
/// `AsyncStream` continuations, which are safe to use from any thread. So
/// every stored property of this class is immutable and Sendable, or a
/// `Mutex`, and the class is Sendable without `@unchecked`.
///
/// ## Several tokens
///
/// A legacy advertisement carries one token. When more than one is wished,
/// the advertiser takes them in turn, each for
/// ``Settings/rotationInterval``, with a fresh address at each turn so that
/// the tokens cannot be linked through it. Usually there is one.
///
/// ## Recovery
///
/// When the device cannot be opened or initialised, or fails later, the
/// condition becomes `.unavailable` (`.refused` when the system denies the
/// capabilities) and the thread tries again with a backoff from
/// ``Settings/retryDelay`` doubling up to ``Settings/maximumRetryDelay``. Once
/// open again, it restores the wished advertising and scanning.
public final class HCIMedium: BeaconScanner {
    /// How the socket reaches the controller.
    public enum Channel: String, Sendable, CaseIterable {
        /// `HCI_CHANNEL_RAW`: the kernel keeps managing the device (it is
        /// brought up if down) and others may use it; nearbyd only sends LE
        /// commands. Needs CAP_NET_RAW (and CAP_NET_ADMIN to bring the
        /// device up).
        case raw
        /// `HCI_CHANNEL_USER`: nearbyd takes the controller for itself. The
        /// device is taken down first, detached from the kernel's management
        /// (bluetoothd loses it), and nearbyd resets and initialises it. Needs
        /// CAP_NET_ADMIN. Closing the socket gives the device back, down.
        case user
    }

    /// Which controller, how, and with what figures.
    public struct Settings: Sendable {
        /// The controller's name, `hci<N>`.
        public var device: String
        public var channel: Channel
        /// Signal strength at one metre assumed for the devices heard, dBm:
        /// legacy advertising reports carry no TX power, and nearbyd's frame
        /// has none either. It goes into each sighting and its distance.
        public var txPower: Int
        /// The range the controller picks its advertising interval from;
        /// clamped to 100 ms...10.24 s, in steps of 0.625 ms.
        public var advertisingInterval: ClosedRange<Duration>
        /// How long each token is advertised before the next when several
        /// are broadcast at once.
        public var rotationInterval: Duration
        /// The first wait before opening the device again after a failure;
        /// it doubles with each failure in a row, up to `maximumRetryDelay`.
        public var retryDelay: Duration
        public var maximumRetryDelay: Duration
        public var logger: Logger

        public init(
            device: String = "hci0",
            channel: Channel = .raw,
            txPower: Int = -59,
            advertisingInterval: ClosedRange<Duration> = .milliseconds(200) ... .milliseconds(270),
            rotationInterval: Duration = .seconds(1),
            retryDelay: Duration = .milliseconds(100),
            maximumRetryDelay: Duration = .seconds(5),
            logger: Logger
        ) {
            self.device = device
            self.channel = channel
            self.txPower = txPower
            self.advertisingInterval = advertisingInterval
            self.rotationInterval = rotationInterval
            self.retryDelay = retryDelay
            self.maximumRetryDelay = maximumRetryDelay
            self.logger = logger
        }

        /// N for a device named `hci<N>`; nil for any other name.
        public static func deviceIndex(named name: String) -> UInt16? {
            guard name.hasPrefix("hci") else { return nil }
            let digits = name.dropFirst(3)
            guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber),
                  let index = UInt16(digits), index < 0xFFFF // HCI_DEV_NONE
            else { return nil }
            return index
        }
    }

    public let medium = Medium.ble
    public var sightings: AsyncStream<Sighting> { reports.sightings }
    public var conditionChanges: AsyncStream<MediumCondition> { reports.conditionChanges }
    public var beaconSightings: AsyncStream<BeaconSighting> { beacons.sightings }
    let settings: Settings
    let reports = MediumReports()
    let beacons = BeaconReports()
    /// What the daemon asked for, and what the thread is told through the
    /// eventfd: the one state shared between async callers and the thread.
    let shared = Mutex(Shared())

    /// The state shared with the socket's thread.
    struct Shared {
        var wish = Wish()
        /// Whether run() has a thread going.
        var running = false
        /// Set when run()'s task is cancelled: the thread winds down.
        var stopping = false
        /// The thread's eventfd while it runs, -1 otherwise. Written to and
        /// closed only under the lock, so a wake-up never hits a closed or
        /// reused descriptor.
        var wakeDescriptor: Int32 = -1

        /// Signals the thread, if one is there to hear it.
        func wake() {
            guard wakeDescriptor >= 0 else { return }
            var one: UInt64 = 1
            _ = write(wakeDescriptor, &one, MemoryLayout<UInt64>.size)
        }
    }

    /// What the controller should be doing.
    struct Wish: Equatable {
        var tokens: Set<Token> = []
        var scanMode: ScanMode = .off
    }

    /// `clock` times the sightings.
    public init(settings: Settings, clock: any WallClock = SystemWallClock()) {
        self.settings = settings
        self.clock = clock
    }

    /// What times the sightings.
    let clock: any WallClock

    /// Broadcasts exactly `tokens` from now on; an empty set stops advertising.
    public func broadcast(_ tokens: Set<Token>) async {
        shared.withLock { shared in
            shared.wish.tokens = tokens
            shared.wake()
        }
    }

    /// Starts, changes or stops the passive scan: `.full` listens all the
    /// time, `.lowPower` 15% of it (``ScanParameters/lowPower``).
    public func scan(_ mode: ScanMode) async {
        shared.withLock { shared in
            shared.wish.scanMode = mode
            shared.wake()
        }
    }

    /// Runs the socket's thread until the task is cancelled; then the
    /// thread stops advertising and scanning, closes the socket and ends, and
    /// this returns. Only one run at a time: a second concurrent call returns
    /// at once.
    public func run() async {
        let started = shared.withLock { shared in
            guard !shared.running else { return false }
            shared.running = true
            shared.stopping = false
            return true
        }
        guard started else {
            settings.logger.error("HCIMedium.run() called while already running")
            return
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (finished: CheckedContinuation<Void, Never>) in
                Thread.detachNewThread { [self] in
                    HCIController(medium: self).run()
                    shared.withLock { $0.running = false }
                    finished.resume()
                }
            }
        } onCancel: {
            shared.withLock { shared in
                shared.stopping = true
                shared.wake()
            }
        }
    }
}
