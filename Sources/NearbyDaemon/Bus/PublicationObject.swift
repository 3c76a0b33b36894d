import DBus
import NearbyBusContract
import NearbyCore

/// `org.nearbyd.Publication1`: one live publication.
@BusActor
final class PublicationObject: LiveObject {
    nonisolated static let interfaceName = NearbyBusContract.publication.name

    let publication: Publication
    let path: ObjectPath
    unowned let service: DaemonService
    var exported: ExportedObject?

    var entry: Publication { publication }

    init(publication: Publication, path: ObjectPath, service: DaemonService) {
        self.publication = publication
        self.path = path
        self.service = service
    }

    static let interface = Interface<PublicationObject>(
        interfaceName,
        methods: [
            Method("Unpublish") { object, _ in object.service.unpublish(object) },
        ],
        properties: [
            Property("Status", "s") { object, _ in .string(object.publication.status.rawValue) },
            Property("StatusReason", "s") { object, _ in .string(object.publication.statusReason) },
            Property("Namespace", "s") { object, _ in .string(object.service.resolvedNamespace(of: object)) },
            Property("Type", "s", emitsChange: false) { object, _ in .string(object.publication.message.type) },
            // The API's unit is the microsecond (doc/dbus-api.md).
            Property("ExpiresAt", "t", emitsChange: false) { object, _ in .uint64(object.publication.expiresAtMs * 1000) },
        ],
        signals: [SignalDescription("Expired")]
    )
}
