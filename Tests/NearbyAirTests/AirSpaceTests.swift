import NearbyAir
import NearbyCore
import Testing

@Suite struct AirSpaceTests {
    let token: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]

    func space(_ parameters: AirParameters = AirParameters()) throws -> AirSpace {
        var space = AirSpace(parameters: parameters)
        try space.attach("A", at: Position(x: 0, y: 0))
        try space.attach("B", at: Position(x: 10, y: 0))
        try space.attach("C", at: Position(x: 0, y: 50))
        return space
    }

    @Test func signalFollowsThePathLossModel() throws {
        var space = try space()
        _ = try space.scan("B", medium: .ble, enabled: true)
        let first = try space.advertise("A", id: "t", medium: .ble, payload: token, txPower: -59)
        // -59 dBm at 1 m, free space: 20 dB less at 10 m.
        #expect(first == [AirSpace.Delivery(recipient: "B", heard: Heard(medium: .ble, payload: token, rssi: -79, txPower: -59, sender: "A"))])
        #expect(PathLoss.distance(rssi: -79, txPower: -59) == 10)
    }

    @Test func onlyListenersInRangeHear() throws {
        var space = try space()
        _ = try space.scan("B", medium: .ble, enabled: true)
        _ = try space.scan("C", medium: .ble, enabled: true)
        _ = try space.advertise("A", id: "t", medium: .ble, payload: token, txPower: -59)
        // C at 50 m would hear -93 dBm, under the -90 dBm sensitivity; A does not hear itself.
        #expect(space.tick().map(\.recipient) == ["B"])
        #expect(AirParameters().range(txPower: -59) > 35 && AirParameters().range(txPower: -59) < 36)
    }

    @Test func listenersOfAnotherMediumHearNothing() throws {
        var space = try space()
        _ = try space.scan("B", medium: .audio, enabled: true)
        #expect(try space.advertise("A", id: "t", medium: .ble, payload: token, txPower: -59).isEmpty)
    }

    @Test func movingChangesWhoHears() throws {
        var space = try space()
        _ = try space.scan("B", medium: .ble, enabled: true)
        _ = try space.advertise("A", id: "t", medium: .ble, payload: token, txPower: -59)
        #expect(try space.move("B", to: Position(x: 100, y: 0)).isEmpty)
        #expect(space.tick().isEmpty)
        let back = try space.move("B", to: Position(x: 1, y: 0))
        #expect(back.map(\.heard.rssi) == [-59])
    }

    @Test func stoppedBroadcastsAndDetachedDevicesFallSilent() throws {
        var space = try space()
        _ = try space.scan("B", medium: .ble, enabled: true)
        _ = try space.advertise("A", id: "t", medium: .ble, payload: token, txPower: -59)
        try space.stopAdvertising("A", id: "t")
        #expect(space.tick().isEmpty)
        _ = try space.advertise("A", id: "u", medium: .ble, payload: token, txPower: -59)
        space.detach("A")
        #expect(space.tick().isEmpty)
        #expect(space.deviceNames == ["B", "C"])
    }

    @Test func noiseIsRepeatableForASeed() throws {
        let noisy = AirParameters(noiseSigma: 4, seed: 42)
        func hearings() throws -> [Int] {
            var space = try space(noisy)
            _ = try space.scan("B", medium: .ble, enabled: true)
            _ = try space.advertise("A", id: "t", medium: .ble, payload: token, txPower: -59)
            return (0..<20).flatMap { _ in space.tick().map(\.heard.rssi) }
        }
        let first = try hearings()
        #expect(first == (try hearings()))
        #expect(Set(first).count > 1, "noise varies the RSSI")
    }

    @Test func namesAreUniqueAndDevicesMustAttach() throws {
        var space = try space()
        #expect(throws: AirProtocolError.self) { try space.attach("A", at: Position(x: 0, y: 0)) }
        #expect(throws: AirProtocolError.self) { try space.scan("nobody", medium: .ble, enabled: true) }
        #expect(throws: AirProtocolError.self) { try space.move("nobody", to: Position(x: 0, y: 0)) }
    }
}

