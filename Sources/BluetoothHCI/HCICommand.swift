import BluetoothLE
import Mediums
import NearbyCore

/// One HCI command, ready to be written to an HCI socket.
///
/// Byte layouts are those of the Core spec v5.3, Vol 4, Part E, §5.4.1 (the
/// command packet) and §7.3/§7.8 (the commands), and of the packed structs of
/// BlueZ's `lib/hci.h` named with each command below. Every multi-byte field
/// is little-endian.
public struct HCICommand: Equatable, Sendable, CustomStringConvertible {
    /// OGF in the top six bits, OCF in the low ten (`cmd_opcode_pack` in hci.h).
    public let opcode: UInt16
    public let parameters: [UInt8]

    public init(opcode: UInt16, parameters: [UInt8] = []) {
        precondition(parameters.count <= 255, "HCI command parameters are at most 255 bytes")
        self.opcode = opcode
        self.parameters = parameters
    }

    /// The packet as written to an HCI socket on either channel: the H4
    /// packet type (`HCI_COMMAND_PKT`, 0x01), the opcode, the parameter
    /// length, the parameters.
    public var packet: [UInt8] {
        [0x01, UInt8(opcode & 0xff), UInt8(opcode >> 8), UInt8(parameters.count)] + parameters
    }

    public var description: String { Self.name(of: opcode) }

    /// The opcodes nearbyd sends.
    public enum Opcode {
        /// OGF 0x03 (`OGF_HOST_CTL`), OCF 0x0001 (`OCF_SET_EVENT_MASK`).
        public static let setEventMask: UInt16 = 0x0C01
        /// OGF 0x03, OCF 0x0003 (`OCF_RESET`).
        public static let reset: UInt16 = 0x0C03
        /// OGF 0x08 (`OGF_LE_CTL`), OCF 0x0001 (`OCF_LE_SET_EVENT_MASK`).
        public static let leSetEventMask: UInt16 = 0x2001
        /// OCF 0x0005 (`OCF_LE_SET_RANDOM_ADDRESS`).
        public static let leSetRandomAddress: UInt16 = 0x2005
        /// OCF 0x0006 (`OCF_LE_SET_ADVERTISING_PARAMETERS`).
        public static let leSetAdvertisingParameters: UInt16 = 0x2006
        /// OCF 0x0008 (`OCF_LE_SET_ADVERTISING_DATA`).
        public static let leSetAdvertisingData: UInt16 = 0x2008
        /// OCF 0x000A (`OCF_LE_SET_ADVERTISE_ENABLE`).
        public static let leSetAdvertisingEnable: UInt16 = 0x200A
        /// OCF 0x000B (`OCF_LE_SET_SCAN_PARAMETERS`).
        public static let leSetScanParameters: UInt16 = 0x200B
        /// OCF 0x000C (`OCF_LE_SET_SCAN_ENABLE`).
        public static let leSetScanEnable: UInt16 = 0x200C
    }

    /// The command's name in the Core spec, for logs.
    public static func name(of opcode: UInt16) -> String {
        switch opcode {
        case Opcode.setEventMask: "Set Event Mask"
        case Opcode.reset: "Reset"
        case Opcode.leSetEventMask: "LE Set Event Mask"
        case Opcode.leSetRandomAddress: "LE Set Random Address"
        case Opcode.leSetAdvertisingParameters: "LE Set Advertising Parameters"
        case Opcode.leSetAdvertisingData: "LE Set Advertising Data"
        case Opcode.leSetAdvertisingEnable: "LE Set Advertising Enable"
        case Opcode.leSetScanParameters: "LE Set Scan Parameters"
        case Opcode.leSetScanEnable: "LE Set Scan Enable"
        default: "command 0x" + String(opcode, radix: 16, uppercase: true)
        }
    }

    // MARK: Controller set-up (user channel only: on the raw channel the kernel did it)

    /// HCI_Reset (§7.3.2): no parameters.
    public static let reset = HCICommand(opcode: Opcode.reset)

    /// Set_Event_Mask (§7.3.1): the 8-byte mask, little-endian.
    public static func setEventMask(_ mask: UInt64) -> HCICommand {
        HCICommand(opcode: Opcode.setEventMask, parameters: littleEndian(mask, bytes: 8))
    }

    /// The controller's default event mask after a reset (§7.3.1:
    /// 0x00001FFFFFFFFFFF) plus bit 61, "LE Meta event", which the default
    /// lacks and without which no advertising report reaches the host.
    public static let eventMaskWithLEMeta: UInt64 = 0x0000_1FFF_FFFF_FFFF | 1 << 61

