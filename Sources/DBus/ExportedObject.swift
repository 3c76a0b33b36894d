import CSystemd

/// Who may call an exported object's methods and read or write its properties.
public enum Access: Sendable {
    case anyone
    /// Only the connection with this unique name; anyone else is answered `denied`.
    /// Signals and PropertiesChanged of such an object are unicast to the owner.
    case owner(String, denied: DBusError)

    func check(_ sender: String) throws(DBusError) {
        if case .owner(let owner, let denied) = self, owner != sender { throw denied }
    }

    var destination: String? {
        if case .owner(let owner, _) = self { owner } else { nil }
    }
}

/// An object on the bus: one path, the interfaces bound to it, and who may use it.
/// It stays exported until ``unregister()``.
@BusActor
public final class ExportedObject {
    public let path: ObjectPath
    public let access: Access
    private let connection: BusConnection
    private var slots: [OpaquePointer] = []
    private var interfaces: [String: any InterfaceImplementation] = [:]

    fileprivate init(connection: BusConnection, path: ObjectPath, access: Access) {
        self.connection = connection
        self.path = path
        self.access = access
    }

    /// Emits one of the object's signals (to the owner only, for owned objects).
    public func emitSignal(interface: String, member: String,
                           arguments: @BusActor (MessageWriter) throws(DBusError) -> Void) throws(DBusError) {
        guard !slots.isEmpty else { return }
        try connection.emitSignal(path: path, interface: interface, member: member,
                                  destination: access.destination, arguments: arguments)
    }

    /// Emits `org.freedesktop.DBus.Properties.PropertiesChanged` with the current
    /// values of `names`. sd-bus's own emitter broadcasts; this one honours ``access``.
    public func emitPropertiesChanged(interface: String, _ names: [String]) throws(DBusError) {
        guard !slots.isEmpty, let implementation = interfaces[interface] else { return }
        let caller = Caller(uniqueName: access.destination ?? connection.uniqueName)
        try connection.emitSignal(path: path, interface: "org.freedesktop.DBus.Properties",
                                  member: "PropertiesChanged", destination: access.destination) { writer throws(DBusError) in
            try writer.append(interface)
            var changed: [DictEntry] = []
            for name in names {
                changed.append(DictEntry(.string(name), .variant(try implementation.get(name, caller))))
            }
            try writer.append(DBusValue.dictionary(key: "s", value: "v", changed))
            try writer.append([String]())
        }
    }

    /// Removes the object from the bus; calls to its path fail from now on.
    public func unregister() {
        for slot in slots { sd_bus_slot_unref(slot) }
        slots.removeAll()
        interfaces.removeAll()
    }

    fileprivate func add(_ binding: InterfaceBinding) throws(DBusError) {
        let box = SlotTarget(implementation: binding.implementation, access: access)
        let userdata = Unmanaged.passRetained(box).toOpaque()
        var slot: OpaquePointer?
        let result = sd_bus_add_object_vtable(connection.bus, &slot, path.rawValue, binding.name,
                                              nearby_vtable_array(binding.vtable), userdata)
        guard result >= 0, let slot else {
            Unmanaged<SlotTarget>.fromOpaque(userdata).release()
            throw .system(result, "exporting \(binding.name) at \(path)")
        }
        sd_bus_slot_set_destroy_callback(slot) { userdata in
            Unmanaged<SlotTarget>.fromOpaque(userdata!).release()
        }
        slots.append(slot)
        interfaces[binding.name] = binding.implementation
    }
}

extension BusConnection {
    /// Exports an object implementing `interfaces` at `path`. Introspection,
    /// Properties and Peer come with it.
    public func export(_ interfaces: [InterfaceBinding], at path: ObjectPath,
                       access: Access = .anyone) throws(DBusError) -> ExportedObject {
        let object = ExportedObject(connection: self, path: path, access: access)
        do {
            for binding in interfaces { try object.add(binding) }
        } catch {
            object.unregister()
            throw error
        }
        return object
    }
}

/// The userdata of one vtable registration; released by the slot's destroy callback.
@BusActor
private final class SlotTarget {
    let implementation: any InterfaceImplementation
    let access: Access

    init(implementation: any InterfaceImplementation, access: Access) {
        self.implementation = implementation
        self.access = access
    }
}

private func string(_ pointer: UnsafePointer<CChar>?) -> String {
    pointer.map { String(cString: $0) } ?? ""
}

private func sender(ofCurrentMessageOn bus: OpaquePointer?) -> String {
    string(sd_bus_message_get_sender(sd_bus_get_current_message(bus)))
}

let methodTrampoline: sd_bus_message_handler_t = { message, userdata, _ in
    BusActor.assumeIsolated((message, userdata)) { message, userdata in
        let target = Unmanaged<SlotTarget>.fromOpaque(userdata!).takeUnretainedValue()
        let call = MethodCall(message!)
        do throws(DBusError) {
            try target.access.check(call.caller.uniqueName)
            try target.implementation.call(call.member, call)
        } catch {
            call.fail(error)
        }
        if !call.isAnswered {
            if target.implementation.outputsAreEmpty(call.member) {
                call.reply()
            } else {
                call.fail(.failed("\(call.member) sent no reply"))
            }
        }
        return 1
    }
}

let propertyGetTrampoline: sd_bus_property_get_t = { bus, _, _, property, reply, userdata, errorOut in
    BusActor.assumeIsolated((bus, property, reply, userdata, errorOut)) { bus, property, reply, userdata, errorOut in
        let target = Unmanaged<SlotTarget>.fromOpaque(userdata!).takeUnretainedValue()
        let caller = Caller(uniqueName: sender(ofCurrentMessageOn: bus))
        do throws(DBusError) {
            try target.access.check(caller.uniqueName)
            let value = try target.implementation.get(string(property), caller)
            try MessageWriter(reply!).append(value)
            return 1
        } catch {
            return error.store(in: errorOut)
        }
    }
}

let propertySetTrampoline: sd_bus_property_set_t = { bus, _, _, property, value, userdata, errorOut in
    BusActor.assumeIsolated((bus, property, value, userdata, errorOut)) { bus, property, value, userdata, errorOut in
        let target = Unmanaged<SlotTarget>.fromOpaque(userdata!).takeUnretainedValue()
        let caller = Caller(uniqueName: sender(ofCurrentMessageOn: bus))
        do throws(DBusError) {
            try target.access.check(caller.uniqueName)
            let name = string(property)
            let newValue = try MessageReader(value!).readValue()
            try target.implementation.set(name, newValue, caller)
            return 1
        } catch {
            return error.store(in: errorOut)
        }
    }
}
