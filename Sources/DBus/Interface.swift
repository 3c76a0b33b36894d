import CSystemd

/// A named argument of a method or signal, for introspection.
public struct Argument: Sendable {
    public let name: String
    public let signature: Signature

    public init(_ name: String, _ signature: Signature) {
        self.name = name
        self.signature = signature
    }
}

/// A method an exported `Object` implements. The handler decodes its arguments from
/// the ``MethodCall`` and replies, fails, or defers the reply; a method without
/// outputs that returns without doing any of these gets an empty reply.
public struct Method<Object: AnyObject>: Sendable {
    public let name: String
    public let inputs: [Argument]
    public let outputs: [Argument]
    let handler: @BusActor @Sendable (Object, MethodCall) throws(DBusError) -> Void

    public init(_ name: String, inputs: [Argument] = [], outputs: [Argument] = [],
                handler: @escaping @BusActor @Sendable (Object, MethodCall) throws(DBusError) -> Void) {
        self.name = name
        self.inputs = inputs
        self.outputs = outputs
        self.handler = handler
    }
}

/// A property of an exported `Object`. `get` returns a value of exactly the
/// declared signature; a property with `set` is writable.
public struct Property<Object: AnyObject>: Sendable {
    public let name: String
    public let signature: Signature
    /// Whether changes are announced with PropertiesChanged (shown in introspection).
    public let emitsChange: Bool
    let get: @BusActor @Sendable (Object, Caller) throws(DBusError) -> DBusValue
    let set: (@BusActor @Sendable (Object, DBusValue, Caller) throws(DBusError) -> Void)?

    public init(_ name: String, _ signature: Signature, emitsChange: Bool = true,
                get: @escaping @BusActor @Sendable (Object, Caller) throws(DBusError) -> DBusValue,
                set: (@BusActor @Sendable (Object, DBusValue, Caller) throws(DBusError) -> Void)? = nil) {
        self.name = name
        self.signature = signature
        self.emitsChange = emitsChange
        self.get = get
        self.set = set
    }
}

/// A signal an interface declares, for introspection.
public struct SignalDescription: Sendable {
    public let name: String
    public let arguments: [Argument]

    public init(_ name: String, _ arguments: [Argument] = []) {
        self.name = name
        self.arguments = arguments
    }
}

/// Who is asking: the unique bus name of the connection behind a call or property access.
public struct Caller: Sendable, Hashable {
    public let uniqueName: String
}

/// One D-Bus interface implemented by objects of type `Object`: its members and
/// the sd-bus vtable built from them. Define it once and export any number of
/// objects with it.
@BusActor
public final class Interface<Object: AnyObject>: ErasedInterface {
    public let name: String
    let methods: [Method<Object>]
    /// The methods as calls find and run them (``MethodEntry``).
    private let entries: [MethodEntry]
    let properties: [String: Property<Object>]
    let vtable: OpaquePointer

    public init(_ name: String, methods: [Method<Object>] = [], properties: [Property<Object>] = [],
                signals: [SignalDescription] = []) {
        self.name = name
        self.methods = methods
        var entries: [MethodEntry] = []
        for method in methods {
            let handler = method.handler
            entries.append(MethodEntry(name: method.name, hasOutputs: !method.outputs.isEmpty) { object, call throws(DBusError) in
                try handler(unsafeDowncast(object, to: Object.self), call)
            })
        }
        self.entries = entries
        self.properties = Dictionary(uniqueKeysWithValues: properties.map { ($0.name, $0) })
        guard let vtable = nearby_vtable_new(methods.count + properties.count + signals.count) else {
            fatalError("out of memory building the vtable of \(name)")
        }
        self.vtable = vtable
        // Access is decided per object by ExportedObject, so sd-bus's own privilege check is off.
        for method in methods {
            let names = Self.names(method.inputs + method.outputs)
            let result = names.withUnsafeBufferPointer { buffer in
                nearby_vtable_add_method(vtable, method.name, Self.joined(method.inputs), Self.joined(method.outputs),
                                         buffer.baseAddress, buffer.count, methodTrampoline, NEARBY_VTABLE_UNPRIVILEGED)
            }
            precondition(result >= 0, "vtable entry for \(name).\(method.name)")
        }
        for property in properties {
            // sd-bus accepts the unprivileged flag on writable properties only.
            let flags = (property.emitsChange ? NEARBY_VTABLE_PROPERTY_EMITS_CHANGE : 0)
                | (property.set == nil ? 0 : NEARBY_VTABLE_UNPRIVILEGED)
            let result = nearby_vtable_add_property(vtable, property.name, property.signature.rawValue,
                                                    propertyGetTrampoline,
                                                    property.set == nil ? nil : propertySetTrampoline, flags)
            precondition(result >= 0, "vtable entry for \(name).\(property.name)")
        }
        for signal in signals {
            let names = Self.names(signal.arguments)
            let result = names.withUnsafeBufferPointer { buffer in
                nearby_vtable_add_signal(vtable, signal.name, Self.joined(signal.arguments),
                                         buffer.baseAddress, buffer.count, 0)
            }
            precondition(result >= 0, "vtable entry for \(name).\(signal.name)")
        }
    }

