import Beacons
import BluetoothLE
import CBluetooth
import Foundation
import Glibc
import Logging
import Mediums
import NearbyCore

/// The body of ``HCIMedium``'s thread: opens the device, keeps it doing what
/// the daemon wishes, and opens it again after a failure, with a backoff.
/// Made, used and dropped on that thread (not Sendable).
final class HCIController {
    private let medium: HCIMedium
    private let settings: HCIMedium.Settings
    private let logger: Logger
    /// The last condition reported; nil before the first attempt, so the
    /// first outcome is always reported, even the `.unavailable` a medium
    /// starts in.
    private var reported: MediumCondition?
    /// The last failure logged as a warning: the same one again, at each
    /// retry, is only logged at debug level.
    private var lastFailure: String?

    init(medium: HCIMedium) {
        self.medium = medium
        settings = medium.settings
        var logger = settings.logger
        logger[metadataKey: "medium"] = "ble"
        logger[metadataKey: "device"] = "\(settings.device)"
        logger[metadataKey: "channel"] = "\(settings.channel.rawValue)"
        self.logger = logger
    }

    func run() {
        Thread.current.name = "hci"
        let wakeDescriptor = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        guard wakeDescriptor >= 0 else {
            logger.critical("cannot create the HCI thread's eventfd: \(String(cString: strerror(errno)))")
            report(.unavailable)
            return
        }
        let registered = medium.shared.withLock { shared in
            guard !shared.stopping else { return false }
            shared.wakeDescriptor = wakeDescriptor
            shared.wake() // the wishes made before run() are there already
            return true
        }
        defer {
            medium.shared.withLock { shared in
                shared.wakeDescriptor = -1
                _ = close(wakeDescriptor)
            }
        }
        guard registered else { return }

        var delay = settings.retryDelay
        var attempt = 0
        while !isStopping {
            attempt += 1
            let session = HCISession(medium: medium, wakeDescriptor: wakeDescriptor, logger: logger)
            do {
                try session.run { [self] in
                    report(.ready)
                    lastFailure = nil
                    logger.info("BLE through HCI is ready")
                }
                break // only when stopping
            } catch {
                if session.becameReady {
                    // A device that worked gets its first retry soon.
                    delay = settings.retryDelay
                    attempt = 1
                }
                failed(error, attempt: attempt, retryIn: delay)
            }
            pause(for: delay, wakeDescriptor: wakeDescriptor)
            delay = min(delay * 2, settings.maximumRetryDelay)
        }
        logger.debug("HCI thread stopped")
    }

    private var isStopping: Bool { medium.shared.withLock { $0.stopping } }

    private func failed(_ error: HCIError, attempt: Int, retryIn delay: Duration) {
        let condition = error.condition
        let metadata: Logger.Metadata = ["attempt": "\(attempt)", "retry-in": "\(delay)"]
        if reported == .ready || "\(error)" != lastFailure {
            logger.warning("BLE through HCI is \(condition): \(error)", metadata: metadata)
        } else {
            logger.debug("BLE through HCI is still \(condition): \(error)", metadata: metadata)
        }
        lastFailure = "\(error)"
        report(condition)
    }

    private func report(_ condition: MediumCondition) {
        guard condition != reported else { return }
        reported = condition
        medium.reports.conditionSink.yield(condition)
    }

    /// Waits `delay`, or less if run()'s task is cancelled meanwhile; wishes
    /// that come meanwhile wait for the next session.
    private func pause(for delay: Duration, wakeDescriptor: Int32) {
        let deadline = ContinuousClock.now + delay
        var wake = pollfd(fd: wakeDescriptor, events: Int16(POLLIN), revents: 0)
        while !isStopping, ContinuousClock.now < deadline {
            if poll(&wake, 1, HCISocket.pollTimeout(until: deadline)) > 0 {
                var count: UInt64 = 0
                _ = read(wakeDescriptor, &count, MemoryLayout<UInt64>.size)
            }
        }
    }
}

