import DBus
import Foundation
import NearbyMessages

/// Posts desktop notifications through the notification daemon on the
/// session bus (`org.freedesktop.Notifications`), as `subscribe --notify`
/// does for messages found in the background. The session bus is the usual
/// one (`DBUS_SESSION_BUS_ADDRESS`) whichever bus nearbyd is on. Without a
/// notification daemon it warns once and posts nothing.
@BusActor
final class DesktopNotifier {
    private static let service = "org.freedesktop.Notifications"
    private static let path: ObjectPath = "/org/freedesktop/Notifications"

    private let output: Output
    private var connection: BusConnection?
    /// Whether the server interprets markup in bodies, which must then be escaped.
    private var bodyMarkup = false
    private var warned = false

    /// Connects and asks the notification daemon what it supports (which
    /// starts it, where the bus can): a missing one is reported now rather than
    /// at the first message.
    init(output: Output) async {
        self.output = output
        do {
            let connection = try BusConnection(.session)
            self.connection = connection
            let capabilities = try await connection.call(
                destination: Self.service, path: Self.path, interface: Self.service, member: "GetCapabilities"
            ) { reader throws(DBusError) in try reader.read([String].self) }
            bodyMarkup = capabilities.contains("body-markup")
        } catch {
            warn(error)
        }
    }

    /// Posts a notification of a message found: its type and content (as text
    /// when it is UTF-8, else base64). A failure is reported once, then ignored.
    nonisolated func post(_ message: Message) {
        let content = String(data: message.content, encoding: .utf8) ?? "base64:" + message.content.base64EncodedString()
        Task { await post(summary: "Nearby message", body: message.type.isEmpty ? content : "\(message.type): \(content)") }
    }

    private func post(summary: String, body: String) async {
        guard let connection else { return }
        let shownBody = bodyMarkup ? Self.escaped(body) : body
        do {
            _ = try await connection.call(
                destination: Self.service, path: Self.path, interface: Self.service, member: "Notify",
                arguments: { writer throws(DBusError) in
                    try writer.append("nearbyctl")
                    try writer.append(UInt32(0))
                    try writer.append("")
                    try writer.append(summary)
                    try writer.append(shownBody)
                    try writer.append([String]())
                    try writer.append([String: Variant]())
                    try writer.append(Int32(-1))
                }
            ) { reader throws(DBusError) in try reader.read(UInt32.self) }
        } catch {
            warn(error)
        }
    }

    private func warn(_ error: DBusError) {
        guard !warned else { return }
        warned = true
        output.failure("warning: no desktop notifications (\(error.message.isEmpty ? error.name : error.message)); printing messages only")
    }

    /// The body markup of the notification spec takes `&`, `<` and `>` as markup.
    private static func escaped(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }
}
