import BluetoothHCI
import BluetoothLE
import NearbyCore
import Testing

/// Every command nearbyd sends, as the bytes written to the socket: H4 type
/// 0x01, opcode little-endian, parameter length, parameters (Core spec v5.3,
/// Vol 4, Part E, §5.4.1; the structs of BlueZ's hci.h).
@Suite struct HCICommandTests {
    @Test func reset() {
        #expect(HCICommand.reset.packet == [0x01, 0x03, 0x0C, 0x00])
    }

    /// The default mask after reset (0x00001FFFFFFFFFFF) plus bit 61, LE Meta.
    @Test func setEventMaskEnablesLEMeta() {
        #expect(HCICommand.setEventMask(HCICommand.eventMaskWithLEMeta).packet
            == [0x01, 0x01, 0x0C, 0x08, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0x00, 0x20])
    }

    @Test func leSetEventMaskEnablesAdvertisingReports() {
        #expect(HCICommand.leSetEventMask(HCICommand.leEventMaskAdvertisingReports).packet
            == [0x01, 0x01, 0x20, 0x08, 0x02, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00])
    }

    @Test func leSetRandomAddressSendsTheWireOrder() {
        let address = DeviceAddress(littleEndian: [0xBC, 0x9A, 0x78, 0x56, 0x34, 0x12])!
        #expect(HCICommand.leSetRandomAddress(address).packet
            == [0x01, 0x05, 0x20, 0x06, 0xBC, 0x9A, 0x78, 0x56, 0x34, 0x12])
    }

    /// 200–270 ms = 0x0140–0x01B0; ADV_NONCONN_IND, own address random, no
    /// peer, channels 37-39, no filter: 15 bytes.
    @Test func leSetAdvertisingParameters() {
        let packet = HCICommand.leSetAdvertisingParameters(.default).packet
        #expect(packet == [
            0x01, 0x06, 0x20, 0x0F,
            0x40, 0x01, 0xB0, 0x01,
            0x03, 0x01, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x07, 0x00,
        ])
        #expect(packet.count == 4 + 15)
    }

    /// Flags 02 01 04, then the token frame (26 bytes): 29 significant
    /// bytes, padded to 31, after the length byte: always 32 parameter bytes.
    @Test func leSetAdvertisingDataCarriesFlagsAndTheTokenFrame() {
        let token = Token(hex: "0011223344556677")!
        let packet = HCICommand.leSetAdvertisingData(AdvertisingData.carrying(token)).packet
        let expected: [UInt8] = [
            0x01, 0x08, 0x20, 0x20,
            0x1D,
            0x02, 0x01, 0x04,
            0x19, 0x21,
            0x3b, 0x18, 0xb8, 0x43, 0xcc, 0xcd, 0x6f, 0xb5, 0xd3, 0x4c, 0x89, 0x77, 0x06, 0xac, 0x6b, 0x9a,
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
            0x00, 0x00,
        ]
        #expect(packet == expected)
        #expect(packet.count == 4 + 32)
        // What a scanner receives back is read by the shared frame code.
        #expect(TokenFrame.token(inAdvertisingData: Array(packet[5...])) == token)
    }

    @Test func shortAdvertisingDataIsPaddedTo31() {
        let packet = HCICommand.leSetAdvertisingData([0x02, 0x01, 0x04]).packet
        #expect(packet.count == 4 + 32)
        #expect(Array(packet[0..<8]) == [0x01, 0x08, 0x20, 0x20, 0x03, 0x02, 0x01, 0x04])
        #expect(packet[8...].allSatisfy { $0 == 0 })
    }

    @Test func leSetAdvertisingEnable() {
        #expect(HCICommand.leSetAdvertisingEnable(true).packet == [0x01, 0x0A, 0x20, 0x01, 0x01])
        #expect(HCICommand.leSetAdvertisingEnable(false).packet == [0x01, 0x0A, 0x20, 0x01, 0x00])
    }

    /// Passive; interval then window; own address public; no filter.
    @Test func leSetScanParametersForEachMode() {
        #expect(HCICommand.leSetScanParameters(.full).packet
            == [0x01, 0x0B, 0x20, 0x07, 0x00, 0x60, 0x00, 0x60, 0x00, 0x00, 0x00])
        #expect(HCICommand.leSetScanParameters(.lowPower).packet
            == [0x01, 0x0B, 0x20, 0x07, 0x00, 0x80, 0x0C, 0xE0, 0x01, 0x00, 0x00])
    }

    @Test func scanModesMapToDutyCycles() {
        #expect(ScanParameters(mode: .off) == nil)
        let full = ScanParameters(mode: .full)!
        #expect(full.window == full.interval)
        let low = ScanParameters(mode: .lowPower)!
        #expect(low.interval > full.interval)
        #expect(Double(low.window) / Double(low.interval) <= 0.15)
        // A window covers one advertising interval of the default (270 ms + 10 ms delay).
        #expect(Double(low.window) * 0.625 >= 280)
        // A device is heard more often than nearbyd's default lost timeout (3 s).
        #expect(Double(low.interval) * 0.625 < 3000)
    }

    /// Enable, then Filter_Duplicates, which nearbyd leaves off.
    @Test func leSetScanEnable() {
        #expect(HCICommand.leSetScanEnable(true).packet == [0x01, 0x0C, 0x20, 0x02, 0x01, 0x00])
        #expect(HCICommand.leSetScanEnable(false).packet == [0x01, 0x0C, 0x20, 0x02, 0x00, 0x00])
    }

    @Test func intervalsConvertToUnitsAndAreClamped() {
        #expect(AdvertisingParameters(interval: .milliseconds(200) ... .milliseconds(270))
            == AdvertisingParameters(minimumInterval: 0x0140, maximumInterval: 0x01B0))
        // Rounded to the nearest 0.625 ms.
        #expect(AdvertisingParameters(interval: .microseconds(100_300) ... .microseconds(100_400)).minimumInterval == 160)
        #expect(AdvertisingParameters(interval: .microseconds(100_300) ... .microseconds(100_400)).maximumInterval == 161)
        // Below 100 ms (non-connectable, before Core 5.0) and above 10.24 s.
        let clamped = AdvertisingParameters(interval: .milliseconds(20) ... .seconds(20))
        #expect(clamped.minimumInterval == 0x00A0)
        #expect(clamped.maximumInterval == 0x4000)
        let inverted = AdvertisingParameters(minimumInterval: 0x0200, maximumInterval: 0x0100)
        #expect(inverted.maximumInterval == inverted.minimumInterval)
        let scan = ScanParameters(interval: 0x0010, window: 0x0020)
        #expect(scan.window == scan.interval)
    }

    @Test func opcodesHaveTheirSpecNames() {
        #expect(HCICommand.leSetScanEnable(true).description == "LE Set Scan Enable")
        #expect(HCICommand.name(of: 0x2041) == "command 0x2041")
        #expect(HCIStatus.describe(0x0C) == "Command Disallowed (0x0C)")
        #expect(HCIStatus.describe(0x99) == "error 0x99")
    }
}
