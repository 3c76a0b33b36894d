import DBus

/// What nearbyd says of itself (`org.nearbyd.Nearby1`'s properties).
public struct DaemonStatus: Sendable {
    /// The daemon's version.
    public let version: String
    /// The mediums usable on this host right now.
    public let availableMediums: [String]
    /// Whether the whole daemon logs at debug level.
    public let debugLogging: Bool

    /// Asks the daemon on `address`.
    @BusActor public static func read(from address: BusAddress) async throws -> DaemonStatus {
        do {
            let connection = try BusConnection(address)
            defer { connection.close() }
            let properties = try await connection.call(
                destination: "org.nearbyd", path: "/org/nearbyd", interface: "org.freedesktop.DBus.Properties",
                member: "GetAll", arguments: { writer throws(DBusError) in try writer.append("org.nearbyd.Nearby1") }
            ) { reader throws(DBusError) in try reader.read([String: Variant].self) }
            return DaemonStatus(version: properties["Version"]?.value.string ?? "",
                                availableMediums: properties["AvailableMediums"]?.value.strings ?? [],
                                debugLogging: properties["DebugLogging"]?.value.bool ?? false)
        } catch {
            throw NearbyMessagesError(error)
        }
    }
}
