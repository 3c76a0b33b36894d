/// An HCI event as read from an HCI socket, decoded as far as nearbyd needs.
///
/// The packet is H4-framed, as both the raw and the user channel deliver it:
/// the packet type (`HCI_EVENT_PKT`, 0x04), the event code, the parameter
/// length, the parameters (Core spec v5.3, Vol 4, Part E, §5.4.4).
public enum HCIEvent: Equatable, Sendable {
    /// Command Complete (§7.7.14, `evt_cmd_complete`): the command's opcode
    /// and its return parameters, which for every command nearbyd sends begin
    /// with the status. Opcode 0x0000 only hands out command credits.
    case commandComplete(opcode: UInt16, returnParameters: [UInt8])
    /// Command Status (§7.7.15, `evt_cmd_status`).
    case commandStatus(opcode: UInt16, status: UInt8)
    /// LE Meta event (0x3E, §7.7.65) with subevent LE Advertising Report
    /// (0x02, §7.7.65.2) or LE Extended Advertising Report (0x0D,
    /// §7.7.65.13): the reports that were well-formed and complete.
    case advertisingReports([AdvertisingReport])
    /// Hardware Error (§7.7.16): the controller needs a reset.
    case hardwareError(code: UInt8)
    /// Any other event, or an LE Meta event with another subevent.
    case other(code: UInt8)

    static let packetType: UInt8 = 0x04 // HCI_EVENT_PKT
    static let commandCompleteCode: UInt8 = 0x0E // EVT_CMD_COMPLETE
    static let commandStatusCode: UInt8 = 0x0F // EVT_CMD_STATUS
    static let hardwareErrorCode: UInt8 = 0x10 // EVT_HARDWARE_ERROR
    static let leMetaCode: UInt8 = 0x3E // EVT_LE_META_EVENT
    static let advertisingReportSubevent: UInt8 = 0x02 // EVT_LE_ADVERTISING_REPORT
    static let extendedAdvertisingReportSubevent: UInt8 = 0x0D // EVT_LE_EXT_ADVERTISING_REPORT

    /// Decodes one packet; nil when it is not an event packet, or too short
    /// for its kind. Parameters are bounded by both the declared length and
    /// the bytes actually there, whichever is shorter.
    public init?(packet: [UInt8]) {
        guard packet.count >= 3, packet[0] == Self.packetType else { return nil }
        let code = packet[1]
        let end = min(packet.count, 3 + Int(packet[2]))
        let parameters = packet[3..<end]
        let p = parameters.startIndex
        switch code {
        case Self.commandCompleteCode:
            // ncmd (1), opcode (2), return parameters.
            guard parameters.count >= 3 else { return nil }
            self = .commandComplete(opcode: UInt16(parameters[p + 1]) | UInt16(parameters[p + 2]) << 8,
                                    returnParameters: Array(parameters[(p + 3)...]))
        case Self.commandStatusCode:
            // status (1), ncmd (1), opcode (2): the status comes first here.
            guard parameters.count >= 4 else { return nil }
            self = .commandStatus(opcode: UInt16(parameters[p + 2]) | UInt16(parameters[p + 3]) << 8,
                                  status: parameters[p])
        case Self.hardwareErrorCode:
            guard parameters.count >= 1 else { return nil }
            self = .hardwareError(code: parameters[p])
        case Self.leMetaCode:
            guard parameters.count >= 1 else { return nil }
            switch parameters[p] {
            case Self.advertisingReportSubevent:
                self = .advertisingReports(AdvertisingReport.reports(in: parameters.dropFirst()))
            case Self.extendedAdvertisingReportSubevent:
                // Controllers that advertise extended reporting (and btvirt)
                // report legacy advertisements this way too.
                self = .advertisingReports(AdvertisingReport.extendedReports(in: parameters.dropFirst()))
            default:
                self = .other(code: code)
            }
        default:
            self = .other(code: code)
        }
    }
}

/// One report of an LE Advertising Report event: an advertisement or scan
/// response heard (Core spec v5.3, Vol 4, Part E, §7.7.65.2; `le_advertising_info`).
public struct AdvertisingReport: Equatable, Sendable {
    /// 0x00 ADV_IND, 0x01 ADV_DIRECT_IND, 0x02 ADV_SCAN_IND, 0x03
    /// ADV_NONCONN_IND, 0x04 SCAN_RSP.
    public var eventType: UInt8
    /// 0x00 public, 0x01 random (0x02/0x03: the identity behind a resolved
    /// private address).
    public var addressType: UInt8
    public var address: DeviceAddress
    /// The advertising data: AD structures, at most 31 bytes (229 from an
    /// extended report).
    public var data: [UInt8]
    /// dBm, -127...20; nil when the controller says it has none (127) or
    /// gives a value outside that range.
    public var rssi: Int?

    public init(eventType: UInt8, addressType: UInt8, address: DeviceAddress, data: [UInt8], rssi: Int?) {
        self.eventType = eventType
        self.addressType = addressType
        self.address = address
        self.data = data
        self.rssi = rssi
    }

