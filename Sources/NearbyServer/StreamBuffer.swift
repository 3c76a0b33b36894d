import Foundation
import ServerAPI
import Synchronization

/// Bytes of events a stream holds for its connection: the matcher adds what
/// it queues, the writer takes away what it has taken. The matcher closes a
/// stream whose device stops reading before it holds too much for it.
final class StreamBacklog: Sendable {
    private let bytes = Atomic<Int>(0)

    var waiting: Int { bytes.load(ordering: .relaxed) }

    func add(_ count: Int) { _ = bytes.add(count, ordering: .relaxed) }

    func remove(_ count: Int) { _ = bytes.subtract(count, ordering: .relaxed) }
}

/// A stream's outputs as its writer takes them, in order; taking an event
/// frees its bytes in the stream's backlog.
struct StreamOutputs: AsyncSequence, Sendable {
    typealias Element = StreamOutput
    typealias Failure = Never

    /// An output as the matcher queues it, with the bytes it added to the backlog.
    struct Queued: Sendable {
        let output: StreamOutput
        let bytes: Int
    }

    let base: AsyncStream<Queued>
    let backlog: StreamBacklog

    func makeAsyncIterator() -> Iterator { Iterator(base: base.makeAsyncIterator(), backlog: backlog) }

    struct Iterator: AsyncIteratorProtocol {
        typealias Element = StreamOutput
        typealias Failure = Never

        var base: AsyncStream<Queued>.Iterator
        let backlog: StreamBacklog

        mutating func next() async -> StreamOutput? {
            guard let queued = await base.next() else { return nil }
            backlog.remove(queued.bytes)
            return queued.output
        }
    }
}

extension StreamEvent {
    /// About what the event holds in memory while it waits: its content and
    /// strings, and a little for the rest.
    var bufferedBytes: Int {
        switch self {
        case .found(let match): match.bufferedBytes
        case .lost(let subscription, let source): 64 + subscription.utf8.count + source.utf8.count
        case .snapshot(let matches, _): matches.reduce(64) { $0 + $1.bufferedBytes }
        }
    }
}

extension Match {
    var bufferedBytes: Int {
        64 + content.count + subscription.utf8.count + source.utf8.count + namespace.utf8.count + type.utf8.count
    }
}
