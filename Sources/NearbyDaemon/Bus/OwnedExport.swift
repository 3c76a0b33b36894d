import DBus
import NearbyCore

extension BusConnection {
    /// Exports an object only its creator, `owner`, may call; the bus
    /// refuses it when out of memory or on a path clash.
    func exportOwned(_ bindings: [InterfaceBinding], at path: ObjectPath, owner: String) throws(NearbyError) -> ExportedObject {
        do {
            return try export(bindings, at: path, access: .owner(owner, denied: .notYours))
        } catch {
            throw .limitExceeded("the bus refused a new object: \(error.message)")
        }
    }
}
