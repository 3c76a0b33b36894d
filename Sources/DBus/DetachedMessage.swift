import CSystemd
import Glibc

/// A method call built in this process and never sent: its arguments are
/// appended with a ``MessageWriter``, then it is sealed and read with a
/// ``MessageReader`` exactly as a call that came over a bus is read. For unit
/// tests and fuzzers of argument readers (dbus-fuzz), which need real sd-bus
/// messages of any content without a bus daemon.
///
/// sd-bus makes messages only for a bus: this one owns a server-side bus on
/// one end of a socket pair, started but never authenticated, so no message
/// can leave it. The message and that bus live as long as this value; the
/// writer and reader it hands to a closure are valid while that runs.
@BusActor
public final class DetachedMessage {
    private let bus: OpaquePointer
    private let message: OpaquePointer
    /// The other end of the bus's socket pair: kept open so the bus stays
    /// started, never read or written.
    private let peer: Int32
    private var sealed = false

    /// An empty method call to `member` of `interface` on `path`.
    public init(path: ObjectPath = "/", interface: String = "org.nearbyd.Detached", member: String = "Call") throws(DBusError) {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            throw .system(-errno, "creating a socket pair")
        }
        var handle: OpaquePointer?
        do throws(DBusError) {
            try check(sd_bus_new(&handle), "creating a bus")
            // The bus closes its own end.
            try check(sd_bus_set_fd(handle, fds[0], fds[0]), "handing the bus its socket")
            fds[0] = -1
            try check(sd_bus_set_server(handle, 1, sd_id128_t(qwords: (1, 1))), "making the bus a server")
            try check(sd_bus_set_anonymous(handle, 1), "making the bus anonymous")
            try check(sd_bus_start(handle), "starting the bus")
            var call: OpaquePointer?
            try check(sd_bus_message_new_method_call(handle, &call, nil, path.rawValue, interface, member),
                      "creating a method call")
            guard let handle, let call else { throw DBusError.failed("creating a method call") }
            bus = handle
            message = call
            peer = fds[1]
        } catch {
            if fds[0] >= 0 { close(fds[0]) }
            close(fds[1])
            sd_bus_close_unref(handle)
            throw error
        }
    }

    isolated deinit {
        sd_bus_message_unref(message)
        sd_bus_close_unref(bus)
        close(peer)
    }

    /// Appends arguments with `body`; only before the message is read.
    public func append(_ body: (MessageWriter) throws(DBusError) -> Void) throws(DBusError) {
        guard !sealed else { throw .failed("the message is sealed: it was read already") }
        try body(MessageWriter(message))
    }

    /// Runs `body` with a reader at the first argument, valid while it runs.
    /// The first read seals the message (no argument can be appended after
    /// it); each starts from the beginning.
    public func read<T>(_ body: (MessageReader) throws(DBusError) -> T) throws(DBusError) -> T {
        if !sealed {
            try check(sd_bus_message_seal(message, 1, 0), "sealing the message")
            sealed = true
        }
        try check(sd_bus_message_rewind(message, 1), "rewinding the message")
        return try body(MessageReader(message))
    }
}

extension MessageWriter {
    /// A container that ``appendContainer(_:_:_:)`` opens.
    public enum Container: UInt8, Sendable {
        /// `contents` is the element type.
        case array = 0x61 // a
        /// `contents` is the members' types.
        case structure = 0x72 // r
        /// `contents` is the one value's type.
        case variant = 0x76 // v
        /// In an array of dict entries: `contents` is the key's and the value's types.
        case dictEntry = 0x65 // e
    }

    /// Appends a container whose values `body` appends one at a time, for
    /// values too large to build as a ``DBusValue`` first (a fuzzer's huge
    /// arguments). `contents` is the signature inside the container (`{sv}`
    /// for an `a{sv}`); sd-bus checks it, and each value against it.
    public func appendContainer(_ container: Container, _ contents: String,
                                _ body: () throws(DBusError) -> Void) throws(DBusError) {
        try self.container(container.rawValue, contents, body)
    }
}
