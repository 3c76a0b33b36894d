import DaemonCore
import DBus
import NearbyBusContract
import NearbyCore

/// A publication's or subscription's bus object: what they share.
@BusActor
protocol LiveObject: AnyObject {
    associatedtype Entry: RegisteredObject
    static var interfaceName: String { get }
    var entry: Entry { get }
    var path: ObjectPath { get }
    var exported: ExportedObject? { get set }
}

extension LiveObject {
    /// Takes the object off the bus.
    func unexport() {
        exported?.unregister()
        exported = nil
    }

    /// Emits PropertiesChanged for `properties` to the owner.
    func changed(_ properties: [NearbyBusContract.Property]) {
        try? exported?.emitPropertiesChanged(interface: Self.interfaceName, properties.map(\.name))
    }

    func emitExpired() {
        try? exported?.emitSignal(interface: Self.interfaceName,
                                  member: NearbyBusContract.PublicationOrSubscription.expired.name) { _ in }
    }
}
