// Hand-written test vectors, laid out field by field from the specifications.

import Foundation

enum Vectors {
    // MARK: Eddystone-UID (eddystone-uid/README.md layout)

    /// Namespace from the spec's "elided version 4 UUID" example.
    static let namespaceBytes: [UInt8] = [0x8B, 0x0C, 0xA7, 0x50, 0x09, 0x54, 0x77, 0xCB, 0x3E, 0x77]
    static let instanceBytes: [UInt8] = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06]

    /// 20-byte UID frame, tx power -20 dBm (0xEC).
    static let uidFrame: [UInt8] =
        [0x00, 0xEC]
        + [0x8B, 0x0C, 0xA7, 0x50, 0x09, 0x54, 0x77, 0xCB, 0x3E, 0x77]  // namespace
        + [0x01, 0x02, 0x03, 0x04, 0x05, 0x06]                          // instance
        + [0x00, 0x00]                                                  // RFU

    /// The same frame as truncating beacons send it: RFU bytes omitted.
    static let uidFrameWithoutRFU: [UInt8] = Array(uidFrame.prefix(18))

    /// Full 31-byte advertisement per protocol-specification.md's example.
    static let uidAdvertisement: [UInt8] =
        [0x02, 0x01, 0x06]              // Flags
        + [0x03, 0x03, 0xAA, 0xFE]      // Complete list of 16-bit UUIDs: 0xFEAA
        + [0x17, 0x16, 0xAA, 0xFE]      // Service data, length 0x17 as the UID spec demands
        + uidFrame

    // MARK: Eddystone-URL (eddystone-url/README.md)

    /// "https://goo.gl/S6zT6P": scheme 0x03, then the text with no expansion.
    static let gooGlEncoded: [UInt8] =
        [0x03, 0x67, 0x6F, 0x6F, 0x2E, 0x67, 0x6C, 0x2F, 0x53, 0x36, 0x7A, 0x54, 0x36, 0x50]

    /// "http://www.google.com/": scheme 0x00, "google", expansion 0x00 ".com/".
    static let googleEncoded: [UInt8] = [0x00, 0x67, 0x6F, 0x6F, 0x67, 0x6C, 0x65, 0x00]

    /// URL frame for goo.gl, tx power -18 dBm (0xEE, the spec's example value).
    static let urlFrame: [UInt8] = [0x10, 0xEE] + gooGlEncoded

    // MARK: Eddystone-TLM (eddystone-tlm/tlm-plain.md)

    /// 3000 mV, 23.5 °C (0x17.0x80), 256 PDUs, 3600 × 0.1 s.
    static let tlmFrame: [UInt8] = [
        0x20, 0x00,
        0x0B, 0xB8,
        0x17, 0x80,
        0x00, 0x00, 0x01, 0x00,
        0x00, 0x00, 0x0E, 0x10,
    ]

    /// Battery and temperature "not supported" (0 and 0x8000).
    static let tlmFrameUnsupportedSensors: [UInt8] = [
        0x20, 0x00,
        0x00, 0x00,
        0x80, 0x00,
        0xFF, 0xFF, 0xFF, 0xFF,
        0x00, 0x00, 0x00, 0x00,
    ]

    /// Encrypted TLM: version 0x01, 12 bytes ciphertext, 2 salt, 2 MIC.
    static let encryptedTLMFrame: [UInt8] =
        [0x20, 0x01] + [UInt8](repeating: 0xA5, count: 12) + [0x12, 0x34] + [0x56, 0x78]

    // MARK: Eddystone-EID

    static let eidBytes: [UInt8] = [0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF]
    static let eidFrame: [UInt8] = [0x30, 0xF6] + eidBytes  // -10 dBm

    // MARK: iBeacon (Apple's sample UUID, major 1, minor 2, -59 dBm)

    static let iBeaconUUID = UUID(uuidString: "E2C56DB5-DFFB-48D2-B060-D0F5A71096E0")!

    static let iBeaconManufacturerData: [UInt8] =
        [0x4C, 0x00]                                      // Apple, little-endian
        + [0x02, 0x15]                                    // iBeacon type, 21 bytes follow
        + [0xE2, 0xC5, 0x6D, 0xB5, 0xDF, 0xFB, 0x48, 0xD2,
           0xB0, 0x60, 0xD0, 0xF5, 0xA7, 0x10, 0x96, 0xE0] // proximity UUID
        + [0x00, 0x01]                                    // major 1
        + [0x00, 0x02]                                    // minor 2
        + [0xC5]                                          // -59 dBm

    static let iBeaconAdvertisement: [UInt8] =
        [0x02, 0x01, 0x06]   // Flags
        + [0x1A, 0xFF]       // 26 bytes: type + 25 of manufacturer data
        + iBeaconManufacturerData

    /// Wraps Eddystone frame bytes in flags + UUID list + service data.
    static func eddystoneAdvertisement(_ frame: [UInt8]) -> [UInt8] {
        [0x02, 0x01, 0x06, 0x03, 0x03, 0xAA, 0xFE, UInt8(3 + frame.count), 0x16, 0xAA, 0xFE] + frame
    }
}
