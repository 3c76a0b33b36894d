import NearbyCore

/// Helpers over NearbyCore's seeded generator, so the fuzz test sees the same
/// inputs on every run and machine. They avoid the standard library's generic
/// `random(in:using:)`, which is slow when the test target is built without
/// optimisation.
extension SplitMix64 {
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
