import Foundation
import ServerAPI

/// What ``CCSPayload`` promises about any text an application server may
/// send, and about the JSON it writes: checked on every input by the ccs-fuzz
/// harness (Sources/CCSFuzz), which reaches it through this SPI.
@_spi(Testing) public enum CCSPayloadContract {
    /// Reads `text` as an application server's `<gcm>` payload, and builds the
    /// server's payloads from it; traps, naming the promise, when one is broken.
    public static func check(_ text: String) {
        do {
            switch try CCSPayload.parse(text) {
            case .ack(let to, let messageId), .nack(let to, let messageId):
                expect(!to.isEmpty && !messageId.isEmpty, "an ack or nack without 'to' or 'message_id'", text)
            case .downstream(let message):
                expect(!message.to.isEmpty && !message.messageId.isEmpty, "a downstream message without 'to' or 'message_id'", text)
                let size = CCSRules.dataBytes(message.data)
                expect(size <= CCSRules.maximumDataBytes, "data of \(size) bytes taken", text)
                expect((0...CCSRules.maximumTimeToLiveSeconds).contains(message.timeToLive), "time_to_live \(message.timeToLive) taken", text)
                expect(!message.data.keys.contains { $0.isEmpty || CCSRules.isReserved($0) }, "an empty or reserved data key taken", text)
            }
        } catch {
            expect(error.code == .invalidJSON, "a refusal other than INVALID_JSON", text)
            let nack = object(CCSPayload.nack(error), text)
            expect(nack["message_type"] as? String == "nack" && nack["error"] as? String == "INVALID_JSON"
                   && nack["error_description"] as? String == error.description
                   && nack["message_id"] as? String == error.messageId ?? ""
                   && nack["from"] as? String == error.to, "the nack does not say what was refused", text)
        }
        // The server's own payloads carry any string, escaped, and read back the same.
        let upstream = object(CCSPayload.upstream(app: text, from: text, messageId: text, data: [text: text]), text)
        expect(upstream["category"] as? String == text && upstream["from"] as? String == text
               && upstream["message_id"] as? String == text && upstream["data"] as? [String: String] == [text: text],
               "an upstream message does not read back", text)
        let ack = object(CCSPayload.ack(messageId: text, from: text), text)
        expect(ack["message_id"] as? String == text && ack["from"] as? String == text, "an ack does not read back", text)
        let receipt = CCSPayload.receipt(originalMessageId: text, device: text, domain: "nearby.local", sentAtMs: 1)
        let data = object(receipt.payload, text)["data"] as? [String: String]
        expect(data?["original_message_id"] == text && data?["device_registration_id"] == text, "a receipt does not read back", text)
    }

    private static func object(_ json: String, _ input: String) -> [String: Any] {
        let object = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]
        expect(object != nil, "the server wrote JSON it cannot read: \(json)", input)
        return object ?? [:]
    }

    private static func expect(_ condition: Bool, _ promise: String, _ input: String) {
        if !condition { fatalError("CCSPayload: \(promise), for \(input.debugDescription)") }
    }
}
