import Foundation
import HummingbirdCore
import NearbyCore
import ServerAPI

/// What nearby-server promises about any request body, WebSocket request or
/// query string a client may send: checked on every input by the
/// server-fuzz harness (Sources/ServerFuzz), which reaches it through this SPI.
///
/// A body is decoded as ``HTTPAPI`` decodes it and then checked as the
/// service checks it: it is taken, and what was taken is within the API's
/// rules and encodes to JSON that decodes to the same value, or it is refused
/// with `invalid_argument` and a sentence, never an internal error.
@_spi(Testing) public enum ServerRequestContract {
    /// What a client sends: each body the HTTP API decodes, the text
    /// messages of the two WebSockets, and a `/v1beta1` request target.
    public enum Input: UInt8, CaseIterable, Sendable {
        case publication, subscription, changes, sightings
        case beacon, attachment, namespace, getForObserved
        case streamRequest, channelRequest
        /// A request target `PATH?QUERY` of the beacon registry: the beacon
        /// segment, `q`, `pageSize`, `pageToken` and `namespacedType`.
        case beaconTarget
        /// The bytes a connection from a `[http] proxy-protocol-from` peer
        /// begins with: a PROXY protocol version 2 header, and what follows.
        case proxyHeader
    }

    /// The server's clock, and the project namespace a device falls back on.
    static let nowMs: UInt64 = 1_700_000_000_000
    static let projectNamespace = "project"

    /// Reads `bytes` as `input`; traps, naming the promise, when one is broken.
    public static func check(_ input: Input, _ bytes: [UInt8]) {
        let body = Data(bytes)
        switch input {
        case .publication:
            if let spec = decoded(PublicationSpec.self, body) {
                validated { () throws(APIError) in
                    let stored = try Validation.publication(spec, id: "p", device: "d", projectNamespace: projectNamespace, nowMs: nowMs)
                    expect(!stored.namespace.isEmpty && !stored.mediums.isEmpty && stored.content.count <= MessageRules.maximumContentBytes,
                           "a publication outside the rules taken", body)
                    expect(stored.expiresAtMs > nowMs && stored.expiresAtMs <= nowMs + Validation.maximumLifetimeMs + Validation.clockSlackMs,
                           "an expiry of \(stored.expiresAtMs) taken", body)
                }
            }
        case .subscription:
            if let spec = decoded(SubscriptionSpec.self, body) {
                validated { () throws(APIError) in
                    let stored = try Validation.subscription(spec, id: "s", device: "d", projectNamespace: projectNamespace, nowMs: nowMs)
                    expect(stored.expiresAtMs == 0 || stored.expiresAtMs <= nowMs + Validation.maximumLifetimeMs + Validation.clockSlackMs,
                           "an expiry of \(stored.expiresAtMs) taken", body)
                }
            }
        case .changes:
            if let batch = decoded(ChangeBatch.self, body) {
                for change in batch.changes {
                    validated { () throws(APIError) in
                        _ = try Validation.change(change, device: "d", projectNamespace: projectNamespace, nowMs: nowMs)
                        expect((1...128).contains(change.id.utf8.count), "a change of id \(change.id.debugDescription) taken", body)
                    }
                }
            }
        case .sightings:
            _ = decoded(SightingReport.self, body)
        case .beacon:
            if let beacon = decoded(Beacon.self, body) {
                validated { () throws(APIError) in
                    if let advertised = beacon.advertisedId {
                        let id = try BeaconID(advertised, field: "advertisedId")
                        expect((try? BeaconID(name: id.name)) == id, "the beacon name \(id.name) does not read back", body)
                    }
                    var stored = StoredBeacon(id: try BeaconID(name: "beacons/3!00000000000000000000000000000000"), project: "p",
                                              status: .active, createdAtMs: nowMs)
                    try BeaconValidation.describe(&stored, with: beacon)
                    expect(stored.properties.count <= BeaconValidation.maxProperties
                           && (stored.description?.utf8.count ?? 0) <= BeaconValidation.maxDescriptionBytes,
                           "a beacon description outside the bounds taken", body)
                }
            }
        case .attachment:
            if let attachment = decoded(BeaconAttachment.self, body) {
                validated { () throws(APIError) in
                    let (namespace, type) = try NamespacedType.exact(attachment.namespacedType, field: "namespacedType")
                    try BeaconValidation.attachmentData(attachment.data)
                    expect(!namespace.isEmpty && !type.isEmpty && type.unicodeScalars.count <= NamespacedType.maxTypeLength,
                           "the namespaced type \(attachment.namespacedType.debugDescription) taken", body)
                }
            }
        case .namespace:
            _ = decoded(BeaconNamespace.self, body)
        case .getForObserved:
            if let request = decoded(GetForObservedRequest.self, body) {
                let times = RFC3339Parser()
                for (index, observation) in request.observations.enumerated() {
                    validated { () throws(APIError) in
                        _ = try BeaconID(observation.advertisedId, field: "observations[\(index)].advertisedId")
                        if let text = observation.timestampMs { _ = try times.milliseconds(text, field: "timestampMs") }
                        if let telemetry = observation.telemetry { try BeaconValidation.telemetry(telemetry, field: "telemetry") }
                    }
                }
                for pattern in request.namespacedTypes ?? [] {
                    validated { () throws(APIError) in _ = try NamespacedType.pattern(pattern, field: "namespacedTypes") }
                }
            }
        case .streamRequest:
            // The stream reads a request or closes; the channel likewise.
            if let request = try? JSONDecoder().decode(StreamRequest.self, from: body) { readsBack(request, body) }
        case .channelRequest:
            if let request = try? JSONDecoder().decode(ChannelRequest.self, from: body) { readsBack(request, body) }
        case .beaconTarget:
            checkTarget(String(decoding: bytes, as: UTF8.self))
        case .proxyHeader:
            checkProxyHeader(bytes)
        }
    }

