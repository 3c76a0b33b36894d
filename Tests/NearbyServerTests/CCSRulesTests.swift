import ServerAPI
import Testing

/// CCS's rules for a message's data and ids, which nearbyd (`SendMessage`)
/// and nearby-server (a device's channel, an application server's
/// downstream messages) apply alike: their limits at the edge.
struct CCSRulesTests {
    @Test func dataUpToTheLimitPassesAndOneByteMoreIsRefused() {
        #expect(CCSRules.dataProblem(["k": String(repeating: "v", count: 4095)]) == nil)
        #expect(CCSRules.dataProblem(["k": String(repeating: "v", count: 4096)])
                == "data holds 4097 bytes of keys and values; at most 4096 are allowed")
        // Bytes, not characters: "é" is two.
        #expect(CCSRules.dataBytes(["é": "é"]) == 4)
    }

    @Test(arguments: ["from", "message_type", "google", "google.x", "gcm", "gcm_x"])
    func reservedKeysAreRefusedByName(key: String) {
        #expect(CCSRules.dataProblem([key: "1", "ok": "1"])
                == "data key '\(key)' is reserved ('from', 'message_type', and keys starting with 'google' or 'gcm')")
    }

    @Test func keysThatOnlyContainAReservedWordPass() {
        #expect(CCSRules.dataProblem(["x_from": "1", "my_google": "1", "type": "1", "fromage": "1"]) == nil)
        #expect(CCSRules.dataProblem(["": "1"]) == "data has an empty key")
    }

    @Test func idsAreOneTo256BytesWithoutControlCharacters() {
        #expect(CCSRules.isID("m"))
        #expect(CCSRules.isID(String(repeating: "x", count: 256)))
        #expect(!CCSRules.isID(String(repeating: "x", count: 257)))
        #expect(!CCSRules.isID(""))
        #expect(!CCSRules.isID("a\u{0}b"))
        #expect(!CCSRules.isID("a\nb"))
    }
}
