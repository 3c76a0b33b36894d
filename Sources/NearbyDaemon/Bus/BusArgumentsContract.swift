import DBus
import Glibc
import NearbyBusContract
import NearbyCore
import ServerAPI
import Upstream

/// What nearbyd's method argument readers promise whatever a client sends:
/// checked on every input by the dbus-fuzz harness (Sources/DBusFuzz), which
/// reaches it through this SPI with messages built in-process
/// (``DetachedMessage``).
///
/// Each method's reader (the one its handler calls) either takes the call,
/// and what it took is within that method's rules, or refuses it with
/// `org.nearbyd.Error.InvalidArguments` or the bus's `InvalidArgs`, saying
/// why; and reading costs the daemon a bounded amount of memory, however
/// large the message (its values are measured in place, not copied out).
@_spi(Testing) public enum BusArgumentsContract {
    /// The methods whose arguments nearbyd reads.
    public enum Method: CaseIterable, Sendable {
        // In this order: the harness's inputs pick a method by its place.
        case createManager, registerPermissionAgent, unregisterPermissionAgent, getPermission, setPermission, listPermissions
        case publish, subscribe
        case sendMessage

        /// Its name, the contract's.
        public var name: String {
            switch self {
            case .createManager: NearbyBusContract.Nearby1.createManager.name
            case .registerPermissionAgent: NearbyBusContract.Nearby1.registerPermissionAgent.name
            case .unregisterPermissionAgent: NearbyBusContract.Nearby1.unregisterPermissionAgent.name
            case .getPermission: NearbyBusContract.Nearby1.getPermission.name
            case .setPermission: NearbyBusContract.Nearby1.setPermission.name
            case .listPermissions: NearbyBusContract.Nearby1.listPermissions.name
            case .publish: NearbyBusContract.Manager1.publish.name
            case .subscribe: NearbyBusContract.Manager1.subscribe.name
            case .sendMessage: NearbyBusContract.Upstream1.sendMessage.name
            }
        }

        /// The input signature its interface declares: the only one sd-bus
        /// lets through to the handler.
        @BusActor public var signature: Signature {
            let declared = switch self {
            case .createManager, .registerPermissionAgent, .unregisterPermissionAgent, .getPermission, .setPermission,
                 .listPermissions:
                RootObject.interface.inputSignature(of: name)
            case .publish, .subscribe: ManagerObject.interface.inputSignature(of: name)
            case .sendMessage: ManagerObject.upstreamInterface.inputSignature(of: name)
            }
            guard let declared else { fatalError("\(name) is not declared by its interface") }
            return declared
        }
    }

    /// The most that reading one message may raise the process's peak
    /// resident memory: the largest value a reader copies out is a
    /// publication's content (100 KiB).
    public static let maximumReadingCost = 16 << 20

    /// Reads `message` as `method`'s arguments; traps, naming the promise,
    /// when one is broken.
    @BusActor public static func check(_ method: Method, _ message: DetachedMessage) {
        do {
            try message.read { reader throws(DBusError) in
                let before = peakResidentBytes()
                let outcome = Result { () throws(DBusError) in try read(method, Arguments(reader)) }
                let cost = peakResidentBytes() - before
                expect(cost <= maximumReadingCost, "reading cost \(cost >> 20) MiB of memory", method, reader)
                if case .failure(let error) = outcome {
                    expect([nearbyRefusal, busRefusal].contains(error.name), "a refusal named \(error.name)", method, reader)
                    expect(!error.message.isEmpty, "a refusal that says nothing", method, reader)
                }
            }
        } catch {
            fatalError("the harness built a message that cannot be read: \(error)")
        }
    }

    private static let nearbyRefusal = NearbyError.invalidArguments("").dbusError.name
    private static let busRefusal = DBusError.invalidArgs("").name

