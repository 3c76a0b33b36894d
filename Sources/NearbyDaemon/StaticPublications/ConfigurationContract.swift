import ConfigFile
import DBus
import Foundation
import NearbyBusContract
import NearbyCore

/// What nearbyd promises about any file it reads its settings from: checked
/// on every input by the config-fuzz harness (Sources/ConfigFuzz), which
/// reaches it through this SPI.
///
/// A file is taken, and what was taken is within every rule (a configuration
/// passes ``DaemonConfiguration/validate()``; a static publication keeps
/// CreateManager's and Publish's rules, with no TTL), or refused with an error
/// that names the file, never a trap.
@_spi(Testing) public enum ConfigurationContract {
    /// Reads the file at `path` as nearbyd's configuration.
    public static func checkConfiguration(path: String) {
        do {
            let configuration = try DaemonConfiguration.load(path: path, required: true)
            do {
                try configuration.validate()
            } catch {
                expect(false, "a configuration taken that its own check refuses: \(error)", path)
            }
        } catch {
            expect(error.message.hasPrefix(path), "an error that does not name the file: \(error)", path)
        }
    }

    /// Reads the file at `path` as a static publication (a `*.toml` of
    /// `[publications] directory`), with `enabled` the daemon's mediums.
    public static func checkStaticPublication(path: String, enabled: Set<Medium>) {
        let publication: StaticPublication
        do {
            publication = try StaticPublicationFile.load(path: path, enabled: enabled)
        } catch {
            expect(error.message.hasPrefix(path), "an error that does not name the file: \(error)", path)
            return
        }
        let key = NearbyBusContract.CreateManagerOption.appId
        expect((try? ManagerRequest(apiKey: publication.apiKey,
                                    options: Options([key.name: Variant(.string(publication.appID))], allowed: Options.allowed([key]),
                                                     context: "app-id"))) != nil,
               "an api-key or app-id CreateManager refuses", path)
        expect((try? MessageRules.checkContent(publication.message.content)) != nil
               && (try? MessageRules.checkType(publication.message.type)) != nil
               && (try? MessageRules.checkNamespace(publication.message.namespace)) != nil,
               "a message Publish refuses", path)
        expect(publication.strategy.ttlSeconds == 0 && !publication.strategy.mediums.isEmpty
               && publication.strategy.mediums.isSubset(of: enabled), "the strategy \(publication.strategy)", path)
    }

    private static func expect(_ condition: Bool, _ promise: @autoclosure () -> String, _ path: String) {
        if !condition {
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? "(not UTF-8)"
            fatalError("nearbyd: \(promise()), for the file \(String(text.prefix(512)).debugDescription)")
        }
    }
}
