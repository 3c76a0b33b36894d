/// Runs one device's changes one after another, so that the database and the
/// matcher see them in the same order (two overlapping PUTs of one
/// publication must not end stored as one and matched as the other).
/// Different devices do not wait for each other.
actor DeviceSerializer {
    private var waiting: [String: [CheckedContinuation<Void, Never>]] = [:]
    private var busy: Set<String> = []

    func run<T: Sendable>(_ device: String, _ body: @Sendable () async throws -> T) async throws -> T {
        await acquire(device)
        do {
            let result = try await body()
            release(device)
            return result
        } catch {
            release(device)
            throw error
        }
    }

    private func acquire(_ device: String) async {
        guard busy.contains(device) else {
            busy.insert(device)
            return
        }
        await withCheckedContinuation { waiting[device, default: []].append($0) }
    }

    /// Hands the device to the next waiter, if any, without letting it go idle in between.
    private func release(_ device: String) {
        if var queue = waiting[device], !queue.isEmpty {
            let next = queue.removeFirst()
            waiting[device] = queue.isEmpty ? nil : queue
            next.resume()
        } else {
            busy.remove(device)
        }
    }
}
