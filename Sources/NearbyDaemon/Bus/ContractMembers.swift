import DBus
import NearbyBusContract

// nearbyd's interfaces are declared member by member from the contract: a
// member's name and argument types come from NearbyBusContract, and the
// daemon adds what the contract leaves to it, the arguments' names (for
// introspection) and how it answers. The contract writes its types as
// literals, taken here as Signature's literals are: an invalid one is a
// programming error.

extension Method {
    /// The contract's `member`, its arguments named in order by `inputs` and `outputs`.
    init(_ member: NearbyBusContract.Method, inputs: [String] = [], outputs: [String] = [],
         handler: @escaping @BusActor @Sendable (Object, MethodCall) throws(DBusError) -> Void) {
        self.init(member.name, inputs: namedArguments(inputs, member.inputs, of: member.name),
                  outputs: namedArguments(outputs, member.outputs, of: member.name), handler: handler)
    }
}

extension Property {
    /// The contract's `property`.
    init(_ property: NearbyBusContract.Property, emitsChange: Bool = true,
         get: @escaping @BusActor @Sendable (Object, Caller) throws(DBusError) -> DBusValue,
         set: (@BusActor @Sendable (Object, DBusValue, Caller) throws(DBusError) -> Void)? = nil) {
        self.init(property.name, Signature(contract: property.type), emitsChange: emitsChange, get: get, set: set)
    }
}

extension SignalDescription {
    /// The contract's `signal`, its arguments named in order by `arguments`.
    init(_ signal: NearbyBusContract.Signal, _ arguments: [String] = []) {
        self.init(signal.name, namedArguments(arguments, signal.arguments, of: signal.name))
    }
}

/// `names` paired in order with the complete types of `types`, one name each
/// (zip alone would drop the extra ones of a miscount).
private func namedArguments(_ names: [String], _ types: String, of member: String) -> [Argument] {
    let types = Signature(contract: types).completeTypes
    precondition(names.count == types.count, "\(member): \(names.count) argument names for \(types.count) types")
    return zip(names, types).map { Argument($0, $1) }
}

extension Signature {
    /// A type the contract writes. Checked in every build, unlike a literal:
    /// it is read once, as the interfaces are made, and an invalid one would
    /// otherwise become a member with no arguments. A programming error.
    init(contract type: String) {
        do { try self.init(type) } catch { preconditionFailure("the contract's type '\(type)' is invalid: \(error)") }
    }
}
