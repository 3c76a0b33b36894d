import Foundation

/// A Unix datagram socket standing in for one of systemd's: the notification
/// socket (what a service sends with sd_notify) or the journal's. Each
/// datagram arrives as one message.
public final class DatagramSocket: Sendable {
    public let path: String
    public let messages = Inbox<String>()
    private let descriptor: Int32

    public init(path: String) throws {
        self.path = path
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        self.descriptor = descriptor
        guard descriptor >= 0 else { throw ChildProcessError(message: "socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in path.utf8.prefix(buffer.count - 1).enumerated() { buffer[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else { throw ChildProcessError(message: "bind \(path): \(String(cString: strerror(errno)))") }
        let messages = self.messages
        // A thread of its own: recv blocks until the socket is shut down.
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = recv(descriptor, &buffer, buffer.count, 0)
                guard count > 0 else { return }
                messages.put(String(decoding: buffer[..<count], as: UTF8.self))
            }
        }
    }

    public func close() {
        shutdown(descriptor, Int32(SHUT_RDWR))
        Foundation.close(descriptor)
    }
}
