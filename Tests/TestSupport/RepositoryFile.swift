import Foundation

/// Files of the repository the tests read as shipped (the bus policy, the
/// units, the documentation), by their path from its root.
public enum RepositoryFile {
    public static func path(_ relative: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../\(relative)").standardizedFileURL.path
    }
}
