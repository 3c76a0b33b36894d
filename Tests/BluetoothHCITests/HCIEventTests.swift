@testable import BluetoothHCI
import BluetoothLE
import NearbyCore
import Testing

/// Events as read from the socket: H4 type 0x04, event code, length,
/// parameters.
@Suite struct HCIEventTests {
    let token = Token(hex: "0011223344556677")!
    let address: [UInt8] = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06]

    /// One report record: event type, address type, address, length, data, RSSI.
    func record(type: UInt8 = 0x03, data: [UInt8], rssi: UInt8, lengthByte: UInt8? = nil) -> [UInt8] {
        let header: [UInt8] = [type, 0x01] + address
        let length: UInt8 = lengthByte ?? UInt8(data.count)
        return header + [length] + data + [rssi]
    }

    /// An LE Meta event, subevent Advertising Report, of `count` reports.
    func advertisingEvent(count: UInt8, _ records: [UInt8], declaredLength: UInt8? = nil) -> [UInt8] {
        let parameters = [0x02, count] + records
        return [0x04, 0x3E, declaredLength ?? UInt8(parameters.count)] + parameters
    }

    var ourData: [UInt8] { AdvertisingData.carrying(token) }

    /// One extended report record (§7.7.65.13): event type (2), address type,
    /// address, primary and secondary PHY, SID, TX power, RSSI, periodic
    /// interval (2), direct address type and address, data length, data.
    func extendedRecord(type: UInt16 = 0x0010, data: [UInt8], rssi: UInt8, lengthByte: UInt8? = nil) -> [UInt8] {
        let eventType: [UInt8] = [UInt8(type & 0xFF), UInt8(type >> 8)]
        let phys: [UInt8] = [0x01, 0x00, 0xFF, 0x7F, rssi, 0x00, 0x00, 0x00]
        let direct = [UInt8](repeating: 0, count: 6)
        let length: [UInt8] = [lengthByte ?? UInt8(data.count)]
        return eventType + [0x01] + address + phys + direct + length + data
    }

    func extendedEvent(count: UInt8, _ records: [UInt8]) -> [UInt8] {
        let parameters = [0x0D, count] + records
        return [0x04, 0x3E, UInt8(parameters.count)] + parameters
    }

    /// btvirt, and controllers with extended reporting, report a legacy
    /// ADV_NONCONN_IND (event type 0x0010: legacy, complete) this way.
    @Test func extendedReportsOfLegacyAdvertisementsCarryTheToken() throws {
        let event = HCIEvent(packet: extendedEvent(count: 1, extendedRecord(data: ourData, rssi: 0xC4)))
        let expected = AdvertisingReport(eventType: 0x03, addressType: 0x01, address: DeviceAddress(littleEndian: address)!,
                                         data: ourData, rssi: -60)
        #expect(event == .advertisingReports([expected]))
        let sighting = try #require(HCIMedium.sighting(from: expected, txPower: -59, seenAtMilliseconds: 1))
        #expect(sighting.token == token && sighting.rssi == -60)
    }

    @Test func extendedReportsAreReadInTurnAndIncompleteOnesSkipped() {
        let records = extendedRecord(type: 0x0013, data: [0x02, 0x01, 0x06], rssi: 0x7F)   // ADV_IND, no RSSI
            + extendedRecord(type: 0x0020, data: ourData, rssi: 0xC0)                    // more data to come: skipped
            + extendedRecord(type: 0x001B, data: [], rssi: 0xB0)                          // legacy SCAN_RSP
            + extendedRecord(type: 0x0000, data: ourData, rssi: 0xA0)                    // extended PDU, non-connectable
        guard case .advertisingReports(let reports) = HCIEvent(packet: extendedEvent(count: 4, records)) else {
            Issue.record("not advertising reports")
            return
        }
        #expect(reports.map(\.eventType) == [0x00, 0x04, 0x03])
        #expect(reports.map(\.rssi) == [nil, -80, -96])
        #expect(reports[2].data == ourData)
    }

    @Test func aTruncatedExtendedReportStopsTheReading() {
        let whole = extendedRecord(data: ourData, rssi: 0xC4)
        let cut = extendedRecord(data: ourData, rssi: 0xC4, lengthByte: 200)
        guard case .advertisingReports(let reports) = HCIEvent(packet: extendedEvent(count: 3, whole + cut + whole)) else {
            Issue.record("not advertising reports")
            return
        }
        #expect(reports.count == 1)
        // Fewer bytes than a record's fixed part.
        #expect(HCIEvent(packet: extendedEvent(count: 1, Array(whole.prefix(20)))) == .advertisingReports([]))
    }

    @Test func commandCompleteCarriesOpcodeAndStatus() {
        #expect(HCIEvent(packet: [0x04, 0x0E, 0x04, 0x01, 0x06, 0x20, 0x00])
            == .commandComplete(opcode: 0x2006, returnParameters: [0x00]))
        #expect(HCIEvent(packet: [0x04, 0x0E, 0x04, 0x01, 0x0A, 0x20, 0x0C])
            == .commandComplete(opcode: 0x200A, returnParameters: [0x0C]))
        // A credit-only Command Complete (opcode 0).
        #expect(HCIEvent(packet: [0x04, 0x0E, 0x03, 0x01, 0x00, 0x00])
            == .commandComplete(opcode: 0x0000, returnParameters: []))
    }

    /// Command Status puts the status before the opcode.
    @Test func commandStatusCarriesOpcodeAndStatus() {
        #expect(HCIEvent(packet: [0x04, 0x0F, 0x04, 0x0C, 0x01, 0x0C, 0x20])
            == .commandStatus(opcode: 0x200C, status: 0x0C))
    }

    @Test func otherEventsAndOtherPackets() {
        #expect(HCIEvent(packet: [0x04, 0x10, 0x01, 0x07]) == .hardwareError(code: 0x07))
        #expect(HCIEvent(packet: [0x04, 0x05, 0x04, 0x00, 0x40, 0x00, 0x13]) == .other(code: 0x05))
        // LE Meta, subevent LE Connection Complete.
        #expect(HCIEvent(packet: [0x04, 0x3E, 0x02, 0x01, 0x00]) == .other(code: 0x3E))
        // An ACL data packet on the user channel.
        #expect(HCIEvent(packet: [0x02, 0x01, 0x20, 0x00, 0x00]) == nil)
        #expect(HCIEvent(packet: []) == nil)
        #expect(HCIEvent(packet: [0x04, 0x0E]) == nil)
        // Too short for their kind.
        #expect(HCIEvent(packet: [0x04, 0x0E, 0x02, 0x01, 0x06]) == nil)
        #expect(HCIEvent(packet: [0x04, 0x0F, 0x03, 0x00, 0x01, 0x0C]) == nil)
        #expect(HCIEvent(packet: [0x04, 0x3E, 0x00]) == nil)
        // A length beyond the bytes there: bounded by what is there.
        #expect(HCIEvent(packet: [0x04, 0x0F, 0xFF, 0x00, 0x01, 0x0C, 0x20])
            == .commandStatus(opcode: 0x200C, status: 0x00))
    }

    @Test func singleReport() {
        let event = HCIEvent(packet: advertisingEvent(count: 1, record(data: ourData, rssi: 0xC4)))
        let expected = AdvertisingReport(eventType: 0x03, addressType: 0x01,
                                         address: DeviceAddress(littleEndian: address)!, data: ourData, rssi: -60)
        #expect(event == .advertisingReports([expected]))
    }

    @Test func multipleReportsInOneEvent() {
        let other: [UInt8] = [0x02, 0x01, 0x06, 0x03, 0x09, 0x41, 0x42]
        let records = record(type: 0x00, data: other, rssi: 0xB0) + record(data: ourData, rssi: 0xC4)
            + record(type: 0x04, data: [], rssi: 0xD0)
        guard case .advertisingReports(let reports) = HCIEvent(packet: advertisingEvent(count: 3, records)) else {
            Issue.record("not an advertising report event")
            return
        }
        #expect(reports.map(\.eventType) == [0x00, 0x03, 0x04])
        #expect(reports.map(\.data) == [other, ourData, []])
        #expect(reports.map(\.rssi) == [-80, -60, -48])
        #expect(reports.compactMap { TokenFrame.token(inAdvertisingData: $0.data) } == [token])
    }

    @Test func rssi127MeansUnknown() {
        let event = HCIEvent(packet: advertisingEvent(count: 1, record(data: ourData, rssi: 127)))
        guard case .advertisingReports(let reports) = event else {
            Issue.record("not an advertising report event")
            return
        }
        #expect(reports.count == 1)
        #expect(reports.first?.rssi == nil)
    }

    /// The spec's range is -127...+20 dBm; a controller's value outside it
    /// (found by hci-fuzz) says as little as 127 does.
    @Test func rssiOutsideTheSpecsRangeIsUnknown() {
        let values: [UInt8] = [0x81, 0x14, 0x15, 0x7E, 0x80] // -127, 20, 21, 126, -128
        for (extended, packet) in [
            (false, advertisingEvent(count: 5, values.map { record(data: [0x02, 0x01, 0x06], rssi: $0) }.reduce([], +))),
            (true, extendedEvent(count: 5, values.map { extendedRecord(data: [0x02, 0x01, 0x06], rssi: $0) }.reduce([], +))),
        ] {
            guard case .advertisingReports(let reports) = HCIEvent(packet: packet) else {
                Issue.record("not an advertising report event")
                continue
            }
            #expect(reports.map(\.rssi) == [-127, 20, nil, nil, nil], "extended: \(extended)")
        }
    }

    @Test func moreReportsAnnouncedThanPresentKeepsTheWholeOnes() {
        let event = HCIEvent(packet: advertisingEvent(count: 3, record(data: ourData, rssi: 0xC4)))
        #expect(event.reportCount == 1)
    }

    @Test func fewerReportsAnnouncedThanPresentReadsOnlyThose() {
        let records = record(data: ourData, rssi: 0xC4) + record(data: ourData, rssi: 0xC0)
        #expect(HCIEvent(packet: advertisingEvent(count: 1, records)).reportCount == 1)
        #expect(HCIEvent(packet: advertisingEvent(count: 0, records)).reportCount == 0)
    }

    @Test func aReportCutShortIsDropped() {
        var records = record(data: [0x02, 0x01, 0x04], rssi: 0xC4) + record(data: ourData, rssi: 0xC4)
        records.removeLast(3)
        #expect(HCIEvent(packet: advertisingEvent(count: 2, records)).reportCount == 1)
        // Only the fixed part of a record.
        #expect(HCIEvent(packet: advertisingEvent(count: 1, Array(record(data: ourData, rssi: 0).prefix(5))))
            .reportCount == 0)
    }

    /// The event's declared length ends the reports even with bytes after it.
    @Test func theDeclaredLengthBoundsTheReports() {
        let records = record(data: ourData, rssi: 0xC4) + record(data: ourData, rssi: 0xC0)
        let firstOnly = UInt8(2 + record(data: ourData, rssi: 0xC4).count)
        #expect(HCIEvent(packet: advertisingEvent(count: 2, records, declaredLength: firstOnly)).reportCount == 1)
    }

    @Test func aLengthPastTheEndStopsTheReading() {
        let records = record(data: ourData, rssi: 0xC4)
            + record(data: [0x02, 0x01, 0x04], rssi: 0xC4, lengthByte: 200)
        #expect(HCIEvent(packet: advertisingEvent(count: 2, records)).reportCount == 1)
    }

    /// Data longer than a legacy advertisement's 31 bytes is skipped, as the
    /// kernel does, and the reading goes on after it.
    @Test func overlongDataIsSkipped() {
        let long = [UInt8](repeating: 0xAA, count: 40)
        let records = record(data: long, rssi: 0xC4) + record(data: ourData, rssi: 0xC0)
        guard case .advertisingReports(let reports) = HCIEvent(packet: advertisingEvent(count: 2, records)) else {
            Issue.record("not an advertising report event")
            return
        }
        #expect(reports.map(\.data) == [ourData])
    }

    /// Seeded random packets, some shaped like advertising reports: nothing
    /// traps, and what comes out respects the bounds.
    @Test func garbageNeverTraps() {
        var generator = SplitMix64(seed: 0x4843_4900)
        var decoded = 0
        var outOfBounds = 0
        for round in 0..<20_000 {
            let count = Int.random(in: 0...300, using: &generator)
            var packet = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            if round % 2 == 0, packet.count >= 4 {
                packet[0] = 0x04
                packet[1] = 0x3E
                packet[3] = 0x02
            }
            guard case .advertisingReports(let reports) = HCIEvent(packet: packet) else { continue }
            decoded += reports.count
            if reports.count > Int(packet.count > 4 ? packet[4] : 0) || reports.contains(where: { $0.data.count > 31 }) {
                outOfBounds += 1
            }
        }
        #expect(outOfBounds == 0)
        // Some random reports were well-formed enough to decode: the loop did reach the parser.
        #expect(decoded > 0)
    }

    // MARK: Sightings

    @Test func aReportWithOurFrameIsASighting() {
        let flagsNameFrame = [0x02, 0x01, 0x06, 0x03, 0x09, 0x41, 0x42] + TokenFrame.advertisingData(for: token)
        let report = AdvertisingReport(eventType: 0x00, addressType: 0x01,
                                       address: DeviceAddress(littleEndian: address)!, data: flagsNameFrame, rssi: -79)
        let sighting = HCIMedium.sighting(from: report, txPower: -59, seenAtMilliseconds: 1_700_000_000_000)
        #expect(sighting?.token == token)
        #expect(sighting?.medium == .ble)
        #expect(sighting?.rssi == -79)
        #expect(sighting?.txPower == -59)
        // 20 dB below the one-metre power: 10 m with the path-loss exponent 2.
        #expect(abs((sighting?.distanceMeters ?? 0) - 10) < 1e-9)
        #expect(sighting?.seenAtMilliseconds == 1_700_000_000_000)
    }

    @Test func aReportWithoutRSSIIsTakenAsOneMetreAndOthersFramesAreNoSightings() {
        let ours = AdvertisingReport(eventType: 0x03, addressType: 0x01,
                                     address: DeviceAddress(littleEndian: address)!, data: ourData, rssi: nil)
        let sighting = HCIMedium.sighting(from: ours, txPower: -59, seenAtMilliseconds: 0)
        #expect(sighting?.rssi == -59 && sighting?.distanceMeters == 1)
        var theirs = ours
        theirs.rssi = -50
        theirs.data = [0x02, 0x01, 0x06, 0x03, 0x09, 0x41, 0x42]
        #expect(HCIMedium.sighting(from: theirs, txPower: -59, seenAtMilliseconds: 0) == nil)
    }
}

extension Optional where Wrapped == HCIEvent {
    /// How many reports an event decoded to; -1 when it is not a report event.
    var reportCount: Int {
        guard case .advertisingReports(let reports)? = self else { return -1 }
        return reports.count
    }
}