/// One open socket's life: initialise the controller, bring it to the
/// daemon's wish and keep it there, turn reports into sightings, and on the
/// way out leave it neither advertising nor scanning. Any error ends the
/// session; ``HCIController`` opens a new one.
final class HCISession {
    private let medium: HCIMedium
    private let settings: HCIMedium.Settings
    private let wakeDescriptor: Int32
    private let logger: Logger
    private let advertisingParameters: AdvertisingParameters
    private var generator = SystemRandomNumberGenerator()
    /// Whether the controller was initialised and brought to a wish.
    private(set) var becameReady = false
    /// What the controller has been told on this socket: the token it
    /// advertises (nil: advertising disabled) and how it scans.
    private var advertised: Token?
    private var scanning = ScanMode.off
    /// When to advertise the next token, if several are wished.
    private var nextRotation: ContinuousClock.Instant?
    /// On the raw channel, when to check next that the device is still up:
    /// someone may take it down (hciconfig hci0 down), which stops
    /// advertising and scanning without a word to the raw socket.
    private var nextHealthCheck: ContinuousClock.Instant?

    static let commandTimeout = Duration.seconds(2)
    /// HCI_Reset may take longer than other commands (the kernel allows its
    /// init sequence 10 s, HCI_INIT_TIMEOUT).
    static let resetTimeout = Duration.seconds(10)
    /// For the commands that stop advertising and scanning on the way out.
    static let quiesceTimeout = Duration.milliseconds(500)
    static let healthCheckInterval = Duration.seconds(2)

    init(medium: HCIMedium, wakeDescriptor: Int32, logger: Logger) {
        self.medium = medium
        settings = medium.settings
        self.wakeDescriptor = wakeDescriptor
        self.logger = logger
        advertisingParameters = AdvertisingParameters(interval: settings.advertisingInterval)
    }

    /// Opens the device and serves until run()'s task is cancelled (then
    /// returns) or something fails (then throws). `ready` is called once the
    /// controller has been initialised and brought to the wish of the moment.
    func run(ready: () -> Void) throws(HCIError) {
        guard let index = HCIMedium.Settings.deviceIndex(named: settings.device) else {
            throw .invalidDeviceName(settings.device)
        }
        let socket = try HCISocket.open(deviceIndex: index, channel: settings.channel)
        defer {
            quiesce(socket)
            socket.close()
        }
        try initialise(socket)
        let (wish, stopping) = snapshot()
        if stopping { return }
        try reconcile(socket, with: wish)
        becameReady = true
        ready()
        try serve(socket)
    }

    private func snapshot() -> (HCIMedium.Wish, stopping: Bool) {
        medium.shared.withLock { ($0.wish, $0.stopping) }
    }

    /// On the user channel the controller is ours and fresh from the
    /// kernel, which did not initialise it: reset it and open the event masks
    /// to LE advertising reports. On the raw channel the kernel initialised
    /// it; only switch off advertising and scanning that a previous nearbyd
    /// may have left on (the controller keeps them after the socket closes).
    private func initialise(_ socket: HCISocket) throws(HCIError) {
        switch settings.channel {
        case .user:
            try execute(.reset, on: socket, timeout: Self.resetTimeout)
            try execute(.setEventMask(HCICommand.eventMaskWithLEMeta), on: socket)
            try execute(.leSetEventMask(HCICommand.leEventMaskAdvertisingReports), on: socket)
        case .raw:
            // Older controllers answer Command Disallowed when it is off already.
            try executeIgnoringStatus(.leSetAdvertisingEnable(false), on: socket, timeout: Self.commandTimeout)
            try executeIgnoringStatus(.leSetScanEnable(false), on: socket, timeout: Self.commandTimeout)
            nextHealthCheck = .now + Self.healthCheckInterval
        }
    }

