import ArgumentParser
import Foundation
import NearbyServer

struct ReplicasCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replicas",
        abstract: "List the replicas serving a PostgreSQL database and the partitions each owns.",
        discussion: """
            Replicas sharing a PostgreSQL database divide the devices among themselves: each \
            device belongs to one of 256 partitions (by its id), and each partition to one live \
            replica at a time, by a lease in the database that the replica renews every third of \
            [replication] lease-seconds. A replica that stops gives its partitions up at once; \
            one that dies leaves them to the others when its leases run out.

            One line per live replica: its id, the URL devices reach it at ([replication] \
            advertised-url) and how many partitions it owns; then how many partitions nobody owns \
            now (a replica died and its leases have not yet run out, or none is running).

            Output:
              ID URL N partitions
              unowned: N
            or with --json: {"replicas":[{"id","url","partitions"}],"unowned":N}

            A server on SQLite runs alone and owns every partition: it keeps no leases, and this \
            command says so (exit status 0).
            """
    )

    @OptionGroup var storage: StorageOptions

    @Flag(help: "Print JSON instead of text.")
    var json = false

    func run() async throws {
        guard let postgres = try await openStorage(storage) as? PostgresStorage else {
            print("one server on SQLite owns every partition: no replicas")
            return
        }
        let (replicas, unowned) = try await postgres.replicaStatus()
        await postgres.close()
        if json {
            struct Output: Encodable { var replicas: [ReplicaStatus]; var unowned: Int }
            try printJSON(Output(replicas: replicas, unowned: unowned))
        } else {
            for replica in replicas { print("\(replica.id) \(replica.url) \(replica.partitions) partitions") }
            print("unowned: \(unowned)")
        }
    }
}
