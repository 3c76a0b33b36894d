import Glibc

/// C strings for the bus types' calls into sd-bus, handled outside the bus actor.
///
/// A closure formed in a `@BusActor` function and handed to the standard
/// library (`withCString`, `withUTF8`, `Optional.map`…) checks at run time,
/// each time it runs, that it runs on the actor's executor (SE-0423's dynamic
/// isolation checks: the standard library is not built in Swift 6 mode). On
/// every argument of every call that came to 1.4 % of nearbyd's samples
/// under `nearby-bench dbus`. These functions are not isolated, so the
/// closures they form check nothing; a closure an isolated caller passes to
/// them is not checked either, as they are built in Swift 6 mode.
enum CString {
    /// The string at `pointer`; `absent` for NULL.
    static func string(_ pointer: UnsafePointer<CChar>?, absent: String = "") -> String {
        if let pointer { String(cString: pointer) } else { absent }
    }

    /// `body` with `string` as a NUL-terminated C string.
    static func with<R>(_ string: String, _ body: (UnsafePointer<CChar>) -> R) -> R {
        string.withCString(body)
    }

    /// `body` with `string`'s UTF-8 bytes, contiguous.
    static func withUTF8<R>(_ string: String, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        var string = string
        return string.withUTF8(body)
    }

    /// Whether `string` holds a NUL byte, which a D-Bus string cannot.
    static func containsNUL(_ string: String) -> Bool {
        // memchr where the bytes are contiguous (native strings): a byte-by-byte search of a
        // large string costs seconds in a debug build (dbus-fuzz's 30 MiB strings).
        string.utf8.withContiguousStorageIfAvailable { $0.count > 0 && memchr($0.baseAddress!, 0, $0.count) != nil }
            ?? string.utf8.contains(0)
    }

    /// Whether the C string at `pointer` equals `string`.
    static func equals(_ pointer: UnsafePointer<CChar>, _ string: String) -> Bool {
        string.withCString { strcmp($0, pointer) } == 0
    }

    /// Whether the C string at `pointer` equals `name`, NUL-terminated.
    static func equals(_ pointer: UnsafePointer<CChar>, _ name: [CChar]) -> Bool {
        name.withUnsafeBufferPointer { strcmp($0.baseAddress!, pointer) } == 0
    }
}