    /// Runs `method`'s reader and checks what it took against the method's rules.
    @BusActor private static func read(_ method: Method, _ arguments: Arguments) throws(DBusError) {
        let stringBytes = Arguments.Bounds.stringBytes
        switch method {
        case .createManager:
            let request = try ManagerRequest.read(arguments)
            expect((1...256).contains(request.apiKey.utf8.count), "an api_key of \(request.apiKey.utf8.count) bytes", method)
            if let appId = request.appId { expect(isAppId(appId), "the AppId \(appId.debugDescription)", method) }
            expect(Set(request.usageDescriptions.keys).isSubset(of: ManagerRequest.usageDescriptionKeys),
                   "a usage description of another key", method)
            expect(request.usageDescriptions.values.allSatisfy { (1...1024).contains($0.utf8.count) },
                   "a usage description over 1024 bytes", method)
        case .registerPermissionAgent, .unregisterPermissionAgent:
            let agent = try arguments.objectPath("agent")
            expect(agent.rawValue.utf8.count <= stringBytes, "an agent path of \(agent.rawValue.utf8.count) bytes", method)
        case .getPermission:
            let (appId, _) = try RootObject.readGetPermission(arguments)
            expect(isAppId(appId), "the app_id \(appId.debugDescription)", method)
        case .setPermission:
            let (appId, _, _) = try RootObject.readSetPermission(arguments)
            expect(isAppId(appId), "the app_id \(appId.debugDescription)", method)
        case .listPermissions:
            _ = try RootObject.readListPermissions(arguments)
        case .publish:
            let (message, strategy, _) = try ManagerObject.readPublish(arguments) { params throws(NearbyError) in
                try strategyOf(params, for: .publication)
            }
            expect((1...MessageRules.maximumContentBytes).contains(message.content.count),
                   "content of \(message.content.count) bytes", method)
            expect(message.type.unicodeScalars.count <= MessageRules.maximumTypeLength
                   && message.namespace.utf8.count <= MessageRules.maximumNamespaceLength, "a type or namespace too long", method)
            expect((1...Strategy.maximumTTL).contains(strategy.ttlSeconds), "a publication TTL of \(strategy.ttlSeconds)", method)
        case .subscribe:
            let (filter, strategy, deviceTypes, _) = try ManagerObject.readSubscribe(arguments) { params throws(NearbyError) in
                try strategyOf(params, for: .subscription)
            }
            expect(filter.type.unicodeScalars.count <= MessageRules.maximumTypeLength
                   && filter.namespace.utf8.count <= MessageRules.maximumNamespaceLength, "a type or namespace too long", method)
            expect(strategy.ttlSeconds <= Strategy.maximumTTL, "a subscription TTL of \(strategy.ttlSeconds)", method)
            expect(deviceTypes.nearby || deviceTypes.beacons != nil, "a subscription to no device type", method)
        case .sendMessage:
            let message = try ManagerObject.readSendMessage(arguments)
            let size = CCSRules.dataBytes(message.data)
            expect(size <= CCSRules.maximumDataBytes, "data of \(size) bytes", method)
            expect(message.to.utf8.count <= stringBytes && message.messageID.utf8.count <= stringBytes,
                   "a 'to' or message_id over \(stringBytes) bytes", method)
            // The service's check, which the handler makes next.
            _ = try checked { () throws(NearbyError) in try message.validate() }
        }
    }

    /// As the service reads a Strategy, with every medium enabled and no
    /// configured defaults.
    private static func strategyOf(_ params: Options, for owner: Strategy.Owner) throws(NearbyError) -> Strategy {
        let key = NearbyBusContract.PublishOrSubscribeOption.strategy.name
        return try StrategyOptions.parse(params.options(key, allowed: StrategyOptions.allowed, context: key),
                                         for: owner, enabled: Set(Medium.allCases))
    }

    private static func isAppId(_ appId: String) -> Bool {
        (try? ManagerRequest.checkAppId(appId)) != nil
    }

    /// The process's peak resident memory so far, in bytes.
    private static func peakResidentBytes() -> Int {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return usage.ru_maxrss * 1024
    }

    @BusActor private static func expect(_ condition: Bool, _ promise: @autoclosure () -> String, _ method: Method,
                                         _ reader: MessageReader? = nil) {
        if !condition {
            fatalError("\(method.name): \(promise()), for arguments of type '\(reader?.signature.rawValue ?? "?")'")
        }
    }
}