    isolated deinit {
        nearby_vtable_free(vtable)
    }

    /// The method called `member`: compared with strcmp, which for an
    /// interface's few methods beats making a String of it and hashing it.
    func method(named member: UnsafePointer<CChar>) -> MethodEntry? {
        for entry in entries where CString.equals(member, entry.cName) { return entry }
        return nil
    }

    /// Pairs this interface with the object that implements it, for ``BusConnection/export(_:at:access:)``.
    public func bind(_ object: Object) -> InterfaceBinding {
        InterfaceBinding(name: name, vtable: vtable, definition: self,
                         implementation: BoundInterface(interface: self, object: object))
    }

    // The object of each of these came through `bind(_:)`, which takes an `Object` alone.

    func call(_ call: MethodCall, on object: AnyObject) throws(DBusError) {
        guard let member = call.memberName,
              let method = method(named: member) else {
            throw DBusError("org.freedesktop.DBus.Error.UnknownMethod", "no method \(call.member) on \(name)")
        }
        try method.run(object, call)
        guard !call.isAnswered else { return }
        if method.hasOutputs {
            call.fail(.failed("\(method.name) sent no reply"))
        } else {
            call.reply()
        }
    }

    func get(_ property: String, of object: AnyObject, _ caller: Caller) throws(DBusError) -> DBusValue {
        guard let definition = properties[property] else {
            throw .unknownProperty("no property \(property) on \(name)")
        }
        let value = try definition.get(unsafeDowncast(object, to: Object.self), caller)
        guard value.signature == definition.signature else {
            throw .failed("property \(property) produced '\(value.signature)', declared '\(definition.signature)'")
        }
        return value
    }

    func set(_ property: String, of object: AnyObject, to value: DBusValue, _ caller: Caller) throws(DBusError) {
        guard let definition = properties[property] else {
            throw .unknownProperty("no property \(property) on \(name)")
        }
        guard let setter = definition.set else { throw .propertyReadOnly("\(property) is read-only") }
        guard value.signature == definition.signature else {
            throw .invalidArgs("\(property) takes '\(definition.signature)', not '\(value.signature)'")
        }
        try setter(unsafeDowncast(object, to: Object.self), value, caller)
    }

    private static func joined(_ arguments: [Argument]) -> String {
        arguments.map(\.signature.rawValue).joined()
    }

    /// Argument names as sd-bus wants them: each followed by a NUL.
    private static func names(_ arguments: [Argument]) -> [CChar] {
        arguments.flatMap { Array($0.name.utf8CString) }
    }
}

/// An interface bound to one object, ready to be exported.
@BusActor
public struct InterfaceBinding {
    let name: String
    let vtable: OpaquePointer
    /// The ``Interface`` that owns `vtable`: sd-bus reads the vtable for as long
    /// as the interface is registered, so the registration holds it.
    let definition: AnyObject
    let implementation: BoundInterface
}

/// A method as a call finds and runs it, its object type erased.
/// ``Interface``'s code is not specialized for its `Object` (it is
/// compiled in this module, its objects' types are in others): finding a
/// `Method<Object>` and copying it out of the interface's list instantiated
/// its generic metadata on every call, about half a per cent of nearbyd's
/// samples under `nearby-bench dbus`. This type has none.
struct MethodEntry {
    let name: String
    /// `name` as a C string, to compare with a call's member.
    let cName: [CChar]
    let hasOutputs: Bool
    /// The method's handler, given an object of the interface's `Object` type.
    let run: @BusActor (AnyObject, MethodCall) throws(DBusError) -> Void

    init(name: String, hasOutputs: Bool, run: @escaping @BusActor (AnyObject, MethodCall) throws(DBusError) -> Void) {
        self.name = name
        cName = Array(name.utf8CString)
        self.hasOutputs = hasOutputs
        self.run = run
    }
}

/// An ``Interface`` with its object type erased, as the C trampolines call it.
@BusActor
protocol ErasedInterface: AnyObject {
    /// Runs the method the call names; one without outputs that its handler
    /// did not answer gets an empty reply.
    func call(_ call: MethodCall, on object: AnyObject) throws(DBusError)
    func get(_ property: String, of object: AnyObject, _ caller: Caller) throws(DBusError) -> DBusValue
    func set(_ property: String, of object: AnyObject, to value: DBusValue, _ caller: Caller) throws(DBusError)
}

/// An interface bound to the object that implements it: what a call to the
/// object's path runs. A pair of references, not an object of its own, so
/// that exporting an object allocates one thing fewer.
@BusActor
struct BoundInterface {
    let interface: any ErasedInterface
    let object: AnyObject

    func call(_ call: MethodCall) throws(DBusError) {
        try interface.call(call, on: object)
    }

    func get(_ property: String, _ caller: Caller) throws(DBusError) -> DBusValue {
        try interface.get(property, of: object, caller)
    }

    func set(_ property: String, _ value: DBusValue, _ caller: Caller) throws(DBusError) {
        try interface.set(property, of: object, to: value, caller)
    }
}
