/// One AD structure of a Bluetooth LE advertising or scan-response
/// payload: `length | type | data (length - 1 bytes)`.
public struct ADStructure: Hashable, Sendable {
    /// Offset of this structure's length byte within the payload.
    public let offset: Int
    /// The AD type byte (e.g. 0x16 Service Data – 16-bit UUID, 0xFF
    /// Manufacturer Specific Data).
    public let type: UInt8
    /// The data bytes after the type byte. A slice of the payload, so its
    /// indices are payload offsets, not zero-based.
    public let data: ArraySlice<UInt8>

    /// Splits a payload into its AD structures, checking their lengths.
    ///
    /// A length byte of zero ends the significant part, as the Core
    /// Specification allows; what follows must be zero padding (as
    /// controllers and some stacks pad to 31 bytes), and anything else
    /// is rejected rather than guessed at. An empty payload has no
    /// structures. No overall size limit is imposed, so merged
    /// advertising + scan-response data and extended advertising work.
    ///
    /// - Throws: ``BeaconError/adStructureOverrunsPayload(offset:declaredLength:available:)``
    ///   for a length running past the end (a truncated payload), and
    ///   ``BeaconError/dataAfterTerminator(offset:)`` for non-zero bytes after a zero length.
    public static func parse(_ payload: [UInt8]) throws(BeaconError) -> [ADStructure] {
        try split(payload).get()
    }

    /// The parser proper; see ``BeaconFrame`` for why it returns a `Result`.
    static func split(_ payload: [UInt8]) -> Result<[ADStructure], BeaconError> {
        var structures: [ADStructure] = []
        var offset = 0
        while offset < payload.count {
            let length = Int(payload[offset])
            if length == 0 {
                for index in offset..<payload.count where payload[index] != 0 {
                    return .failure(.dataAfterTerminator(offset: offset))
                }
                break
            }
            let available = payload.count - offset - 1
            guard length <= available else {
                return .failure(.adStructureOverrunsPayload(
                    offset: offset, declaredLength: length, available: available))
            }
            structures.append(ADStructure(
                offset: offset,
                type: payload[offset + 1],
                data: payload[(offset + 2)..<(offset + 1 + length)]))
            offset += 1 + length
        }
        return .success(structures)
    }
}

/// The AD type values this module reads or writes (Bluetooth Core
/// Specification Supplement, Part A, section 1).
enum ADType {
    static let flags: UInt8 = 0x01
    static let incompleteServiceUUIDs16: UInt8 = 0x02
    static let completeServiceUUIDs16: UInt8 = 0x03
    static let solicitationUUIDs16: UInt8 = 0x14
    static let serviceData16: UInt8 = 0x16
    static let manufacturerSpecific: UInt8 = 0xFF

    /// The list types in which the Eddystone UUID may be announced. The
    /// Eddystone specification's text names the solicitation list while
    /// its example uses the complete list, so all three are honoured.
    static func isUUIDList16(_ type: UInt8) -> Bool {
        type == incompleteServiceUUIDs16 || type == completeServiceUUIDs16 || type == solicitationUUIDs16
    }
}
