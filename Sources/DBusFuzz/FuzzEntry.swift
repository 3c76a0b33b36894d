// Coverage-guided fuzzing of the arguments nearbyd reads from its D-Bus
// clients (Sources/NearbyDaemon/Bus: Arguments, Options, each method's
// reader), over real sd-bus messages built in-process; plus a plain replay
// runner for builds without the fuzzer (README.md).

import DBus
import Dispatch
import FuzzReplay
@_spi(Testing) import NearbyDaemon

/// An input is one byte that picks the method, one that picks the arguments'
/// types (below 0xE0: the method's own signature, the only one sd-bus lets
/// through to its handler; else one to three types of the program's making),
/// then the program of the values (``ArgumentProgram``).
///
/// The message it builds must read as it was written (the DBus module's
/// writer and reader agree), and the method's reader must keep
/// ``BusArgumentsContract``'s promises on it.
enum FuzzProperty {
    static func check(_ input: [UInt8]) {
        let done = DispatchSemaphore(value: 0)
        Task { @BusActor in
            run(input)
            done.signal()
        }
        done.wait()
    }

    @BusActor static func run(_ input: [UInt8]) {
        let methods = BusArgumentsContract.Method.allCases
        var program = ArgumentProgram(input[...])
        let method = methods[Int(program.byte()) % methods.count]
        let shape = program.byte()
        let types = shape < 0xE0 ? WireType.parse(method.signature)
            : (0...Int(shape % 3)).map { _ in program.randomType(depth: 0) }
        let message: DetachedMessage
        var written: [DBusValue?] = []
        do {
            message = try DetachedMessage(member: method.name)
            try message.append { writer throws(DBusError) in
                for type in types { written.append(try program.append(type, to: writer)) }
            }
        } catch {
            fatalError("the program's message could not be built: \(error)")
        }
        if program.mirrored {
            let read: [DBusValue]
            do {
                read = try message.read { reader throws(DBusError) in try reader.readAll() }
            } catch {
                fatalError("a message of type '\(types.map(\.text).joined())' does not read back: \(error)")
            }
            guard "\(read)" == "\(written.compactMap { $0 })" else {
                fatalError("the message reads back otherwise: \("\(read)".prefix(500)) against \("\(written)".prefix(500))")
            }
        }
        BusArgumentsContract.check(method, message)
    }
}

/// libFuzzer's driver when built for fuzzing, else a replay of the inputs
/// named on the command line (FuzzHarness).
@main
enum Main {
    static func main() {
        FuzzHarness.main("dbus-fuzz", property: FuzzProperty.check)
    }
}
