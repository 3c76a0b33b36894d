/// Follows a chunked request body (RFC 9112 §7.1) as it arrives, to find
/// where it ends and the next request head begins: chunk-size lines, chunk
/// data, the last chunk and the trailer section. It checks no more than it
/// needs for that; the HTTP parser behind it checks the rest.
struct ChunkedBodyScanner {
    enum Verdict: Equatable {
        case incomplete
        /// The body ended; `consumed` bytes of the buffer were part of it.
        case complete(consumed: Int)
        /// Not a chunked body this scanner can follow (a size line too long
        /// or not hexadecimal, trailers over the head limit): the parser will
        /// refuse it.
        case malformed
    }

    private enum State {
        /// A chunk-size line: its size so far, and whether an extension (`;`) began.
        case sizeLine(size: Int, digits: Int, inExtension: Bool, bytes: Int)
        case data(remaining: Int)
        /// The line end after a chunk's data.
        case dataEnd(bytes: Int)
        /// Trailer lines after the last chunk, until an empty one.
        case trailer(lineBytes: Int, totalBytes: Int, lastWasCarriageReturn: Bool)
    }

    /// Longest chunk-size line, extensions included, and longest trailer section.
    let maxLineBytes: Int
    let maxTrailerBytes: Int
    private var state = State.sizeLine(size: 0, digits: 0, inExtension: false, bytes: 0)

    init(maxLineBytes: Int, maxTrailerBytes: Int) {
        self.maxLineBytes = maxLineBytes
        self.maxTrailerBytes = maxTrailerBytes
    }

    mutating func scan(_ bytes: some Collection<UInt8>) -> Verdict {
        var index = bytes.startIndex
        var consumed = 0
        while index != bytes.endIndex {
            if case .data(let remaining) = state {
                let length = min(remaining, bytes.distance(from: index, to: bytes.endIndex))
                index = bytes.index(index, offsetBy: length)
                consumed += length
                state = length == remaining ? .dataEnd(bytes: 0) : .data(remaining: remaining - length)
                continue
            }
            let byte = bytes[index]
            index = bytes.index(after: index)
            consumed += 1
            switch state {
            case .sizeLine(let size, let digits, let inExtension, let count):
                guard count < maxLineBytes else { return .malformed }
                if byte == UInt8(ascii: "\n") {
                    guard digits > 0 else { return .malformed }
                    state = size == 0 ? .trailer(lineBytes: 0, totalBytes: 0, lastWasCarriageReturn: false) : .data(remaining: size)
                } else if inExtension || byte == UInt8(ascii: "\r") {
                    state = .sizeLine(size: size, digits: digits, inExtension: inExtension, bytes: count + 1)
                } else if byte == UInt8(ascii: ";") || byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") {
                    state = .sizeLine(size: size, digits: digits, inExtension: true, bytes: count + 1)
                } else if let value = Self.hexValue(byte), size <= (Int.max - value) / 16 {
                    state = .sizeLine(size: size * 16 + value, digits: digits + 1, inExtension: false, bytes: count + 1)
                } else {
                    return .malformed
                }
            case .dataEnd(let count):
                if byte == UInt8(ascii: "\n") {
                    state = .sizeLine(size: 0, digits: 0, inExtension: false, bytes: 0)
                } else if byte == UInt8(ascii: "\r") && count == 0 {
                    state = .dataEnd(bytes: 1)
                } else {
                    return .malformed
                }
            case .trailer(let lineBytes, let total, let lastWasCarriageReturn):
                guard total < maxTrailerBytes else { return .malformed }
                if byte == UInt8(ascii: "\n") {
                    // An empty line (or one holding only its carriage return) ends the body.
                    if lineBytes == 0 || (lineBytes == 1 && lastWasCarriageReturn) { return .complete(consumed: consumed) }
                    state = .trailer(lineBytes: 0, totalBytes: total + 1, lastWasCarriageReturn: false)
                } else {
                    state = .trailer(lineBytes: lineBytes + 1, totalBytes: total + 1,
                                     lastWasCarriageReturn: byte == UInt8(ascii: "\r"))
                }
            case .data:
                preconditionFailure("handled above")
            }
        }
        return .incomplete
    }

    private static func hexValue(_ byte: UInt8) -> Int? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): Int(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): Int(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): Int(byte - UInt8(ascii: "A") + 10)
        default: nil
        }
    }
}