    /// LE_Set_Event_Mask (§7.8.1, `le_set_event_mask_cp`): the 8-byte mask.
    public static func leSetEventMask(_ mask: UInt64) -> HCICommand {
        HCICommand(opcode: Opcode.leSetEventMask, parameters: littleEndian(mask, bytes: 8))
    }

    /// Bit 1, "LE Advertising Report event", and bit 12, "LE Extended
    /// Advertising Report event" (§7.8.1): the LE events nearbyd reads. Some
    /// controllers report legacy advertisements as extended reports.
    public static let leEventMaskAdvertisingReports: UInt64 = 1 << 1 | 1 << 12

    // MARK: Advertising

    /// LE_Set_Random_Address (§7.8.4, `le_set_random_address_cp`): the
    /// 6-byte address. The controller refuses it while advertising is enabled
    /// (Command Disallowed), and older ones also while scanning.
    public static func leSetRandomAddress(_ address: DeviceAddress) -> HCICommand {
        HCICommand(opcode: Opcode.leSetRandomAddress, parameters: address.bytes)
    }

    /// LE_Set_Advertising_Parameters (§7.8.5,
    /// `le_set_advertising_parameters_cp`, 15 bytes).
    public static func leSetAdvertisingParameters(_ parameters: AdvertisingParameters) -> HCICommand {
        HCICommand(opcode: Opcode.leSetAdvertisingParameters, parameters: parameters.bytes)
    }

    /// LE_Set_Advertising_Data (§7.8.7, `le_set_advertising_data_cp`): the
    /// significant length, then always 31 bytes of data, zero-padded.
    /// `data` must be at most 31 bytes.
    public static func leSetAdvertisingData(_ data: [UInt8]) -> HCICommand {
        precondition(data.count <= AdvertisingData.maximumLength, "legacy advertising data is at most 31 bytes")
        let padding = [UInt8](repeating: 0, count: AdvertisingData.maximumLength - data.count)
        return HCICommand(opcode: Opcode.leSetAdvertisingData, parameters: [UInt8(data.count)] + data + padding)
    }

    /// LE_Set_Advertising_Enable (§7.8.9, `le_set_advertise_enable_cp`).
    public static func leSetAdvertisingEnable(_ enabled: Bool) -> HCICommand {
        HCICommand(opcode: Opcode.leSetAdvertisingEnable, parameters: [enabled ? 0x01 : 0x00])
    }

    // MARK: Scanning

    /// LE_Set_Scan_Parameters (§7.8.10, `le_set_scan_parameters_cp`, 7
    /// bytes). Refused while scanning is enabled.
    public static func leSetScanParameters(_ parameters: ScanParameters) -> HCICommand {
        HCICommand(opcode: Opcode.leSetScanParameters, parameters: parameters.bytes)
    }

    /// LE_Set_Scan_Enable (§7.8.11, `le_set_scan_enable_cp`): enable, then
    /// Filter_Duplicates. nearbyd never lets the controller filter
    /// duplicates: it would drop a rotated token from an address it has
    /// already reported, and the RSSI of every later advertisement.
    public static func leSetScanEnable(_ enabled: Bool, filterDuplicates: Bool = false) -> HCICommand {
        HCICommand(opcode: Opcode.leSetScanEnable, parameters: [enabled ? 0x01 : 0x00, filterDuplicates ? 0x01 : 0x00])
    }

    static func littleEndian(_ value: UInt64, bytes: Int) -> [UInt8] {
        (0..<bytes).map { UInt8(truncatingIfNeeded: value >> (8 * UInt64($0))) }
    }
}

/// What LE_Set_Advertising_Parameters says: nearbyd's advertisement is
/// non-connectable and undirected (ADV_NONCONN_IND), from a random address,
/// on all three primary channels, with no filter policy; only the interval is
/// a choice.
public struct AdvertisingParameters: Equatable, Sendable {
    /// The controller picks an interval in this range (units of 0.625 ms).
    public var minimumInterval: UInt16
    public var maximumInterval: UInt16

    /// The interval range allowed for a non-connectable advertisement by every
    /// controller version: 0x00A0 (100 ms), the floor before Core 5.0, to
    /// 0x4000 (10.24 s) (§7.8.5).
    public static let allowedIntervals: ClosedRange<UInt16> = 0x00A0...0x4000

    /// Both in units of 0.625 ms, clamped into ``allowedIntervals``; the
    /// maximum no lower than the minimum.
    public init(minimumInterval: UInt16, maximumInterval: UInt16) {
        let low = clamp(minimumInterval, to: Self.allowedIntervals)
        self.minimumInterval = low
        self.maximumInterval = max(low, clamp(maximumInterval, to: Self.allowedIntervals))
    }

