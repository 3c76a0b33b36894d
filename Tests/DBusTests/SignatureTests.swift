import DBus
import Testing

@Suite struct SignatureTests {
    @Test(arguments: ["", "y", "a{sv}", "aay", "(ii)", "a(sa{sv})", "a{oa{sa{sv}}}", "vvv", "h", "(y(n(q)))"])
    func acceptsValidSignatures(_ text: String) throws {
        #expect(try Signature(text).rawValue == text)
    }

    @Test(arguments: [
        ("a", "ends inside"), ("{sv}", "outside an array"), ("a{vs}", "basic type"), ("a{sss}", "exactly"),
        ("()", "empty struct"), ("(i", "unterminated"), ("z", "invalid type code"),
        (String(repeating: "a", count: 33) + "i", "deeper"), (String(repeating: "i", count: 256), "longer"),
    ])
    func rejectsInvalidSignatures(_ text: String, _ reason: String) {
        #expect {
            try Signature(text)
        } throws: { error in
            (error as? DBusError)?.name == "org.freedesktop.DBus.Error.InvalidArgs"
                && (error as? DBusError)?.message.contains(reason) == true
        }
    }

    @Test func splitsIntoCompleteTypes() {
        let signature: Signature = "sa{sv}(ii)v"
        #expect(signature.completeTypes.map(\.rawValue) == ["s", "a{sv}", "(ii)", "v"])
    }

    @Test func objectPathsAreValidated() {
        for good in ["/", "/org/nearbyd", "/a_1/B2"] { #expect((try? ObjectPath(good)) != nil) }
        for bad in ["", "org", "/a/", "//a", "/a-b", "/a//b"] { #expect((try? ObjectPath(bad)) == nil) }
    }

    @Test func builtContainersAreChecked() {
        #expect(throws: DBusError.self) { try DBusValue.array(element: "s", [.uint32(1)]).validate() }
        #expect(throws: DBusError.self) {
            try DBusValue.dictionary(key: "s", value: "v", [DictEntry(.string("k"), .string("not a variant"))]).validate()
        }
        #expect(throws: Never.self) { try DBusValue.vardict(["a": .uint32(1)]).validate() }
    }
}
