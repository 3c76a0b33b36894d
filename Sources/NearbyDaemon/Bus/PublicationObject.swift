import DaemonCore
import DBus
import NearbyBusContract
import NearbyCore

/// `org.nearbyd.Publication1`: one live publication.
@BusActor
final class PublicationObject: LiveObject {
    nonisolated static let interfaceName = NearbyBusContract.publication.name

    let publication: Publication
    let path: ObjectPath
    /// Held strongly: the service holds the object only while it lives, and
    /// each call reads this; an unowned read is an atomic retain and release.
    let service: DaemonService
    var exported: ExportedObject?

    var entry: Publication { publication }

    init(publication: Publication, path: ObjectPath, service: DaemonService) {
        self.publication = publication
        self.path = path
        self.service = service
    }

    /// Exports the object, callable by its client alone.
    func export() throws(NearbyError) {
        exported = try service.connection.exportOwned([Self.interface.bind(self)], at: path, owner: publication.manager.client.busName)
    }

    static let interface = Interface<PublicationObject>(
        interfaceName,
        methods: [
            Method(NearbyBusContract.Publication1.unpublish) { object, _ in object.service.unpublish(object) },
        ],
        properties: [
            Property(NearbyBusContract.PublicationOrSubscription.status) { object, _ in .string(object.publication.status.rawValue) },
            Property(NearbyBusContract.PublicationOrSubscription.statusReason) { object, _ in .string(object.publication.statusReason) },
            Property(NearbyBusContract.Publication1.namespace) { object, _ in .string(object.service.core.resolvedNamespace(of: object.publication)) },
            Property(NearbyBusContract.Publication1.type, emitsChange: false) { object, _ in .string(object.publication.message.type) },
            // The API's unit is the microsecond (doc/dbus-api.md).
            Property(NearbyBusContract.Publication1.expiresAt, emitsChange: false) { object, _ in
                .uint64(object.publication.expiresAtMs * 1000)
            },
        ],
        signals: [SignalDescription(NearbyBusContract.PublicationOrSubscription.expired)]
    )
}
