import DBus
import NearbyCore

extension NearbyError {
    /// The D-Bus error this answers a call with: `org.nearbyd.Error.<Name>`.
    var dbusError: DBusError {
        DBusError(busError.busName, message)
    }
}

extension DBusError {
    /// What a client gets when it touches another client's object.
    static let notYours = NearbyError.accessDenied("this object belongs to another client").dbusError
}

/// Runs a validation step, answering a failure with the org.nearbyd error.
@BusActor
func checked<T>(_ body: () throws(NearbyError) -> T) throws(DBusError) -> T {
    do {
        return try body()
    } catch {
        throw error.dbusError
    }
}
