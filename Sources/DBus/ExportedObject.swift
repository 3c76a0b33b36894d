import CSystemd
import Glibc

/// Who may call an exported object's methods and read or write its properties.
public enum Access: Sendable {
    case anyone
    /// Only the connection with this unique name; anyone else is answered `denied`.
    /// Signals and PropertiesChanged of such an object are unicast to the owner.
    case owner(String, denied: DBusError)
    /// Only the connection that owns the service's name now (an object a
    /// service calls back, such as bluetoothd's advertisements); anyone else
    /// is answered `denied`.
    case service(BusService, denied: DBusError)

    @BusActor
    func check(_ sender: UnsafePointer<CChar>?) throws(DBusError) {
        switch self {
        case .anyone:
            return
        case .owner(let owner, let denied):
            guard let sender, CString.equals(sender, owner) else { throw denied }
        case .service(let service, let denied):
            guard let sender, service.isOwner(String(cString: sender)) else { throw denied }
        }
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
    /// Its interfaces' entries in the connection's table, chained: an object
    /// has one to three, and exporting one allocates no list.
    /// Unexporting reaches the table's entries without hashing their names.
    private var first: SlotTarget?

    fileprivate init(connection: BusConnection, path: ObjectPath, access: Access) {
        self.connection = connection
        self.path = path
        self.access = access
    }

    /// Emits one of the object's signals (to the owner only, for owned objects).
    public func emitSignal(interface: String, member: String,
                           arguments: @BusActor (MessageWriter) throws(DBusError) -> Void) throws(DBusError) {
        guard first != nil else { return }
        try connection.emitSignal(path: path, interface: interface, member: member,
                                  destination: access.destination, arguments: arguments)
    }

    /// Emits `org.freedesktop.DBus.Properties.PropertiesChanged` with the current
    /// values of `names`. sd-bus's own emitter broadcasts; this one honours ``access``.
    public func emitPropertiesChanged(interface: String, _ names: [String]) throws(DBusError) {
        guard let implementation = target(of: interface)?.implementation else { return }
        let caller = Caller(uniqueName: access.destination ?? connection.uniqueName)
        try connection.emitSignal(path: path, interface: "org.freedesktop.DBus.Properties",
                                  member: "PropertiesChanged", destination: access.destination) { writer throws(DBusError) in
            try writer.append(interface)
            // Written entry by entry: a status change goes out on every Publish, and a
            // `DBusValue.dictionary` would be built, and its signatures checked, first.
            try writer.container(UInt8(ascii: "a"), "{sv}") { () throws(DBusError) in
                for name in names {
                    let value = try implementation.get(name, caller)
                    try writer.container(UInt8(ascii: "e"), "sv") { () throws(DBusError) in
                        try writer.appendString(UInt8(ascii: "s"), name)
                        try writer.append(DBusValue.variant(value))
                    }
                }
            }
            try writer.append([String]())
        }
    }

    /// Removes the object from the bus; calls to its path fail from now on.
    public func unregister() {
        while let target = first {
            target.objects.targets.removeValue(forKey: PathKey(path))
            first = target.next
            target.next = nil
        }
    }

    fileprivate func add(_ binding: InterfaceBinding) throws(DBusError) {
        let target = try connection.objects.add(binding, access: access, at: path, on: connection.bus)
        // A path has each interface once (the table refuses a second): the order does not matter.
        target.next = first
        first = target
    }

    private func target(of interface: String) -> SlotTarget? {
        var target = first
        while let current = target, current.objects.name != interface { target = current.next }
        return target
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

extension BusConnection {
    /// Serves `org.freedesktop.DBus.ObjectManager` at `path` (sd-bus's own
    /// implementation): `GetManagedObjects` lists every object exported below
    /// it with its interfaces and properties. Served until the returned
    /// registration is cancelled or released.
    public func addObjectManager(at path: ObjectPath) throws(DBusError) -> ObjectManagerRegistration {
        let registration = ObjectManagerRegistration()
        try check(sd_bus_add_object_manager(bus, &registration.manager, path.rawValue), "serving an object manager at \(path)")
        // sd-bus asks only the enumerators registered at the manager's own path
        // for the objects below it.
        try check(sd_bus_add_node_enumerator(bus, &registration.enumerator, path.rawValue, enumerateTrampoline,
                                             Unmanaged.passUnretained(objects).toOpaque()),
                  "listing the objects below \(path)")
        return registration
    }
}

/// A live ``BusConnection/addObjectManager(at:)``.
@BusActor
public final class ObjectManagerRegistration {
    fileprivate var manager: OpaquePointer?
    fileprivate var enumerator: OpaquePointer?

    fileprivate init() {}

    public func cancel() {
        if let manager { sd_bus_slot_unref(manager) }
        if let enumerator { sd_bus_slot_unref(enumerator) }
        manager = nil
        enumerator = nil
    }

    isolated deinit {
        cancel()
    }
}

/// Every object a connection exports, by interface and path.
///
/// sd-bus sees one fallback vtable per interface, registered at `/` the first
/// time the interface is exported, and asks this table which object (if any)
/// implements it at a path. Exporting an object is then a dictionary insert,
/// not a registration of every member in sd-bus's own tables: a daemon making
/// and ending thousands of objects a second cares.
@BusActor
final class ObjectTable {
    /// The objects of one interface, and its sd-bus registration.
    final class InterfaceObjects {
        let name: String
        let definition: AnyObject
        var targets: [PathKey: SlotTarget] = [:]
        var slot: OpaquePointer?

        init(name: String, definition: AnyObject) {
            self.name = name
            self.definition = definition
        }
    }

    /// One per interface exported, in a list: a connection exports a handful,
    /// and comparing a few pointers on each export costs less than hashing
    /// the interface's name.
    private var interfaces: [InterfaceObjects] = []
    private var enumerator: OpaquePointer?

    /// Enters `binding`'s implementation at `path`, callable as `access`
    /// says; returns its entry, which knows where the caller removes it again.
    func add(_ binding: InterfaceBinding, access: Access, at path: ObjectPath,
             on bus: OpaquePointer) throws(DBusError) -> SlotTarget {
        let objects = try registered(binding, on: bus)
        let target = SlotTarget(implementation: binding.implementation, access: access, objects: objects)
        // One hash of the path where the path is free, as nearly always; the entry
        // found there otherwise is put back before anything else runs.
        if let existing = objects.targets.updateValue(target, forKey: PathKey(path)) {
            objects.targets[PathKey(path)] = existing
            throw DBusError("org.freedesktop.DBus.Error.FileExists", "\(path) already implements \(binding.name)")
        }
        return target
    }

    /// Every exported path, for introspection's child nodes.
    var paths: Set<String> {
        interfaces.reduce(into: Set<String>()) { $0.formUnion($1.targets.keys.lazy.map(\.string)) }
    }

    func close() {
        for objects in interfaces {
            if let slot = objects.slot { sd_bus_slot_unref(slot) }
            // Each entry holds its table: emptied, neither keeps the other.
            objects.targets.removeAll()
        }
        interfaces.removeAll()
        if let enumerator { sd_bus_slot_unref(enumerator) }
        enumerator = nil
    }

    private func registered(_ binding: InterfaceBinding, on bus: OpaquePointer) throws(DBusError) -> InterfaceObjects {
        for objects in interfaces where objects.definition === binding.definition { return objects }
        guard !interfaces.contains(where: { $0.name == binding.name }) else {
            throw .failed("two different definitions of \(binding.name) cannot be exported on one connection")
        }
        if enumerator == nil {
            var slot: OpaquePointer?
            try check(sd_bus_add_node_enumerator(bus, &slot, "/", enumerateTrampoline, Unmanaged.passUnretained(self).toOpaque()),
                      "listing exported objects")
            enumerator = slot
        }
        let objects = InterfaceObjects(name: binding.name, definition: binding.definition)
        var slot: OpaquePointer?
        try check(sd_bus_add_fallback_vtable(bus, &slot, "/", binding.name, nearby_vtable_array(binding.vtable),
                                             findTrampoline, Unmanaged.passUnretained(objects).toOpaque()),
                  "exporting \(binding.name)")
        objects.slot = slot
        interfaces.append(objects)
        return objects
    }
}

/// An object path as ``ObjectTable``'s key: the path's own string when an
/// object is entered, sd-bus's C string when one is looked up, so finding the
/// object of each call copies nothing (a `String` made from it allocated for
/// every path longer than 15 bytes). Equal and hashed by the path's bytes.
struct PathKey: Hashable {
    private enum Bytes {
        case owned(String)
        /// Valid only for the lookup the key is made for.
        case borrowed(UnsafePointer<CChar>)
    }

    private let bytes: Bytes

    init(_ path: ObjectPath) {
        bytes = .owned(path.rawValue)
    }

    /// A key for one lookup: `path` must outlive it.
    init(borrowing path: UnsafePointer<CChar>) {
        bytes = .borrowed(path)
    }

    var string: String {
        switch bytes {
        case .owned(let string): string
        case .borrowed(let pointer): String(cString: pointer)
        }
    }

    private func withBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        switch bytes {
        case .owned(var string): string.withUTF8 { body(UnsafeRawBufferPointer($0)) }
        case .borrowed(let pointer): body(UnsafeRawBufferPointer(start: pointer, count: strlen(pointer)))
        }
    }

    static func == (lhs: PathKey, rhs: PathKey) -> Bool {
        lhs.withBytes { a in
            rhs.withBytes { b in a.count == b.count && (a.isEmpty || memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0) }
        }
    }

    func hash(into hasher: inout Hasher) {
        withBytes { hasher.combine(bytes: $0) }
    }
}

/// What a vtable callback gets as userdata: the object's implementation of the
/// interface and who may use it. Owned by the ``ObjectTable``.
@BusActor
final class SlotTarget {
    let implementation: BoundInterface
    let access: Access
    /// The interface's table, which holds this entry.
    let objects: ObjectTable.InterfaceObjects
    /// The same object's next interface (``ExportedObject``).
    var next: SlotTarget?

    init(implementation: BoundInterface, access: Access, objects: ObjectTable.InterfaceObjects) {
        self.implementation = implementation
        self.access = access
        self.objects = objects
    }
}

/// sd-bus asks which object implements an interface at a path.
private let findTrampoline: sd_bus_object_find_t = { _, path, _, userdata, found, _ in
    BusActor.assumeIsolated((path, userdata, found)) { path, userdata, found in
        let objects = Unmanaged<ObjectTable.InterfaceObjects>.fromOpaque(userdata!).takeUnretainedValue()
        guard let path, let target = objects.targets[PathKey(borrowing: path)] else { return 0 }
        found?.pointee = Unmanaged.passUnretained(target).toOpaque()
        return 1
    }
}

/// sd-bus asks for the objects below a path (introspection's child nodes).
private let enumerateTrampoline: sd_bus_node_enumerator_t = { _, prefix, userdata, nodes, _ in
    BusActor.assumeIsolated((prefix, userdata, nodes)) { prefix, userdata, nodes in
        let table = Unmanaged<ObjectTable>.fromOpaque(userdata!).takeUnretainedValue()
        let below = CString.string(prefix, absent: "/")
        let paths = table.paths.filter { ObjectPath(trusted: $0).isDescendant(of: ObjectPath(trusted: below)) }
        // A NULL-terminated array of strings that sd-bus frees.
        guard let array = calloc(paths.count + 1, MemoryLayout<UnsafeMutablePointer<CChar>?>.size)?
            .assumingMemoryBound(to: UnsafeMutablePointer<CChar>?.self) else { return -ENOMEM }
        for (index, path) in paths.enumerated() { array[index] = strdup(path) }
        nodes?.pointee = array
        return 0
    }
}

private func sender(ofCurrentMessageOn bus: OpaquePointer?) -> UnsafePointer<CChar>? {
    sd_bus_message_get_sender(sd_bus_get_current_message(bus))
}

let methodTrampoline: sd_bus_message_handler_t = { message, userdata, _ in
    BusActor.assumeIsolated((message, userdata)) { message, userdata in
        let target = Unmanaged<SlotTarget>.fromOpaque(userdata!).takeUnretainedValue()
        MethodCall.handling(message!) { call in
            do throws(DBusError) {
                try target.access.check(call.senderName)
                try target.implementation.call(call)
            } catch {
                call.fail(error)
            }
        }
        return 1
    }
}

let propertyGetTrampoline: sd_bus_property_get_t = { bus, _, _, property, reply, userdata, errorOut in
    BusActor.assumeIsolated((bus, property, reply, userdata, errorOut)) { bus, property, reply, userdata, errorOut in
        let target = Unmanaged<SlotTarget>.fromOpaque(userdata!).takeUnretainedValue()
        let sender = sender(ofCurrentMessageOn: bus)
        let caller = Caller(uniqueName: CString.string(sender))
        do throws(DBusError) {
            try target.access.check(sender)
            let value = try target.implementation.get(CString.string(property), caller)
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
        let sender = sender(ofCurrentMessageOn: bus)
        let caller = Caller(uniqueName: CString.string(sender))
        do throws(DBusError) {
            try target.access.check(sender)
            let name = CString.string(property)
            let newValue = try MessageReader(value!).readValue()
            try target.implementation.set(name, newValue, caller)
            return 1
        } catch {
            return error.store(in: errorOut)
        }
    }
}
