/// Everything that can be wrong with an input handed to this module.
///
/// Every case names the offending value (and, where it helps, its offset)
/// so a log line says what was wrong with which input. Offsets are
/// zero-based and relative to the buffer passed to the failing call.
public enum BeaconError: Error, Hashable, Sendable, CustomStringConvertible {
    // MARK: Advertising data (AD structures)

    /// An AD structure's length byte claims more bytes than the payload has left.
    case adStructureOverrunsPayload(offset: Int, declaredLength: Int, available: Int)
    /// A zero length byte (early terminator) is followed by non-zero bytes.
    /// Zero padding after the terminator is accepted.
    case dataAfterTerminator(offset: Int)
    /// A 16-bit UUID list (AD types 0x02, 0x03, 0x14) whose length is not a multiple of 2.
    case malformedServiceUUIDList(offset: Int, length: Int)
    /// A "Service Data – 16-bit UUID" structure (AD type 0x16) too short to hold its UUID.
    case serviceDataTooShort(offset: Int, length: Int)
    /// Eddystone service data was present but no 16-bit UUID list names 0xFEAA,
    /// which the Eddystone specification requires.
    case eddystoneUUIDNotListed
    /// The payload is well formed but carries no Eddystone or iBeacon frame.
    case noBeaconFound

    // MARK: Frame lengths and types

    /// A frame whose length is not one its format allows.
    case invalidLength(BeaconKind, actual: Int)
    /// Eddystone service data with no frame type byte at all.
    case emptyEddystoneFrame
    /// An Eddystone frame type byte this module does not know (including
    /// known high nibbles with non-zero reserved low bits).
    case unknownEddystoneFrameType(UInt8)
    /// A frame-specific parser was handed a different Eddystone frame type.
    case unexpectedEddystoneFrameType(expected: BeaconKind, actual: UInt8)

    // MARK: Eddystone-UID

    /// The UID frame's two reserved bytes are present but not zero.
    case uidReservedBytesNotZero(UInt8, UInt8)

    // MARK: Eddystone-TLM

    /// An encrypted (version 0x01) TLM frame: readable only with the
    /// beacon's identity key, which this module does not handle.
    case encryptedTLMUnsupported
    /// A TLM version byte other than 0x00 (plain) or 0x01 (encrypted).
    case unknownTLMVersion(UInt8)

    // MARK: Eddystone-URL

    /// A URL scheme prefix byte outside 0x00...0x03.
    case unknownURLScheme(UInt8)
    /// A reserved byte (0x0E...0x20 or 0x7F...0xFF) inside an encoded URL;
    /// `offset` counts from the first byte after the scheme byte.
    case reservedURLByte(UInt8, offset: Int)
    /// A URL to encode does not start with `http://` or `https://` (lowercase).
    case unsupportedURLScheme(String)
    /// A URL to encode contains a character the encoding cannot carry
    /// (anything but printable ASCII 0x21...0x7E); `offset` is in UTF-8 bytes.
    case unencodableURLCharacter(Unicode.Scalar, offset: Int)
    /// A URL whose shortest encoding is longer than 17 bytes.
    case urlTooLong(String, encodedLength: Int)

    // MARK: iBeacon

    /// Manufacturer data whose company id is not Apple's (0x004C).
    case wrongCompanyID(UInt16)
    /// Apple manufacturer data whose type byte is not 0x02 (iBeacon).
    case wrongIBeaconType(UInt8)
    /// iBeacon data whose own length byte is not 0x15 (21).
    case wrongIBeaconDataLength(UInt8)

    // MARK: Identifiers

    /// Identifier bytes of the wrong count for their type.
    case invalidIdentifierLength(expected: Int, actual: Int)
    /// A string that is not an even-length run of hex digits.
    case invalidHex(String)
    /// A textual beacon description (``BeaconFrame/init(kind:text:powerAtOneMetre:)``)
    /// that does not have the form its kind wants; the text says which.
    case invalidDescription(BeaconKind, String)

    /// A one-line explanation naming the offending value.
    public var description: String {
        switch self {
        case let .adStructureOverrunsPayload(offset, declared, available):
            "AD structure at offset \(offset) declares \(declared) bytes but only \(available) remain"
        case let .dataAfterTerminator(offset):
            "zero-length AD terminator at offset \(offset) is followed by non-zero bytes"
        case let .malformedServiceUUIDList(offset, length):
            "16-bit UUID list at offset \(offset) has odd length \(length)"
        case let .serviceDataTooShort(offset, length):
            "16-bit service data at offset \(offset) has \(length) bytes, fewer than its 2-byte UUID"
        case .eddystoneUUIDNotListed:
            "Eddystone service data present but 0xFEAA is not in any 16-bit UUID list"
        case .noBeaconFound:
            "advertising data carries no Eddystone or iBeacon frame"
        case let .invalidLength(kind, actual):
            "\(kind) frame must be \(kind.allowedLengthsDescription) bytes, got \(actual)"
        case .emptyEddystoneFrame:
            "Eddystone service data is empty (no frame type byte)"
        case let .unknownEddystoneFrameType(type):
            "unknown Eddystone frame type \(hexByte(type))"
        case let .unexpectedEddystoneFrameType(expected, actual):
            "expected an \(expected) frame, got frame type \(hexByte(actual))"
        case let .uidReservedBytesNotZero(first, second):
            "Eddystone-UID reserved bytes must be 0x00 0x00, got \(hexByte(first)) \(hexByte(second))"
        case .encryptedTLMUnsupported:
            "encrypted Eddystone-TLM (version 0x01) is not supported"
        case let .unknownTLMVersion(version):
            "unknown Eddystone-TLM version \(hexByte(version))"
        case let .unknownURLScheme(scheme):
            "unknown Eddystone-URL scheme prefix \(hexByte(scheme))"
        case let .reservedURLByte(byte, offset):
            "reserved byte \(hexByte(byte)) at offset \(offset) of encoded URL"
        case let .unsupportedURLScheme(url):
            "URL \(url.debugDescription) does not start with http:// or https://"
        case let .unencodableURLCharacter(scalar, offset):
            "URL character U+\(String(scalar.value, radix: 16, uppercase: true)) at byte offset \(offset) cannot be encoded"
        case let .urlTooLong(url, length):
            "URL \(url.debugDescription) needs \(length) encoded bytes; at most \(EddystoneURL.maxEncodedLength) fit"
        case let .wrongCompanyID(id):
            "company id 0x\(BeaconHex.encode([UInt8(id >> 8), UInt8(id & 0xFF)], uppercase: true)) is not Apple's 0x004C"
        case let .wrongIBeaconType(type):
            "Apple manufacturer data type \(hexByte(type)) is not iBeacon (0x02)"
        case let .wrongIBeaconDataLength(length):
            "iBeacon length byte \(hexByte(length)) is not 0x15"
        case let .invalidIdentifierLength(expected, actual):
            "identifier must be \(expected) bytes, got \(actual)"
        case let .invalidHex(text):
            "\(text.debugDescription) is not an even-length hex string"
        case let .invalidDescription(kind, text):
            "\(text.debugDescription) does not describe an \(kind) beacon: \(BeaconFrame.descriptionForm(of: kind))"
        }
    }
}

/// `0x0E`-style rendering for error messages.
private func hexByte(_ byte: UInt8) -> String {
    "0x" + BeaconHex.encode(byte, uppercase: true)
}
