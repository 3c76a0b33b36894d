import Foundation

extension BeaconFrame {
    /// A frame from a one-line description, as a person types it (what
    /// `nearby-air beacon add` takes). `text` depends on `kind`:
    ///
    /// - Eddystone-UID: `NAMESPACE/INSTANCE` in hex (20 and 12 digits), or
    ///   the 32 digits of the advertised id.
    /// - Eddystone-EID: the 16 hex digits of the ephemeral id.
    /// - Eddystone-URL: the URL.
    /// - Eddystone-TLM: `MILLIVOLTS:CELSIUS:PDUS:SECONDS` (battery, temperature,
    ///   advertising PDUs sent, uptime); an empty battery or temperature is
    ///   "not supported".
    /// - iBeacon: `UUID/MAJOR/MINOR`, the UUID with or without dashes.
    ///
    /// `powerAtOneMetre` is the signal strength the beacon is heard with at
    /// one metre, dBm: iBeacon's measured power; Eddystone declares its power
    /// at 0 m, 41 dB more.
    /// - Throws: ``BeaconError/invalidDescription(_:_:)`` or the errors of the
    ///   kind's own fields (hex, identifier lengths, URL encoding).
    public init(kind: BeaconKind, text: String, powerAtOneMetre: Int8) throws(BeaconError) {
        let eddystonePower = Int8(clamping: Int(powerAtOneMetre) + Eddystone.lossOverFirstMetre)
        let parts = text.split(separator: kind == .eddystoneTLM ? ":" : "/", omittingEmptySubsequences: false).map(String.init)
        switch kind {
        case .eddystoneUID:
            let bytes = try BeaconHex.decode(parts.joined())
            guard parts.count <= 2, bytes.count == EddystoneNamespace.byteCount + EddystoneInstance.byteCount else {
                throw .invalidDescription(kind, text)
            }
            self = .eddystoneUID(EddystoneUID(
                txPower: eddystonePower, namespace: EddystoneNamespace(exactly: Array(bytes.prefix(EddystoneNamespace.byteCount))),
                instance: EddystoneInstance(exactly: Array(bytes.suffix(EddystoneInstance.byteCount)))))
        case .eddystoneEID:
            self = .eddystoneEID(EddystoneEID(txPower: eddystonePower, ephemeralID: try EddystoneEphemeralID(hex: text)))
        case .eddystoneURL:
            self = .eddystoneURL(try EddystoneURL(txPower: eddystonePower, url: text))
        case .eddystoneTLM:
            guard let tlm = Self.telemetry(parts) else { throw .invalidDescription(kind, text) }
            self = .eddystoneTLM(tlm)
        case .iBeacon:
            guard parts.count == 3, let uuid = UUID(uuidString: Self.dashedUUID(parts[0])),
                  let major = UInt16(parts[1]), let minor = UInt16(parts[2])
            else { throw .invalidDescription(kind, text) }
            self = .iBeacon(IBeacon(proximityUUID: uuid, major: major, minor: minor, measuredPower: powerAtOneMetre))
        }
    }

    /// `MILLIVOLTS:CELSIUS:PDUS:SECONDS` split at the colons, or nil.
    private static func telemetry(_ parts: [String]) -> EddystoneTLM? {
        guard parts.count == 4, let pdus = UInt32(parts[2]), let seconds = Double(parts[3]),
              (0...Double(UInt32.max) / 10).contains(seconds) else { return nil }
        var temperature = EddystoneTLM.temperatureNotSupported
        if !parts[1].isEmpty {
            guard let celsius = Double(parts[1]), (-128..<128).contains(celsius) else { return nil }
            temperature = Int16(clamping: Int((celsius * 256).rounded()))
        }
        var millivolts: UInt16 = 0
        if !parts[0].isEmpty {
            guard let value = UInt16(parts[0]) else { return nil }
            millivolts = value
        }
        return EddystoneTLM(batteryVoltage: millivolts, temperatureFixedPoint: temperature,
                            advertisingPDUCount: pdus, uptimeDeciseconds: UInt32((seconds * 10).rounded()))
    }

    /// The form ``init(kind:text:powerAtOneMetre:)`` wants for `kind`, for messages.
    public static func descriptionForm(of kind: BeaconKind) -> String {
        switch kind {
        case .eddystoneUID: "NAMESPACE/INSTANCE in hex (20 and 12 digits) or 32 hex digits"
        case .eddystoneEID: "16 hex digits"
        case .eddystoneURL: "an http:// or https:// URL"
        case .eddystoneTLM: "MILLIVOLTS:CELSIUS:PDUS:SECONDS, battery and temperature may be empty"
        case .iBeacon: "UUID/MAJOR/MINOR"
        }
    }

    /// A UUID of 32 hex digits gets the dashes `UUID(uuidString:)` wants.
    private static func dashedUUID(_ text: String) -> String {
        guard text.count == 32, !text.contains("-") else { return text }
        var dashed = text
        for offset in [20, 16, 12, 8] { dashed.insert("-", at: dashed.index(dashed.startIndex, offsetBy: offset)) }
        return dashed
    }
}