    /// The reports of one event's parameters after the subevent code:
    /// Num_Reports, then per report Event_Type (1), Address_Type (1),
    /// Address (6), Length_Data (1), Data, RSSI (1).
    ///
    /// The spec draws the fields as parallel arrays; controllers and the
    /// Linux kernel (`hci_le_adv_report_evt` in net/bluetooth/hci_event.c)
    /// lay them out and read them as consecutive records, and so does this.
    /// Like the kernel, a report whose data is longer than 31 bytes is
    /// skipped, and a report that runs past the end stops the reading; the
    /// reports before it are kept. Never more reports than Num_Reports.
    public static func reports(in parameters: ArraySlice<UInt8>) -> [AdvertisingReport] {
        guard let count = parameters.first else { return [] }
        var reports: [AdvertisingReport] = []
        var index = parameters.startIndex + 1
        for _ in 0..<count {
            // Fixed part: 9 bytes, then Length_Data bytes of data, then the RSSI.
            guard parameters.endIndex - index >= 9 else { break }
            let length = Int(parameters[index + 8])
            let next = index + 9 + length + 1
            guard next <= parameters.endIndex else { break }
            defer { index = next }
            guard length <= AdvertisingData.maximumLength else { continue }
            let rssi = AdvertisingReport.rssi(parameters[next - 1])
            reports.append(AdvertisingReport(
                eventType: parameters[index],
                addressType: parameters[index + 1],
                address: DeviceAddress(littleEndian: Array(parameters[(index + 2)..<(index + 8)]))!,
                data: Array(parameters[(index + 9)..<(index + 9 + length)]),
                rssi: rssi
            ))
        }
        return reports
    }
}

extension AdvertisingReport {
    /// Longest data of one extended report (§7.7.65.13: 229 bytes).
    static let maximumExtendedLength = 229

    /// The reports of an LE Extended Advertising Report event's parameters
    /// after the subevent code: Num_Reports, then per report Event_Type (2),
    /// Address_Type (1), Address (6), Primary_PHY, Secondary_PHY,
    /// Advertising_SID, TX_Power, RSSI (1 each), Periodic_Advertising_Interval
    /// (2), Direct_Address_Type (1), Direct_Address (6), Data_Length (1),
    /// Data; consecutive records, as the kernel reads them
    /// (`hci_le_ext_adv_report_evt`).
    ///
    /// A report whose data is incomplete (Event_Type bits 5–6 not 00: more
    /// is coming, or it was truncated) is skipped: a token frame is never
    /// split. The event type becomes the legacy one where the PDU is legacy
    /// (bit 4), and the nearest legacy one otherwise.
    public static func extendedReports(in parameters: ArraySlice<UInt8>) -> [AdvertisingReport] {
        guard let count = parameters.first else { return [] }
        var reports: [AdvertisingReport] = []
        var index = parameters.startIndex + 1
        for _ in 0..<count {
            guard parameters.endIndex - index >= 24 else { break }
            let length = Int(parameters[index + 23])
            let next = index + 24 + length
            guard next <= parameters.endIndex else { break }
            defer { index = next }
            let eventType = UInt16(parameters[index]) | UInt16(parameters[index + 1]) << 8
            guard (eventType >> 5) & 0b11 == 0, length <= maximumExtendedLength else { continue }
            let rssi = AdvertisingReport.rssi(parameters[index + 13])
            reports.append(AdvertisingReport(
                eventType: legacyType(eventType),
                addressType: parameters[index + 2],
                address: DeviceAddress(littleEndian: Array(parameters[(index + 3)..<(index + 9)]))!,
                data: Array(parameters[(index + 24)..<next]),
                rssi: rssi
            ))
        }
        return reports
    }

    /// An RSSI byte: dBm within the spec's -127...+20, or nil for 127 ("not
    /// available") and for the values the spec does not allow.
    static func rssi(_ byte: UInt8) -> Int? {
        let value = Int(Int8(bitPattern: byte))
        return (-127...20).contains(value) ? value : nil
    }

    /// Event_Type bits 0 connectable, 1 scannable, 2 directed, 3 scan response.
    private static func legacyType(_ eventType: UInt16) -> UInt8 {
        if eventType & 0b1000 != 0 { return 0x04 }     // SCAN_RSP
        if eventType & 0b0100 != 0 { return 0x01 }     // ADV_DIRECT_IND
        switch eventType & 0b11 {
        case 0b11: return 0x00                         // ADV_IND
        case 0b10: return 0x02                         // ADV_SCAN_IND
        default: return 0x03                           // ADV_NONCONN_IND
        }
    }
}

/// HCI error codes (Core spec v5.3, Vol 1, Part F), for logs.
public enum HCIStatus {
    public static let success: UInt8 = 0x00
    public static let commandDisallowed: UInt8 = 0x0C

    /// The code's name in the spec, with its value.
    public static func describe(_ status: UInt8) -> String {
        let name: String? = switch status {
        case 0x00: "Success"
        case 0x01: "Unknown HCI Command"
        case 0x03: "Hardware Failure"
        case 0x07: "Memory Capacity Exceeded"
        case 0x0C: "Command Disallowed"
        case 0x11: "Unsupported Feature or Parameter Value"
        case 0x12: "Invalid HCI Command Parameters"
        case 0x1F: "Unspecified Error"
        case 0x3A: "Controller Busy"
        default: nil
        }
        let hex = "0x" + (status < 0x10 ? "0" : "") + String(status, radix: 16, uppercase: true)
        return name.map { "\($0) (\(hex))" } ?? "error \(hex)"
    }
}
