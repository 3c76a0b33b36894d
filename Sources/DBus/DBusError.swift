import CSystemd
import Glibc

/// A D-Bus error: a name such as `org.freedesktop.DBus.Error.InvalidArgs` and a
/// human-readable message. Thrown by calls that fail and by handlers to answer a
/// method call with that error.
public struct DBusError: Error, Equatable, Sendable, CustomStringConvertible {
    public var name: String
    public var message: String

    public init(_ name: String, _ message: String) {
        self.name = name
        self.message = message
    }

    public var description: String { "\(name): \(message)" }

    public static func accessDenied(_ message: String) -> DBusError {
        DBusError("org.freedesktop.DBus.Error.AccessDenied", message)
    }

    public static func invalidArgs(_ message: String) -> DBusError {
        DBusError("org.freedesktop.DBus.Error.InvalidArgs", message)
    }

    public static func failed(_ message: String) -> DBusError {
        DBusError("org.freedesktop.DBus.Error.Failed", message)
    }

    public static func unknownProperty(_ message: String) -> DBusError {
        DBusError("org.freedesktop.DBus.Error.UnknownProperty", message)
    }

    public static func propertyReadOnly(_ message: String) -> DBusError {
        DBusError("org.freedesktop.DBus.Error.PropertyReadOnly", message)
    }

    /// The error for a negative errno returned by sd-bus while doing `what`.
    static func system(_ code: Int32, _ what: String) -> DBusError {
        let errnoValue = code < 0 ? -code : code
        let text = String(cString: strerror(errnoValue))
        switch errnoValue {
        case ENOMEM: return DBusError("org.freedesktop.DBus.Error.NoMemory", "\(what): \(text)")
        case ENOTCONN, ECONNRESET: return DBusError("org.freedesktop.DBus.Error.Disconnected", "\(what): \(text)")
        case ETIMEDOUT: return DBusError("org.freedesktop.DBus.Error.Timeout", "\(what): \(text)")
        case ENOMEDIUM: return .failed("\(what): no bus address is known (is DBUS_SESSION_BUS_ADDRESS set?)")
        case EINVAL, ENXIO, EBADMSG: return .invalidArgs("\(what): \(text)")
        default: return .failed("\(what): \(text)")
        }
    }

    /// Copies an sd-bus error that a reply or callback carried.
    init(_ error: UnsafePointer<sd_bus_error>) {
        let name = error.pointee.name.map { String(cString: $0) } ?? "org.freedesktop.DBus.Error.Failed"
        let message = error.pointee.message.map { String(cString: $0) } ?? ""
        self.init(name, message)
    }

    /// Stores this error in an sd-bus error out-parameter; returns the value a C callback returns.
    func store(in target: UnsafeMutablePointer<sd_bus_error>?) -> Int32 {
        nearby_bus_error_set(target, name, message)
    }
}

/// Turns a negative sd-bus return value into a thrown ``DBusError``.
@discardableResult
func check(_ result: Int32, _ what: @autoclosure () -> String) throws(DBusError) -> Int32 {
    if result < 0 { throw DBusError.system(result, what()) }
    return result
}
