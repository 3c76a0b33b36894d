import Foundation

/// Who else has an SQLite database open, read off SQLite's own locks. A
/// database in WAL mode (as ``SQLiteStorage`` keeps it) is shared through its
/// `-shm` file, and every connection to it holds a read lock on that file's
/// "DMS" byte, 128, as long as it is open (SQLite's file format document,
/// "The WAL-Index File Format"): so a running server holds it even while idle.
enum SQLiteFileUsers {
    /// The byte of the -shm file every connection holds a read lock on.
    private static let dmsByte: off_t = 128

    /// A process other than this one that has the database at `path` open,
    /// if any. POSIX locks belong to a process, and closing any descriptor of
    /// a file drops all of its process's locks on it: call this before this
    /// process opens the database itself.
    static func otherProcess(usingDatabaseAt path: String) -> pid_t? {
        let fd = open("\(path)-shm", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }  // No -shm file: no connection in WAL mode.
        defer { close(fd) }
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = dmsByte
        lock.l_len = 1
        // F_GETLK asks whether the lock could be taken, without taking it;
        // it says who holds a conflicting one.
        guard fcntl(fd, F_GETLK, &lock) == 0, lock.l_type != Int16(F_UNLCK) else { return nil }
        return lock.l_pid
    }
}
