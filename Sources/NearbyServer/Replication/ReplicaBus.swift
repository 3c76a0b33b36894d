/// A broadcast among the server processes that share one database: each
/// message one of them publishes reaches every one listening, itself
/// included, in one order for all. ``PostgresReplicaBus`` is PostgreSQL's
/// LISTEN/NOTIFY; a server alone on SQLite has none.
protocol ReplicaBus: Sendable {
    /// The longest message that costs no more to send than a short one
    /// (PostgreSQL: a NOTIFY payload; longer ones go through a table):
    /// what publishers pack their messages into.
    var packedBytes: Int { get }

    /// Sends `message` to every replica listening. Throws when it could not
    /// be sent; then no replica receives it.
    func publish(_ message: String) async throws

    /// Listens until cancelled, handing `deliver` what happens, one at a time
    /// and in order: ``ReplicaDelivery/joined`` each time the bus
    /// (re)connects, then the messages published from then on. Reconnects by
    /// itself after a failure, or when `deliver` throws, having handed
    /// ``ReplicaDelivery/left`` first.
    func listen(_ deliver: @escaping @Sendable (ReplicaDelivery) async throws -> Void) async
}

/// What a ``ReplicaBus`` hands its listener.
enum ReplicaDelivery: Sendable, Equatable {
    /// The bus is listening, from now on. Messages published while it was not
    /// are lost to it: the listener reloads from storage what they may have said.
    case joined
    /// A message, this replica's own or another's.
    case message(String)
    /// The bus stopped listening: until it joins again, what is published is lost to it.
    case left
}
