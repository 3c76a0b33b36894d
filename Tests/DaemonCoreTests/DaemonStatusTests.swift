import DaemonCore
import NearbyCore
import Testing

/// What the daemon's and the managers' properties say of the server and the
/// mediums, from the links' views and the mediums' conditions.
struct DaemonStatusTests {
    private let urls = ["https://one", "https://two"]

    private func link(connectedTo server: String?) -> LinkView {
        var view = LinkView(refusedRetry: "30 s")
        struct None: LinkSubscriptions {
            func subscription(_ id: String) -> Subscription? { nil }
            func all() -> [Subscription] { [] }
            func runs(_ id: String) -> Bool { false }
        }
        if let server {
            _ = view.apply(.connected(namespace: "p", registered: [], server: server), subscriptions: None())
        } else {
            _ = view.apply(.waiting("connection refused", reached: false), subscriptions: None())
        }
        return view
    }

    @Test func theServerPropertyNamesEveryServerInUseInTheConfiguredOrder() {
        #expect(LinkView.serverStatus(of: [], urls: urls, unreachable: nil) == "idle")
        #expect(LinkView.serverStatus(of: [link(connectedTo: nil)], urls: urls, unreachable: nil) == "connecting")
        #expect(LinkView.serverStatus(of: [link(connectedTo: nil)], urls: urls, unreachable: "refused")
            == "unreachable: refused")
        let both = [link(connectedTo: "https://two"), link(connectedTo: nil), link(connectedTo: "https://one")]
        #expect(LinkView.serverStatus(of: both, urls: urls, unreachable: "refused") == "connected: https://one, https://two")
    }

    @Test func aManagersErrorsNameWhatItsObjectsNeedAndCannotHave() {
        let both: Set<Medium> = [.ble, .audio]
        #expect(MediumErrors.of(inUse: [], enabled: both, conditions: [:]) == MediumErrors())
        // No word from the BLE backend yet counts as unavailable.
        #expect(MediumErrors.of(inUse: [.ble], enabled: both, conditions: [:]) == MediumErrors(bluetoothPower: true))
        #expect(MediumErrors.of(inUse: [.ble], enabled: both, conditions: [.ble: .refused])
            == MediumErrors(bluetoothPermission: true))
        #expect(MediumErrors.of(inUse: both, enabled: both, conditions: [.ble: .ready, .audio: .refused])
            == MediumErrors(microphonePermission: true))
        // Audio merely unavailable is no permission error; a medium the configuration disables is none of the app's business.
        #expect(MediumErrors.of(inUse: both, enabled: both, conditions: [.ble: .ready, .audio: .unavailable]) == MediumErrors())
        #expect(MediumErrors.of(inUse: both, enabled: [.audio], conditions: [.audio: .ready]) == MediumErrors())
    }
}
