/// Follows the bytes of one request head as they arrive, to refuse a request
/// line or a head over its limit as soon as it is over, without holding it:
/// the HTTP parser behind it would buffer up to its own limit first and then
/// answer nothing useful. It finds where the head ends (an empty line) and
/// counts; it checks no syntax, which the parser does.
struct RequestHeadScanner {
    enum Verdict: Equatable {
        /// The head goes on.
        case incomplete
        /// The head ended; `consumed` bytes of the buffer were part of it (the
        /// rest is body or the next request).
        case complete(consumed: Int)
        /// The request line (without its line end) is longer than the limit: 414.
        case requestLineTooLong
        /// The head is longer than the limit: 431.
        case headTooLarge
    }

    let maxRequestLineBytes: Int
    let maxHeadBytes: Int

    /// Bytes of the head so far, with any empty lines before it.
    private(set) var headBytes = 0
    /// Bytes of the current line so far, its line feed excluded.
    private var lineBytes = 0
    private var lastWasCarriageReturn = false
    private var inRequestLine = true
    private var started = false

    init(maxRequestLineBytes: Int, maxHeadBytes: Int) {
        self.maxRequestLineBytes = maxRequestLineBytes
        self.maxHeadBytes = maxHeadBytes
    }

    /// Whether any byte of a request arrived (empty lines before it aside).
    var hasStarted: Bool { started }

    mutating func scan(_ bytes: some Sequence<UInt8>) -> Verdict {
        var consumed = 0
        for byte in bytes {
            consumed += 1
            headBytes += 1
            if headBytes > maxHeadBytes { return .headTooLarge }
            guard byte == UInt8(ascii: "\n") else {
                lineBytes += 1
                lastWasCarriageReturn = byte == UInt8(ascii: "\r")
                // The carriage return that ends a line is not part of it.
                if inRequestLine && started && lineBytes > maxRequestLineBytes
                    && !(lineBytes == maxRequestLineBytes + 1 && lastWasCarriageReturn) {
                    return .requestLineTooLong
                }
                if !lastWasCarriageReturn { started = true }
                continue
            }
            let isEmpty = lineBytes == 0 || (lineBytes == 1 && lastWasCarriageReturn)
            lineBytes = 0
            lastWasCarriageReturn = false
            if isEmpty {
                // Empty lines before the request line are skipped (RFC 9112 §2.2); after it, one ends the head.
                if started && !inRequestLine { return .complete(consumed: consumed) }
            } else if inRequestLine && started {
                inRequestLine = false
            }
        }
        return .incomplete
    }
}