@Suite struct AirProtocolTests {
    @Test(arguments: [
        AirRequest.attach(device: "kiosk", position: Position(x: 1, y: 2.5, z: -1)),
        .advertise(id: "t1", medium: .ble, payload: [0, 255, 16], txPower: -59),
        .stopAdvertising(id: "t1"), .scan(medium: .audio, enabled: false),
        .move(device: "kiosk", position: Position(x: 0, y: 0)), .list,
    ])
    func requestsRoundTrip(_ request: AirRequest) throws {
        let decoded = try AirCoding.decodeRequest(AirCoding.encode(id: 7, request))
        #expect(decoded.id == 7)
        #expect(decoded.request == request)
    }

    @Test(arguments: [
        AirMessage.ok(id: 1), .failed(id: 2, message: "no"), .heard(Heard(medium: .ble, payload: [1], rssi: -70, txPower: -59, sender: "A")),
        .devices(id: 3, [AirDevice(name: "A", position: Position(x: 1, y: 2), broadcasts: 1, scanning: [.ble])]),
    ])
    func messagesRoundTrip(_ message: AirMessage) throws {
        #expect(try AirCoding.decodeMessage(AirCoding.encode(message)) == message)
    }

    @Test(arguments: [
        (#""text""#, "one JSON object", nil),
        (#"{"op":"list"}"#, "'id'", nil),
        (#"{"id":3,"op":"fly"}"#, "unknown op", 3),
        (#"{"id":4,"op":"scan","medium":"ble","enabled":1}"#, "'enabled' has the wrong type", nil),
        (#"{"id":5,"op":"scan","medium":"radio","enabled":true}"#, "'medium' has an invalid value", nil),
        (#"{"id":6,"op":"advertise","advert":"a","medium":"ble","payload":"zz","txPower":0}"#, "hex", 6),
        (#"{"id":7,"op":"advertise","advert":"a","medium":"ble","payload":"01","txPower":99}"#, "txPower", 7),
        (#"{"id":8,"op":"attach","device":"","position":[0,0]}"#, "1..64", 8),
        (#"{"id":9,"op":"attach","device":"x","position":[0]}"#, "'position'", nil),
    ] as [(String, String, Int?)])
    func malformedRequestsAreNamed(_ line: String, _ complaint: String, _ id: Int?) {
        #expect {
            _ = try AirCoding.decodeRequest(line)
        } throws: { error in
            guard let error = error as? AirProtocolError else { return false }
            return error.message.contains(complaint) && error.requestID == id
        }
    }

    @Test func beaconsBroadcastUntilRemovedAndMoveLikeDevices() throws {
        var space = AirSpace(parameters: AirParameters())
        try space.attach("phone", at: Position(x: 0, y: 0))
        _ = try space.scan("phone", medium: .ble, enabled: true)
        let payload: [UInt8] = [0x02, 0x01, 0x06]
        let first = try space.placeBeacon("door", at: Position(x: 10, y: 0), payload: payload, txPower: -59)
        #expect(first == [AirSpace.Delivery(recipient: "phone", heard: Heard(medium: .ble, payload: payload, rssi: -79,
                                                                              txPower: -59, sender: "door"))])
        #expect(space.describe().first { $0.name == "door" }?.beacon == true)
        let moved = try space.move("door", to: Position(x: 1, y: 0))
        #expect(moved.map(\.heard.rssi) == [-59])
        // Devices and beacons keep their names apart.
        #expect(throws: AirProtocolError.self) { try space.placeBeacon("phone", at: Position(x: 0, y: 0), payload: payload, txPower: -59) }
        #expect(throws: AirProtocolError.self) { try space.removeBeacon("phone") }
        try space.removeBeacon("door")
        #expect(space.tick().isEmpty)
    }

    @Test func beaconRequestsRoundTripAndAreChecked() throws {
        let place = AirRequest.placeBeacon(name: "door", position: Position(x: 1, y: 2), payload: [1, 2, 3], txPower: -60)
        #expect(try AirCoding.decodeRequest(AirCoding.encode(id: 7, place)) == (7, place))
        #expect(try AirCoding.decodeRequest(AirCoding.encode(id: 8, .removeBeacon(name: "door"))) == (8, .removeBeacon(name: "door")))
        // A legacy advertisement holds 31 bytes.
        let long = AirCoding.encode(id: 9, .placeBeacon(name: "door", position: Position(x: 0, y: 0),
                                                        payload: Array(repeating: 0, count: 32), txPower: -60))
        #expect(throws: AirProtocolError("'payload' must be 1..31 bytes of hex", requestID: 9)) { try AirCoding.decodeRequest(long) }
    }
}
