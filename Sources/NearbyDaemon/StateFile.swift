import Foundation

/// Files in the state directory that must survive a crash whole.
enum StateFile {
    /// Writes `data` to a fresh file that is the owner's alone from its creation
    /// (secrets are never readable by others, whatever the umask or the
    /// directory), makes it durable, then renames it over `path`: a crash leaves
    /// the old file or the new one.
    static func replace(_ path: String, with data: Data) throws {
        let temporary = path + ".tmp"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        let written = data.withUnsafeBytes { bytes in write(fd, bytes.baseAddress, bytes.count) }
        let synced = fsync(fd)
        close(fd)
        guard written == data.count, synced == 0, rename(temporary, path) == 0 else {
            let code = POSIXErrorCode(rawValue: errno) ?? .EIO
            unlink(temporary)
            throw POSIXError(code)
        }
    }
}

extension StateFile {
    /// Writes state files on a thread of its own, one after another, so the
    /// bus thread never waits for the disk.
    final class Writer: Sendable {
        private let queue = DispatchQueue(label: "nearbyd-state-files")

        /// ``StateFile/replace(_:with:)`` on the writer's thread.
        func replace(_ path: String, with data: Data) async throws {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                queue.async {
                    do {
                        try StateFile.replace(path, with: data)
                        continuation.resume()
                    } catch {
                        continuation.resume(throwing: error)
                    }
                }
            }
        }
    }
}
