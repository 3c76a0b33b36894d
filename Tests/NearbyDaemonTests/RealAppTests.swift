import NearbyCore
import Testing
@testable import NearbyDaemon

/// The app a caller really is, read from its control group.
@Suite struct RealAppTests {
    @Test(arguments: [
        // Flatpak, on a unified (cgroup v2) system and on a hybrid one.
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-flatpak-org.gnome.Maps-81234.scope\n",
         RealApp(id: "org.gnome.Maps", kind: .flatpak)),
        ("1:name=systemd:/user.slice/user-1000.slice/user@1000.service/app.slice/app-flatpak-com.example.My_App-7.scope\n0::/\n",
         RealApp(id: "com.example.My_App", kind: .flatpak)),
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-flatpak-org.example.with-dash-12.scope\n",
         RealApp(id: "org.example.with-dash", kind: .flatpak)),
        // Desktops' app units: with and without a launcher, scope or service, '-' escaped.
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-org.gnome.Terminal-4521.scope\n",
         RealApp(id: "org.gnome.Terminal", kind: .systemdUnit)),
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.example.Chat@a1b2c3.service\n",
         RealApp(id: "org.example.Chat", kind: .systemdUnit)),
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-kde-org.kde.my\\x2dapp-99.scope\n",
         RealApp(id: "org.kde.my-app", kind: .systemdUnit)),
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.example.Plain.service\n",
         RealApp(id: "org.example.Plain", kind: .systemdUnit)),
    ])
    func appsAreKnownByTheirUnits(cgroup: String, app: RealApp) {
        #expect(RealApp.parse(cgroup: cgroup) == app)
    }

    @Test(arguments: [
        "0::/user.slice/user-1000.slice/session-2.scope\n",
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/gnome-terminal-server.service\n",
        "0::/system.slice/nearbyd.service\n",
        "0::/\n",
        "",
        "garbage",
        // Not an application id (no dots, an empty element, a leading digit), or no number where Flatpak puts one.
        "0::/app.slice/app-flatpak-notdotted-12.scope\n",
        "0::/app.slice/app-flatpak-org..example-12.scope\n",
        "0::/app.slice/app-flatpak-org.9example-12.scope\n",
        "0::/app.slice/app-flatpak-org.example.App-x1.scope\n",
        // Too many parts: a '-' in the id must be escaped.
        "0::/app.slice/app-a-b-org.example.App-3.scope\n",
    ])
    func otherUnitsNameNoApp(cgroup: String) {
        #expect(RealApp.parse(cgroup: cgroup) == nil)
    }

    @Test func theSystemsAppWinsOverWhatTheCallerSays() throws {
        let maps = RealApp(id: "org.gnome.Maps", kind: .flatpak)
        #expect(try DaemonService.appId(requested: nil, real: maps, uid: 1000, apiKey: "k") == "org.gnome.Maps")
        #expect(try DaemonService.appId(requested: "org.gnome.Maps", real: maps, uid: 1000, apiKey: "k") == "org.gnome.Maps")
        #expect(throws: NearbyError.self) { try DaemonService.appId(requested: "org.example.Bank", real: maps, uid: 1000, apiKey: "k") }
        #expect(try DaemonService.appId(requested: "org.example.Bank", real: nil, uid: 1000, apiKey: "k") == "org.example.Bank")
        #expect(try DaemonService.appId(requested: nil, real: nil, uid: 1000, apiKey: "k").hasPrefix("uid1000-"))
    }
}
