import ArgumentParser
import Foundation
import NearbyServer
import ServerAPI

struct NamespaceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "namespace",
        abstract: "List a project's namespaces and set who may read their beacon attachments.",
        discussion: """
            A project owns one namespace, named as the project. Its beacon attachments are read \
            through beaconinfo:getforobserved by the project itself, and, when the namespace is \
            public, by any project that asks for it by name (NAMESPACE/TYPE or NAMESPACE/*). \
            Namespaces are unlisted until made public.
            """,
        subcommands: [List.self, SetVisibility.self]
    )

    /// One namespace in text.
    static let lineOutput = "namespaces/NAME and UNLISTED or PUBLIC, separated by a tab"

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List a project's namespaces.",
            discussion: """
                Output: one line per namespace, \(lineOutput). With --json: an array of the API's \
                Namespace objects.

                \(exitStatuses)
                """
        )

        @OptionGroup var options: RegistryOptions

        func run() async throws {
            try printNamespaces(try await options.admin().namespaces(project: options.project), json: options.json)
        }
    }

    struct SetVisibility: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-visibility",
            abstract: "Make a namespace's attachments public or unlisted.",
            discussion: """
                Output: one line, \(lineOutput). With --json the API's Namespace object.

                \(exitStatuses)
                """
        )

        enum Visibility: String, CaseIterable, ExpressibleByArgument {
            case `public`
            case unlisted

            var serving: ServingVisibility { self == .public ? .public : .unlisted }
        }

        @Argument(help: ArgumentHelp("NAME or namespaces/NAME, a namespace of the project.", valueName: "namespace"))
        var namespace: String

        @Argument(help: ArgumentHelp("public or unlisted.", valueName: "visibility"))
        var visibility: Visibility

        @OptionGroup var options: RegistryOptions

        func run() async throws {
            let namespace = try await options.admin().setVisibility(project: options.project, namespace: namespace,
                                                                    visibility: visibility.serving)
            if options.json {
                try printJSON(namespace)
            } else {
                try printNamespaces([namespace], json: false)
            }
        }
    }
}

private func printNamespaces(_ namespaces: [BeaconNamespace], json: Bool) throws {
    if json {
        try printJSON(namespaces)
        return
    }
    for namespace in namespaces {
        print("\(namespace.namespaceName ?? "")\t\(namespace.servingVisibility.rawValue)")
    }
}