    /// The same from durations, rounded to the nearest 0.625 ms.
    public init(interval: ClosedRange<Duration>) {
        self.init(minimumInterval: Self.units(interval.lowerBound), maximumInterval: Self.units(interval.upperBound))
    }

    /// nearbyd's default: 200–270 ms, as Exposure Notification used
    /// (0x0140–0x01B0).
    public static let `default` = AdvertisingParameters(interval: .milliseconds(200) ... .milliseconds(270))

    /// The 15 bytes of `le_set_advertising_parameters_cp`.
    var bytes: [UInt8] {
        HCICommand.littleEndian(UInt64(minimumInterval), bytes: 2)
            + HCICommand.littleEndian(UInt64(maximumInterval), bytes: 2)
            + [
                0x03, // Advertising_Type: ADV_NONCONN_IND
                0x01, // Own_Address_Type: random (set with LE_Set_Random_Address first)
                0x00, // Peer_Address_Type: unused for undirected advertising
                0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // Peer_Address: unused
                0x07, // Advertising_Channel_Map: 37, 38 and 39
                0x00, // Advertising_Filter_Policy: anyone may scan (nobody can connect)
            ]
    }

    /// A duration in units of 0.625 ms (625 µs), saturating at 0xFFFF.
    static func units(_ duration: Duration) -> UInt16 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 0 }
        let microseconds = Double(seconds) * 1_000_000 + Double(attoseconds) / 1_000_000_000_000
        return UInt16(clamping: Int((microseconds / 625).rounded()))
    }
}

/// What LE_Set_Scan_Parameters says: always passive (nearbyd only reads
/// advertisements, it never asks for scan responses, so it sends nothing and
/// its own address does not matter), no filter policy; the interval and the
/// window make the duty cycle.
public struct ScanParameters: Equatable, Sendable {
    /// How often the controller starts listening, in units of 0.625 ms.
    public var interval: UInt16
    /// How long it listens each time, at most `interval`.
    public var window: UInt16

    /// Both in units of 0.625 ms, within 0x0004...0x4000 (§7.8.10), the
    /// window no longer than the interval.
    public init(interval: UInt16, window: UInt16) {
        let range: ClosedRange<UInt16> = 0x0004...0x4000
        self.interval = clamp(interval, to: range)
        self.window = min(clamp(window, to: range), self.interval)
    }

    /// Listening all the time: a 60 ms window every 60 ms (the kernel's own
    /// default interval), one advertising channel after the other.
    public static let full = ScanParameters(interval: 0x0060, window: 0x0060)

    /// Listening 15% of the time: 300 ms every 2 s. The window is longer than
    /// the default advertising interval (at most 270 ms plus the spec's
    /// 10 ms of random delay), so each window hears a device advertising
    /// at that interval; every 2 s keeps a device heard within nearbyd's
    /// default lost timeout (3 s).
    public static let lowPower = ScanParameters(interval: 0x0C80, window: 0x01E0)

    /// The parameters for a scan mode other than `.off`.
    public init?(mode: ScanMode) {
        switch mode {
        case .off: return nil
        case .lowPower: self = .lowPower
        case .full: self = .full
        }
    }

    /// The 7 bytes of `le_set_scan_parameters_cp`.
    var bytes: [UInt8] {
        [0x00] // LE_Scan_Type: passive
            + HCICommand.littleEndian(UInt64(interval), bytes: 2)
            + HCICommand.littleEndian(UInt64(window), bytes: 2)
            + [
                0x00, // Own_Address_Type: public (a passive scan transmits nothing, and a
                      // random type would need a random address set before any advertising)
                0x00, // Scanning_Filter_Policy: accept all advertisements
            ]
    }
}

/// The advertising data nearbyd puts on the air from the HCI backend.
public enum AdvertisingData {
    /// A legacy advertisement's data is at most 31 bytes (Core spec v5.3,
    /// Vol 3, Part C, §11).
    public static let maximumLength = 31

    /// The Flags AD structure (Vol 3, Part C, §11 and Supplement Part A,
    /// §1.3): length 2, type 0x01, "BR/EDR Not Supported" (0x04) and no
    /// discoverable bit, since a broadcaster is not discoverable. The same
    /// bytes the kernel writes for a bluetoothd broadcast advertisement on a
    /// controller without BR/EDR (doc/architecture.md, "BLE: what the
    /// backends rely on", Advertising data and Flags).
    public static let flags: [UInt8] = [0x02, 0x01, 0x04]

    /// Flags, then nearbyd's token frame: 29 bytes.
    public static func carrying(_ token: Token) -> [UInt8] {
        flags + TokenFrame.advertisingData(for: token)
    }
}

private func clamp(_ value: UInt16, to range: ClosedRange<UInt16>) -> UInt16 {
    min(max(value, range.lowerBound), range.upperBound)
}
