import CBluetooth
import Glibc
import Mediums
import NearbyCore

/// What went wrong in the HCI backend, and at which step.
enum HCIError: Error, CustomStringConvertible {
    /// The configured device is not named `hci<N>`.
    case invalidDeviceName(String)
    /// A system call failed: `operation` says which, on what.
    case system(_ operation: String, errno: Int32)
    /// The controller answered a command with an error status.
    case commandFailed(opcode: UInt16, status: UInt8)
    /// The controller did not answer a command in time.
    case commandTimedOut(opcode: UInt16)
    /// The controller reported a hardware error; it must be reset.
    case hardwareError(code: UInt8)
    /// The device went down or away under an open socket.
    case deviceLost(String)

    /// What the error means for whoever uses the medium: refusals are the
    /// system's (capabilities: CAP_NET_RAW for the raw channel's commands,
    /// CAP_NET_ADMIN to bring a device up or down and for the user channel);
    /// everything else is a device that is not there or not working.
    var condition: MediumCondition {
        switch self {
        case .system(_, let code) where code == EPERM || code == EACCES: .refused
        default: .unavailable
        }
    }

    var description: String {
        switch self {
        case .invalidDeviceName(let name):
            "invalid HCI device name \"\(name)\" (expected hci0, hci1, …)"
        case .system(let operation, let code):
            "\(operation): \(String(cString: strerror(code))) (errno \(code))"
        case .commandFailed(let opcode, let status):
            "\(HCICommand.name(of: opcode)) failed: \(HCIStatus.describe(status))"
        case .commandTimedOut(let opcode):
            "\(HCICommand.name(of: opcode)): no Command Complete or Command Status in time"
        case .hardwareError(let code):
            "the controller reported hardware error 0x\(String(code, radix: 16))"
        case .deviceLost(let detail):
            "the device went away: \(detail)"
        }
    }
}

/// An HCI socket bound to one controller, on the raw or the user channel.
///
/// It owns the descriptor and keeps the C structs and pointers to itself. It
/// is not Sendable on purpose: one thread (``HCIMedium``'s) opens it, uses it
/// and closes it, so no two commands or reads ever interleave on it.
final class HCISocket {
    /// What waiting for the socket ended with.
    enum Wait {
        /// One packet, H4 type byte first.
        case packet([UInt8])
        /// The wake-up descriptor was signalled (and has been drained).
        case woken
        case timedOut
    }

    let channel: HCIMedium.Channel
    let deviceIndex: UInt16
    private var descriptor: Int32
    private var buffer = [UInt8](repeating: 0, count: 4096)

    private init(descriptor: Int32, channel: HCIMedium.Channel, deviceIndex: UInt16) {
        self.descriptor = descriptor
        self.channel = channel
        self.deviceIndex = deviceIndex
    }

    deinit { close() }

