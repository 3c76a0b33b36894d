import DBus

/// Work of the bus actor that waits (for the disk) and must still happen one
/// piece at a time, in the order asked for, within its lane: each job starts
/// when the one before it in the same lane has finished. Lanes do not wait
/// for each other, and while a job waits the bus thread serves everyone else;
/// so a job that never ends (a disk that hangs on one write) holds up its own
/// lane and nothing more.
@BusActor
final class SerialJobs<Lane: Hashable & Sendable> {
    typealias Job = @BusActor @Sendable () async -> Void

    /// The last job of each lane that has work: the next job of the lane waits
    /// for it. A lane is forgotten once its last job is done.
    private var tails: [Lane: (number: UInt64, task: Task<Void, Never>)] = [:]
    private var added: UInt64 = 0
    private var finished = false

    init() {}

    /// Runs `job` after every job added to `lane` before it.
    func add(_ lane: Lane, _ job: @escaping Job) {
        guard !finished else { return }
        added += 1
        let number = added
        let previous = tails[lane]?.task
        tails[lane] = (number, Task { [self] in
            await previous?.value
            await job()
            if tails[lane]?.number == number { tails[lane] = nil }
        })
    }

    /// Runs what was added so far, then stops taking jobs.
    func finish() async {
        finished = true
        // Each tail forgets itself when done: nothing is added once finished.
        while let tail = tails.values.first { await tail.task.value }
    }
}
