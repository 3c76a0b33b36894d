import DBus

/// Work of the bus actor that waits (for the disk) and must still happen one
/// piece at a time, in the order asked for: each job starts when the one
/// before it has finished, and while a job waits the bus thread serves
/// everyone else.
@BusActor
final class SerialJobs {
    typealias Job = @BusActor @Sendable () async -> Void

    private let sink: AsyncStream<Job>.Continuation
    private let runner: Task<Void, Never>

    init() {
        let (jobs, sink) = AsyncStream.makeStream(of: Job.self)
        self.sink = sink
        runner = Task { @BusActor in
            for await job in jobs { await job() }
        }
    }

    /// Runs `job` after every job added before it.
    func add(_ job: @escaping Job) {
        sink.yield(job)
    }

    /// Runs what was added so far, then stops taking jobs.
    func finish() async {
        sink.finish()
        await runner.value
    }
}