    /// Opens `hci<deviceIndex>` on `channel`.
    ///
    /// - Raw channel: the kernel keeps managing the device. Brings it up
    ///   (HCIDEVUP) if it is down, binds with `hci_open_dev`
    ///   (HCI_CHANNEL_RAW), and sets the socket's HCI_FILTER to the events
    ///   nearbyd reads, since a raw socket otherwise receives none.
    /// - User channel: exclusive. Takes the device down (HCIDEVDOWN) if it is
    ///   up, since the kernel refuses the bind of a device that is up (EBUSY),
    ///   then binds with HCI_CHANNEL_USER; the kernel opens the device for
    ///   us, without initialising it, and detaches it from bluetoothd
    ///   (mgmt Index Removed) until the socket is closed. HCI_FILTER does not
    ///   apply on this channel: every packet arrives.
    ///
    /// On a kernel without Bluetooth the first socket() fails with
    /// EAFNOSUPPORT; with no such device, HCIGETDEVINFO fails with ENODEV.
    static func open(deviceIndex: UInt16, channel: HCIMedium.Channel) throws(HCIError) -> HCISocket {
        let device = "hci\(deviceIndex)"
        let isUp = try isUp(deviceIndex: deviceIndex)
        switch channel {
        case .raw:
            if !isUp {
                try control("HCIDEVUP on \(device)", alsoFine: EALREADY) { nearby_hci_dev_up($0, Int32(deviceIndex)) }
            }
            let descriptor = hci_open_dev(Int32(deviceIndex))
            guard descriptor >= 0 else { throw .system("binding \(device) on the raw channel", errno: errno) }
            let socket = HCISocket(descriptor: descriptor, channel: channel, deviceIndex: deviceIndex)
            try socket.setRawFilter()
            return socket
        case .user:
            if isUp {
                try control("HCIDEVDOWN on \(device)", alsoFine: EALREADY) { nearby_hci_dev_down($0, Int32(deviceIndex)) }
            }
            let descriptor = newSocket()
            guard descriptor >= 0 else { throw .system("socket(AF_BLUETOOTH)", errno: errno) }
            let socket = HCISocket(descriptor: descriptor, channel: channel, deviceIndex: deviceIndex)
            // struct sockaddr_hci (hci.h): family, device index, channel.
            var address = sockaddr_hci()
            address.hci_family = sa_family_t(AF_BLUETOOTH)
            address.hci_dev = deviceIndex
            address.hci_channel = UInt16(HCI_CHANNEL_USER)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_hci>.stride))
                }
            }
            guard bound == 0 else { throw .system("binding \(device) on the user channel", errno: errno) }
            return socket
        }
    }

    /// Whether `hci<deviceIndex>` is up. (hci_devinfo opens, uses and
    /// closes a socket of its own, and keeps the ioctl's errno.)
    static func isUp(deviceIndex: UInt16) throws(HCIError) -> Bool {
        var info = hci_dev_info()
        guard hci_devinfo(Int32(deviceIndex), &info) == 0 else {
            throw .system("HCIGETDEVINFO on hci\(deviceIndex)", errno: errno)
        }
        return info.flags & (1 << UInt32(HCI_UP)) != 0
    }

    /// Writes one command packet.
    func send(_ command: HCICommand) throws(HCIError) {
        let packet = command.packet
        while true {
            let written = packet.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if written == packet.count { return }
            if written < 0, errno == EINTR { continue }
            let code = written < 0 ? errno : EIO
            throw .system("writing \(command) to hci\(deviceIndex)", errno: code)
        }
    }

    /// Waits for the next packet until `deadline` (nil: for ever), or until
    /// `wakeDescriptor`, an eventfd, is signalled. A packet that is waiting
    /// comes first; the eventfd is drained whenever it is seen.
    func next(until deadline: ContinuousClock.Instant?, wakeDescriptor: Int32? = nil) throws(HCIError) -> Wait {
        var fds = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
        if let wakeDescriptor { fds.append(pollfd(fd: wakeDescriptor, events: Int16(POLLIN), revents: 0)) }
        while true {
            let ready = poll(&fds, nfds_t(fds.count), Self.pollTimeout(until: deadline))
            if ready < 0 {
                if errno == EINTR { continue }
                throw .system("poll", errno: errno)
            }
            if ready == 0 { return .timedOut }
            var woken = false
            if fds.count > 1, fds[1].revents != 0 {
                var count: UInt64 = 0
                _ = Glibc.read(fds[1].fd, &count, MemoryLayout<UInt64>.size)
                woken = true
            }
            let events = fds[0].revents
            if events & Int16(POLLNVAL) != 0 { throw .deviceLost("the socket is no longer valid") }
            // POLLERR/POLLHUP: the read below reports the socket's error
            // (EPIPE once the kernel unregisters the device).
            if events & Int16(POLLIN | POLLERR | POLLHUP) != 0 { return .packet(try readPacket()) }
            if woken { return .woken }
        }
    }

    private func readPacket() throws(HCIError) -> [UInt8] {
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count > 0 { return Array(buffer[0..<count]) }
            if count < 0, errno == EINTR { continue }
            if count == 0 { throw .deviceLost("end of file on hci\(deviceIndex)") }
            throw .system("reading from hci\(deviceIndex)", errno: errno)
        }
    }

    func close() {
        guard descriptor >= 0 else { return }
        _ = Glibc.close(descriptor)
        descriptor = -1
    }

    /// Packet type events; event codes Command Complete, Command Status,
    /// Hardware Error and LE Meta; any opcode (`struct hci_filter`, set with
    /// the hci_lib.h helpers as hcitool does). The kernel reduces the filter
    /// to its security filter, which lacks LE Meta, for a process without
    /// CAP_NET_RAW: such a process could not send the LE commands anyway.
    private func setRawFilter() throws(HCIError) {
        var filter = hci_filter()
        hci_filter_clear(&filter)
        hci_filter_set_ptype(Int32(HCI_EVENT_PKT), &filter)
        hci_filter_set_event(Int32(EVT_CMD_COMPLETE), &filter)
        hci_filter_set_event(Int32(EVT_CMD_STATUS), &filter)
        hci_filter_set_event(Int32(EVT_HARDWARE_ERROR), &filter)
        hci_filter_set_event(Int32(EVT_LE_META_EVENT), &filter)
        guard setsockopt(descriptor, SOL_HCI, HCI_FILTER, &filter, Self.filterLength) == 0 else {
            throw .system("setting HCI_FILTER on hci\(deviceIndex)", errno: errno)
        }
    }

    /// The option length of HCI_FILTER: C's sizeof(struct hci_filter), tail
    /// padding included (16, where Swift's size is 14). Recent kernels reject
    /// a shorter option with EINVAL (`bt_copy_from_sockptr`, then
    /// `copy_safe_from_sockptr`, in hci_sock_setsockopt_old).
    static let filterLength = socklen_t(MemoryLayout<hci_filter>.stride)

    /// A new, unbound HCI socket.
    private static func newSocket() -> Int32 {
        socket(AF_BLUETOOTH, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), BTPROTO_HCI)
    }

    /// Runs a device ioctl on a short-lived control socket, as hciconfig does.
    private static func control(_ operation: String, alsoFine: Int32, _ call: (Int32) -> Int32) throws(HCIError) {
        let control = newSocket()
        guard control >= 0 else { throw .system("socket(AF_BLUETOOTH)", errno: errno) }
        defer { _ = Glibc.close(control) }
        if call(control) < 0, errno != alsoFine { throw .system(operation, errno: errno) }
    }

    /// Milliseconds for poll(2) until `deadline`, rounded up so that a wait
    /// does not end just before it; -1 for none.
    static func pollTimeout(until deadline: ContinuousClock.Instant?) -> Int32 {
        guard let deadline else { return -1 }
        let remaining = deadline - .now
        guard remaining > .zero else { return 0 }
        let (seconds, attoseconds) = remaining.components
        let milliseconds = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int32(clamping: milliseconds)
    }
}
