import Foundation
import ServerAPI

extension BeaconRegistry {
    /// `POST /v1beta1/beaconinfo:getforobserved`, with the caller's API key:
    /// what the observed beacons carry for the caller.
    ///
    /// Only active beacons are answered, once each, in the order first
    /// observed. `*` reads every type of the namespaces the caller owns;
    /// `NAMESPACE/TYPE` and `NAMESPACE/*` read a namespace the caller owns or
    /// one that is public, and nothing of any other. A beacon is in the answer
    /// when it is the caller's own (with its description) or carries an
    /// attachment the caller asked for and may read; so another project's
    /// beacon without such attachments, like an unregistered id, is absent.
    /// Telemetry sent with an observation of one of the caller's own beacons
    /// is kept as that beacon's last.
    public func getForObserved(_ request: GetForObservedRequest, by caller: ProjectRecord) async throws -> GetForObservedResponse {
        try checkLimits(request)
        let patterns = try (request.namespacedTypes ?? []).enumerated().map {
            try NamespacedType.pattern($0.element, field: "namespacedTypes[\($0.offset)]")
        }
        let (ids, telemetry) = try observedIDs(request.observations)

        let owned = try await ownedNamespaces(caller)
        // Another project's namespace is read only when public and asked for by name.
        let named = Set(patterns.compactMap(\.namespace)).subtracting(owned)
        let others = try await storage.namespaces(named: named)
        let readable = owned.union(others.filter { $0.servingVisibility == .public }.map(\.name))
        let wanted = patterns.filter { $0.namespace.map(readable.contains) ?? true }
        let namespaces = Set(wanted.flatMap { $0.namespace.map { [$0] } ?? Array(owned) })

        let observed = try await storage.activeBeacons(ids, attachmentNamespaces: namespaces)
        let byID = Dictionary(observed.map { ($0.beacon.id, $0) }, uniquingKeysWith: { first, _ in first })
        let ownTelemetry = telemetry.filter { byID[$0.beacon]?.beacon.project == caller.name }
        if !ownTelemetry.isEmpty { try await storage.recordTelemetry(ownTelemetry) }

        var beacons: [BeaconInfo] = []
        for id in ids {
            guard let found = byID[id] else { continue }
            let attachments = found.attachments.filter { attachment in
                wanted.contains { $0.matches(namespace: attachment.namespace, type: attachment.type, owned: owned) }
            }
            let own = found.beacon.project == caller.name
            guard own || !attachments.isEmpty else { continue }
            beacons.append(BeaconInfo(advertisedId: id.advertisedId, beaconName: id.name,
                                      description: own ? found.beacon.description : nil,
                                      attachments: attachments.map {
                                          AttachmentInfo(namespacedType: "\($0.namespace)/\($0.type)", data: $0.data)
                                      }))
        }
        return GetForObservedResponse(beacons: beacons)
    }

    private func checkLimits(_ request: GetForObservedRequest) throws(APIError) {
        let observations = request.observations.count
        guard observations <= limits.maxObservationsPerRequest else {
            throw APIError(.invalidArgument, "observations holds \(observations) entries; at most \(limits.maxObservationsPerRequest) are taken at once ([limits] max-observations-per-request)")
        }
        let types = request.namespacedTypes?.count ?? 0
        guard types <= limits.maxNamespacedTypesPerRequest else {
            throw APIError(.invalidArgument, "namespacedTypes holds \(types) entries; at most \(limits.maxNamespacedTypesPerRequest) are taken at once ([limits] max-namespaced-types-per-request)")
        }
    }

    /// The distinct ids observed, in order, and the telemetry sent with them.
    private func observedIDs(_ observations: [GetForObservedRequest.Observation]) throws(APIError) -> ([BeaconID], [BeaconTelemetry]) {
        let now = clock.nowMs
        var times: RFC3339Parser?
        var ids: [BeaconID] = []
        var seen = Set<BeaconID>()
        var telemetry: [BeaconTelemetry] = []
        for (index, observation) in observations.enumerated() {
            let field = "observations[\(index)]"
            let id = try BeaconID(observation.advertisedId, field: "\(field).advertisedId")
            if seen.insert(id).inserted { ids.append(id) }
            var observedAt = now
            if let text = observation.timestampMs {
                let parser = times ?? RFC3339Parser()
                times = parser
                // A device clock ahead of the server's does not date telemetry in the future.
                observedAt = min(now, try parser.milliseconds(text, field: "\(field).timestampMs"))
            }
            if let frame = observation.telemetry, !frame.isEmpty {
                try BeaconValidation.telemetry(frame, field: "\(field).telemetry")
                telemetry.append(BeaconTelemetry(beacon: id, telemetry: frame, observedAtMs: observedAt))
            }
        }
        return (ids, telemetry)
    }
}
