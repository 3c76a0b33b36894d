extension Interface {
    /// The input signature `member` declares (what sd-bus lets through to its
    /// handler), or nil when the interface has no such method.
    public func inputSignature(of member: String) -> Signature? {
        methods.first { $0.name == member }.map { Signature(trusted: $0.inputs.map(\.signature.rawValue).joined()) }
    }
}
