import Foundation

/// The app a caller really is, where the system says: a Flatpak app's id, or
/// the application id of the systemd unit a desktop launched it in. An
/// `AppId` a caller gives is only its say; this is not, because the caller
/// cannot choose its own control group (a Flatpak app cannot leave its
/// sandbox's, and a unit's name is its launcher's).
///
/// Both are read from the control group of the caller's process
/// (`/proc/PID/cgroup`, which any user may read): Flatpak runs each app in a
/// scope `app-flatpak-APPID-NUMBER.scope`, and desktops that follow systemd's
/// naming rule for applications launch them in
/// `app[-LAUNCHER]-APPID[@RANDOM].service` or
/// `app[-LAUNCHER]-APPID-RANDOM.scope` (a `-` inside the id escaped as `\x2d`).
struct RealApp: Equatable, Sendable {
    enum Kind: String, Sendable {
        /// A Flatpak app: sandboxed, so its id is a boundary even between one user's programs.
        case flatpak
        /// An app a desktop launched in a systemd unit of its own.
        case systemdUnit = "systemd app unit"
    }

    let id: String
    let kind: Kind

    /// The app of process `pid`, or nil when it runs in no app's unit (or has gone).
    static func of(pid: UInt32) async -> RealApp? {
        await Task.detached {
            (try? String(contentsOfFile: "/proc/\(pid)/cgroup", encoding: .utf8)).flatMap(parse(cgroup:))
        }.value
    }

    /// The app named by the innermost unit of a `/proc/PID/cgroup` text:
    /// systemd's own hierarchy (`name=systemd`, on hybrid systems) or else
    /// the unified one (`0::`).
    static func parse(cgroup text: String) -> RealApp? {
        var unified: Substring?
        var systemd: Substring?
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3 else { continue }
            if fields[1] == "name=systemd" { systemd = fields[2] }
            if fields[0] == "0", fields[1].isEmpty { unified = fields[2] }
        }
        guard let path = systemd ?? unified else { return nil }
        for unit in path.split(separator: "/").reversed() {
            if let app = parse(unit: String(unit)) { return app }
        }
        return nil
    }

    /// The app a unit name names, if it is an app's unit.
    static func parse(unit: String) -> RealApp? {
        if unit.hasSuffix(".scope"), unit.hasPrefix("app-flatpak-") {
            // app-flatpak-APPID-NUMBER.scope: Flatpak ids have no '-' escapes, and the number comes last.
            let inner = unit.dropFirst("app-flatpak-".count).dropLast(".scope".count)
            guard let dash = inner.lastIndex(of: "-"), inner[inner.index(after: dash)...].allSatisfy(\.isNumber) else { return nil }
            return valid(String(inner[..<dash]), .flatpak)
        }
        guard unit.hasPrefix("app-") else { return nil }
        var parts: [Substring]
        if unit.hasSuffix(".service") {
            // app[-LAUNCHER]-APPID[@RANDOM].service
            let name = unit.dropFirst("app-".count).dropLast(".service".count)
            parts = (name.split(separator: "@", maxSplits: 1).first ?? "").split(separator: "-", omittingEmptySubsequences: false)
        } else if unit.hasSuffix(".scope") {
            // app[-LAUNCHER]-APPID-RANDOM.scope
            parts = unit.dropFirst("app-".count).dropLast(".scope".count).split(separator: "-", omittingEmptySubsequences: false)
            guard parts.count >= 2 else { return nil }
            parts.removeLast()
        } else {
            return nil
        }
        guard (1...2).contains(parts.count), let last = parts.last else { return nil }
        return valid(unescape(last), .systemdUnit)
    }

    /// systemd's `\xNN` escapes in a unit name, undone.
    private static func unescape(_ text: Substring) -> String {
        var bytes: [UInt8] = []
        var rest = Array(text.utf8)[...]
        while let byte = rest.first {
            if byte == UInt8(ascii: "\\"), rest.count >= 4, rest[rest.startIndex + 1] == UInt8(ascii: "x"),
               let value = UInt8(String(decoding: rest[(rest.startIndex + 2)..<(rest.startIndex + 4)], as: UTF8.self), radix: 16) {
                bytes.append(value)
                rest = rest.dropFirst(4)
            } else {
                bytes.append(byte)
                rest = rest.dropFirst()
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// An application id is a D-Bus-style name: dotted elements of letters, digits, `_` and `-`.
    private static func valid(_ id: String, _ kind: Kind) -> RealApp? {
        let elements = id.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...255).contains(id.utf8.count), elements.count >= 2,
              elements.allSatisfy({ !$0.isEmpty && $0.utf8.allSatisfy { $0.isAppIdByte } && $0.first?.isNumber == false })
        else { return nil }
        return RealApp(id: id, kind: kind)
    }
}

private extension UInt8 {
    var isAppIdByte: Bool {
        (self >= UInt8(ascii: "a") && self <= UInt8(ascii: "z")) || (self >= UInt8(ascii: "A") && self <= UInt8(ascii: "Z"))
            || (self >= UInt8(ascii: "0") && self <= UInt8(ascii: "9")) || self == UInt8(ascii: "_") || self == UInt8(ascii: "-")
    }
}