    private func serve(_ socket: HCISocket) throws(HCIError) {
        while true {
            let (wish, stopping) = snapshot()
            if stopping { return }
            try reconcile(socket, with: wish)
            let deadline = [nextRotation, nextHealthCheck].compactMap(\.self).min()
            if case .packet(let packet) = try socket.next(until: deadline, wakeDescriptor: wakeDescriptor),
               let event = HCIEvent(packet: packet) {
                try handle(event)
            }
            if let check = nextHealthCheck, check <= .now {
                guard try HCISocket.isUp(deviceIndex: socket.deviceIndex) else {
                    throw .deviceLost("hci\(socket.deviceIndex) is down")
                }
                nextHealthCheck = .now + Self.healthCheckInterval
            }
        }
    }

    // MARK: Reconciling

    /// Brings the controller from what it was told to `wish`, one command at
    /// a time.
    private func reconcile(_ socket: HCISocket, with wish: HCIMedium.Wish) throws(HCIError) {
        let token = token(toAdvertise: wish.tokens, at: .now)
        if token != advertised {
            if let token {
                try advertise(token, rotating: wish.tokens.count > 1, on: socket)
            } else {
                try execute(.leSetAdvertisingEnable(false), on: socket)
                advertised = nil
                logger.debug("stopped advertising")
            }
        }
        if wish.tokens.count < 2 { nextRotation = nil }
        if wish.scanMode != scanning {
            try applyScan(wish.scanMode, on: socket)
        }
    }

    /// The token that should be on the air now: the one already there while
    /// it is wished and its turn lasts, else the next wished one in a fixed
    /// order (by hex), round and round.
    private func token(toAdvertise tokens: Set<Token>, at now: ContinuousClock.Instant) -> Token? {
        guard !tokens.isEmpty else { return nil }
        if let current = advertised, tokens.contains(current),
           tokens.count == 1 || nextRotation.map({ now < $0 }) == true {
            return current
        }
        let ordered = tokens.sorted { $0.hex < $1.hex }
        guard let current = advertised else { return ordered[0] }
        return ordered.first { $0.hex > current.hex } ?? ordered[0]
    }

    /// Puts `token` on the air from a fresh non-resolvable private address.
    ///
    /// The address may only change while advertising is disabled, and older
    /// controllers (Core 4.x, §7.8.4) also refuse it while scanning, so both
    /// pause; the scan is re-enabled by the rest of ``reconcile(_:with:)``.
    /// The parameters follow the address, as some controllers check at that
    /// point that a random address has been set.
    private func advertise(_ token: Token, rotating: Bool, on socket: HCISocket) throws(HCIError) {
        if advertised != nil {
            try execute(.leSetAdvertisingEnable(false), on: socket)
            advertised = nil
        }
        if scanning != .off {
            try execute(.leSetScanEnable(false), on: socket)
            scanning = .off
        }
        let address = DeviceAddress.nonResolvablePrivate(using: &generator)
        try execute(.leSetRandomAddress(address), on: socket)
        try execute(.leSetAdvertisingParameters(advertisingParameters), on: socket)
        try execute(.leSetAdvertisingData(AdvertisingData.carrying(token)), on: socket)
        try execute(.leSetAdvertisingEnable(true), on: socket)
        advertised = token
        nextRotation = rotating ? .now + settings.rotationInterval : nil
        logger.debug("advertising", metadata: ["token": "\(token)", "address": "\(address)"])
    }

    /// Scan parameters can only change while scanning is disabled.
    private func applyScan(_ mode: ScanMode, on socket: HCISocket) throws(HCIError) {
        if scanning != .off {
            try execute(.leSetScanEnable(false), on: socket)
            scanning = .off
        }
        if let parameters = ScanParameters(mode: mode) {
            try execute(.leSetScanParameters(parameters), on: socket)
            try execute(.leSetScanEnable(true), on: socket)
            scanning = mode
        }
        logger.debug("scanning \(mode)")
    }

