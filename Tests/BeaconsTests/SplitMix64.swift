/// SplitMix64 (Steele, Lea & Flood): a tiny, fast, seedable generator, so
/// the fuzz test sees the same inputs on every run and machine.
///
/// The helpers avoid the standard library's generic `random(in:using:)`,
/// which is slow when the test target is built without optimisation.
struct SplitMix64 {
    private(set) var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A value in `0..<bound` (modulo bias is irrelevant here).
    mutating func below(_ bound: Int) -> Int {
        Int(truncatingIfNeeded: next() % UInt64(bound))
    }

    /// A value in `range`.
    mutating func inRange(_ range: ClosedRange<Int>) -> Int {
        range.lowerBound + below(range.count)
    }

    mutating func byte() -> UInt8 {
        UInt8(truncatingIfNeeded: next())
    }

    mutating func bytes(_ count: Int) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(count)
        for _ in 0..<count { out.append(byte()) }
        return out
    }

    mutating func chance(_ oneIn: Int) -> Bool {
        below(oneIn) == 0
    }

    mutating func pick<T>(_ items: [T]) -> T {
        items[below(items.count)]
    }
}
