/// The keys a program's refusal of an unknown key lists (ConfigFile's
/// "unknown key 'x' in [s]; known: a, b, c"): what it reads in that section,
/// for the tests that hold the configuration documents to the programs.
public func knownKeys(in message: String) -> Set<String> {
    guard let known = message.range(of: "known: ") else { return [] }
    return Set(message[known.upperBound...].split(separator: ", ").map(String.init))
}