    /// Best effort on the way out, whatever the session believes it did (a
    /// command may have been carried out without its answer arriving): stop
    /// advertising and scanning. Gives up at the first command that gets no
    /// answer at all.
    private func quiesce(_ socket: HCISocket) {
        for command in [HCICommand.leSetAdvertisingEnable(false), .leSetScanEnable(false)] {
            do {
                try executeIgnoringStatus(command, on: socket, timeout: Self.quiesceTimeout)
            } catch {
                logger.debug("could not stop advertising and scanning: \(error)")
                break
            }
        }
        advertised = nil
        scanning = .off
    }

    // MARK: Commands and events

    /// Sends `command` and waits for its Command Complete or Command Status,
    /// handling the other events meanwhile; throws on an error status.
    private func execute(_ command: HCICommand, on socket: HCISocket,
                         timeout: Duration = HCISession.commandTimeout) throws(HCIError) {
        let status = try send(command, on: socket, timeout: timeout)
        guard status == HCIStatus.success else { throw .commandFailed(opcode: command.opcode, status: status) }
    }

    /// The same, for commands whose failure changes nothing.
    private func executeIgnoringStatus(_ command: HCICommand, on socket: HCISocket,
                                       timeout: Duration) throws(HCIError) {
        let status = try send(command, on: socket, timeout: timeout)
        if status != HCIStatus.success {
            logger.debug("\(command): \(HCIStatus.describe(status)) (ignored)")
        }
    }

    /// Sends `command` and returns its status. On the raw channel other
    /// sockets and the kernel send commands too, so only an answer carrying
    /// this command's opcode counts.
    private func send(_ command: HCICommand, on socket: HCISocket, timeout: Duration) throws(HCIError) -> UInt8 {
        try socket.send(command)
        let deadline = ContinuousClock.now + timeout
        while true {
            guard case .packet(let packet) = try socket.next(until: deadline) else {
                throw .commandTimedOut(opcode: command.opcode)
            }
            switch HCIEvent(packet: packet) {
            case .commandComplete(let opcode, let returnParameters) where opcode == command.opcode:
                // Every command nearbyd sends returns its status first.
                return returnParameters.first ?? HCIStatus.success
            case .commandStatus(let opcode, let status) where opcode == command.opcode:
                return status
            case let event?:
                try handle(event)
            case nil:
                continue
            }
        }
    }

    private func handle(_ event: HCIEvent) throws(HCIError) {
        switch event {
        case .advertisingReports(let reports):
            let now = medium.clock.nowMs
            for report in reports {
                if let sighting = HCIMedium.sighting(from: report, txPower: settings.txPower, seenAtMilliseconds: now) {
                    medium.reports.sightingSink.yield(sighting)
                } else if let sighting = HCIMedium.beaconSighting(from: report) {
                    medium.beacons.sink.yield(sighting)
                }
            }
        case .hardwareError(let code):
            throw .hardwareError(code: code)
        case .commandComplete, .commandStatus, .other:
            break
        }
    }
}

extension HCIMedium {
    /// The sighting in an advertising report, if it carries nearbyd's frame.
    static func sighting(from report: AdvertisingReport, txPower: Int, seenAtMilliseconds: UInt64) -> Sighting? {
        guard let token = TokenFrame.token(inAdvertisingData: report.data) else { return nil }
        return Sighting(token: token, medium: .ble, rssi: report.rssi, txPower: txPower, seenAtMilliseconds: seenAtMilliseconds)
    }

    /// The beacon in an advertising report, if it carries one.
    static func beaconSighting(from report: AdvertisingReport) -> BeaconSighting? {
        guard let frame = BeaconFrame.parse(advertisingData: report.data) else { return nil }
        return BeaconSighting(frame: frame, sender: "\(report.address)", rssi: report.rssi)
    }
}
