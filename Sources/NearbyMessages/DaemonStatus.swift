import DBus
import NearbyBusContract

/// What nearbyd says of itself (`org.nearbyd.Nearby1`'s properties).
public struct DaemonStatus: Sendable {
    /// The daemon's version.
    public let version: String
    /// The mediums usable on this host right now.
    public let availableMediums: [String]
    /// Whether the whole daemon logs at debug level.
    public let debugLogging: Bool
    /// Whether the daemon follows login sessions: `logind`, or `unavailable: WHY`
    /// (then `Background` is only what apps set).
    public let loginSessions: String
    /// nearby-server as the daemon meets it: `connected: URL` (the URL in
    /// use), `unreachable: WHY`, `connecting` or `idle`.
    public let server: String
    /// The static publications: each file, and its status (`starting`,
    /// `active`) and object path, or `error` and why.
    public let staticPublications: [(file: String, status: String, detail: String)]

    /// Asks the daemon on `address`.
    @BusActor public static func read(from address: BusAddress) async throws -> DaemonStatus {
        do {
            let connection = try BusConnection(address)
            defer { connection.close() }
            let properties = try await connection.call(
                destination: NearbyBusContract.busName, path: ObjectPath(stringLiteral: NearbyBusContract.rootPath), interface: "org.freedesktop.DBus.Properties",
                member: "GetAll", arguments: { writer throws(DBusError) in try writer.append(NearbyBusContract.nearby.name) }
            ) { reader throws(DBusError) in try reader.read([String: Variant].self) }
            let statics: [(file: String, status: String, detail: String)]
            typealias Nearby1 = NearbyBusContract.Nearby1
            if case .array(_, let entries)? = properties[Nearby1.staticPublications.name]?.value {
                statics = entries.compactMap { entry in
                    guard case .structure(let fields) = entry, fields.count == 3,
                          let file = fields[0].string, let status = fields[1].string, let detail = fields[2].string else { return nil }
                    return (file, status, detail)
                }
            } else {
                statics = []
            }
            return DaemonStatus(version: properties[Nearby1.version.name]?.value.string ?? "",
                                availableMediums: properties[Nearby1.availableMediums.name]?.value.strings ?? [],
                                debugLogging: properties[Nearby1.debugLogging.name]?.value.bool ?? false,
                                loginSessions: properties[Nearby1.loginSessions.name]?.value.string ?? "",
                                server: properties[Nearby1.server.name]?.value.string ?? "",
                                staticPublications: statics)
        } catch {
            throw NearbyMessagesError(error)
        }
    }
}
