import DBus
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import NearbyBusContract
import Testing
import TestSupport

/// The daemon exports exactly what `NearbyBusContract` says: its live
/// introspection, object by object, names every interface, method,
/// property and signal of the contract with the contract's signatures and
/// access, and nothing else of nearbyd's.
@Suite struct BusContractTests {
    /// One interface as introspection describes it, in the contract's terms.
    static func interfaces(in xml: String) throws -> [String: NearbyBusContract.Interface] {
        let document = try XMLDocument(xmlString: xml)
        var found: [String: NearbyBusContract.Interface] = [:]
        for element in try document.nodes(forXPath: "/node/interface") {
            guard let interface = element as? XMLElement, let name = interface.attribute(forName: "name")?.stringValue else { continue }
            func arguments(_ node: XMLElement, _ direction: String?) -> String {
                node.elements(forName: "arg").filter { direction == nil || ($0.attribute(forName: "direction")?.stringValue ?? "in") == direction }
                    .compactMap { $0.attribute(forName: "type")?.stringValue }.joined()
            }
            let methods = interface.elements(forName: "method").map {
                NearbyBusContract.Method($0.attribute(forName: "name")?.stringValue ?? "", in: arguments($0, "in"), out: arguments($0, "out"))
            }
            let properties = interface.elements(forName: "property").map { property in
                let writable = property.attribute(forName: "access")?.stringValue == "readwrite"
                return NearbyBusContract.Property(property.attribute(forName: "name")?.stringValue ?? "",
                                                  property.attribute(forName: "type")?.stringValue ?? "", writable ? .readWrite : .read)
            }
            let signals = interface.elements(forName: "signal").map {
                NearbyBusContract.Signal($0.attribute(forName: "name")?.stringValue ?? "", arguments($0, nil))
            }
            found[name] = NearbyBusContract.Interface(name, methods: methods, properties: properties, signals: signals)
        }
        return found
    }

    /// The contract's interface as introspection can show it: sd-bus tells
    /// writable from read-only, not who may write (the bus policy does).
    static func introspectable(_ interface: NearbyBusContract.Interface) -> NearbyBusContract.Interface {
        NearbyBusContract.Interface(interface.name, methods: interface.methods, properties: interface.properties.map {
            NearbyBusContract.Property($0.name, $0.type, $0.access == .read ? .read : .readWrite)
        }, signals: interface.signals)
    }

    @Test @BusActor func everyObjectExportsWhatTheContractSays() async throws {
        try await withCluster { cluster in
            let device = try await cluster.addDevice("A", at: (0, 0))
            let client = try RawClient(device.busAddress)
            let manager = try await client.createManager("key")
            let publication = try await client.publish(manager, [1], "chat")
            let subscription = try await client.subscribe(manager, [:])
            let objects: [(ObjectPath, [NearbyBusContract.Interface])] = [
                (ObjectPath(stringLiteral: NearbyBusContract.rootPath), [NearbyBusContract.nearby]),
                (manager, [NearbyBusContract.manager, NearbyBusContract.upstream]),
                (publication, [NearbyBusContract.publication]),
                (subscription, [NearbyBusContract.subscription]),
            ]
            for (path, expected) in objects {
                let xml = try await client.connection.call(destination: NearbyBusContract.busName, path: path,
                                                           interface: "org.freedesktop.DBus.Introspectable", member: "Introspect") {
                    reader throws(DBusError) in try reader.read(String.self)
                }
                let live = try Self.interfaces(in: xml)
                let nearbyds = live.keys.filter { $0.hasPrefix("org.nearbyd.") }.sorted()
                #expect(nearbyds == expected.map(\.name).sorted(), "\(path)")
                for interface in expected {
                    #expect(live[interface.name] == Self.introspectable(interface), "\(path) \(interface.name)")
                }
                for standard in NearbyBusContract.standardInterfaces {
                    #expect(live[standard] != nil, "\(path) answers \(standard)")
                }
            }
        }
    }
}