    /// A connection's first bytes as ``ProxyHeaderHandler`` reads them, at
    /// the smallest `[http] max-header-bytes` and the default: a header is
    /// taken whole, within the limit and the bytes that came, and bytes
    /// coming later change nothing of it; one fewer byte of it would have
    /// been awaited, not refused; a refusal says why.
    private static func checkProxyHeader(_ bytes: [UInt8]) {
        let body = Data(bytes)
        for maxBytes in [4096, ServerConfiguration.HTTP().maxHeaderBytes] {
            switch ProxyProtocolHeader.parse(bytes, maxBytes: maxBytes) {
            case .incomplete:
                expect(bytes.count < maxBytes, "a header awaited past the \(maxBytes) bytes taken", body)
            case .complete(let consumed, let client):
                expect(consumed >= ProxyProtocolHeader.fixedBytes && consumed <= min(bytes.count, maxBytes),
                       "a header of \(consumed) bytes taken from \(bytes.count), at most \(maxBytes)", body)
                expect(client.map { !$0.description.isEmpty } ?? true, "an empty client address", body)
                expect(ProxyProtocolHeader.parse(bytes + [0x47, 0x45, 0x54], maxBytes: maxBytes) == .complete(consumed: consumed, client: client),
                       "a header read otherwise once more bytes came", body)
                expect(ProxyProtocolHeader.parse(bytes.prefix(consumed - 1), maxBytes: maxBytes) == .incomplete,
                       "a header refused or taken before its last byte", body)
            case .refused(let reason):
                expect(!reason.isEmpty, "a refusal without a reason", body)
            }
        }
    }

    /// A `/v1beta1/beacons/SEGMENT?QUERY` target as the router and
    /// BeaconHTTPAPI read it: the segment percent-decoded into a beacon name,
    /// the query's parameters.
    private static func checkTarget(_ target: String) {
        let uri = URI(target)
        let segment = uri.path.split(separator: "/", omittingEmptySubsequences: false).last.map(String.init) ?? ""
        let name = "beacons/\(segment.removingPercentEncoding ?? segment)"
        validated { () throws(APIError) in
            let id = try BeaconID(name: name)
            expect(id.bytes.count == id.type.byteCount && (try? BeaconID(name: id.name)) == id,
                   "the beacon name \(name.debugDescription) taken as \(id.name)", Data(target.utf8))
        }
        let query = uri.queryParameters
        if let q = query["q"] {
            validated { () throws(APIError) in
                let maxTerms = ServerConfiguration.Limits().maxQueryTerms
                let filter = try BeaconQuery.filter(String(q), maxTerms: maxTerms)
                let terms = filter.statuses.count + filter.types.count + filter.descriptions.count
                expect(terms <= min(maxTerms, q.split(separator: " ").count),
                       "\(terms) terms read from q \(String(q).debugDescription)", Data(target.utf8))
            }
        }
        if let pattern = query["namespacedType"] {
            validated { () throws(APIError) in _ = try NamespacedType.pattern(String(pattern), field: "namespacedType") }
        }
    }

    /// Decodes `body` as HTTPAPI does; nil when refused, as it must be, with `invalid_argument`.
    private static func decoded<T: Codable & Equatable>(_ type: T.Type, _ body: Data) -> T? {
        do {
            let value = try HTTPAPI.decodeBody(T.self, from: body)
            readsBack(value, body)
            return value
        } catch let error as APIError {
            expect(error.error == .invalidArgument && !error.message.isEmpty, "a refusal \(error)", body)
        } catch {
            expect(false, "an error that is not the API's (an internal error): \(error)", body)
        }
        return nil
    }

    /// Runs the service's checks of a decoded value: they take it, or refuse it with `invalid_argument`.
    private static func validated(_ check: () throws(APIError) -> Void) {
        do {
            try check()
        } catch {
            expect(error.error == .invalidArgument && !error.message.isEmpty, "a refusal \(error)", Data())
        }
    }

    /// What the server took encodes to JSON that decodes to the same value.
    private static func readsBack<T: Codable & Equatable>(_ value: T, _ body: Data) {
        let again = (try? JSONEncoder().encode(value)).flatMap { try? JSONDecoder().decode(T.self, from: $0) }
        expect(again == value, "a \(T.self) that does not read back from its own JSON", body)
    }

    private static func expect(_ condition: Bool, _ promise: @autoclosure () -> String, _ body: Data) {
        if !condition {
            fatalError("nearby-server: \(promise()), for \(body.count) bytes: \(String(decoding: body.prefix(512), as: UTF8.self).debugDescription)")
        }
    }
}
