import DequeModule
import Foundation
import Logging
import XMPP

/// The XMPP face of the connection server: logs application servers in with
/// their project's server key and carries `<gcm>` payloads between their
/// sessions and the ``ConnectionHub``.
struct CCSService: XMPPService {
    let hub: ConnectionHub
    let storage: any ServerStorage
    let domain: String
    let logger: Logger

    /// The project a SASL user name names: `PROJECT@DOMAIN` as FCM's
    /// documentation writes it, or `PROJECT` as XMPP clients send the local
    /// part of their JID.
    func project(ofUser username: String) -> String? {
        let parts = username.split(separator: "@", omittingEmptySubsequences: false)
        switch parts.count {
        case 1: return parts[0].isEmpty ? nil : String(parts[0])
        case 2: return parts[1] == domain && !parts[0].isEmpty ? String(parts[0]) : nil
        default: return nil
        }
    }

    func authenticate(username: String, password: String) async -> Bool {
        guard let project = project(ofUser: username) else { return false }
        do {
            return try await storage.isServerKey(Credentials.hash(password), of: project)
        } catch {
            logger.error("cannot check a server key: \(error)")
            return false
        }
    }

    func serve(_ session: XMPPSession) async {
        guard let project = project(ofUser: session.username) else { return }
        let (id, output) = await hub.openSession(project: project)
        logger.info("application server connected", metadata: ["project": "\(project)", "jid": "\(session.jid)"])
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await payloads in output {
                    guard (try? await session.send(contentsOf: payloads.map(Self.message))) != nil else { return }
                }
            }
            group.addTask { await answer(session, id) }
            // Either the stream ended or the hub let the session go.
            await group.next()
            group.cancelAll()
        }
        await hub.closeSession(id)
        logger.info("application server disconnected", metadata: ["project": "\(project)", "jid": "\(session.jid)"])
    }

    /// Reads the session's stanzas and answers each, in order, once what it
    /// asked for has committed. The next stanza is read meanwhile (acks
    /// then commit together), up to the hub's window of stanzas unanswered:
    /// beyond, the session waits, and TCP holds its application server back.
    private func answer(_ session: XMPPSession, _ id: UInt64) async {
        let (answers, answering) = AsyncStream.makeStream(of: Task<String?, Never>.self)
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await answer in answers {
                    if let text = await answer.value { try? await session.send(Self.message(text)) }
                }
            }
            var unanswered = Deque<Task<String?, Never>>()
            for await stanza in session.stanzas {
                let answer: Task<String?, Never>
                if let gcm = stanza.child(named: "gcm", namespace: CCSPayload.namespace) {
                    answer = await hub.take(gcm.text, from: id)
                } else {
                    let nack = CCSPayload.nack(.init(code: .invalidJSON,
                                                     description: "the message has no <gcm xmlns='\(CCSPayload.namespace)'> payload",
                                                     messageId: stanza["id"]))
                    answer = Task { nack }
                }
                answering.yield(answer)
                unanswered.append(answer)
                if unanswered.count >= hub.sessionWindow { _ = await unanswered.removeFirst().value }
            }
            // The stream ended: what was taken is answered, as far as the connection lets it.
            answering.finish()
        }
    }

    /// `<message id=""><gcm xmlns="google:mobile:data">JSON</gcm></message>`, as CCS writes it.
    static func message(_ payload: String) -> XMLElement {
        XMLElement("message", attributes: ["id": ""], elements: [XMLElement("gcm", namespace: CCSPayload.namespace, text: payload)])
    }
}
