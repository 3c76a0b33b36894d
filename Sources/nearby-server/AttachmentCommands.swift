import ArgumentParser
import Foundation
import NearbyServer
import ServerAPI

struct AttachmentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attachment",
        abstract: "Add, list and delete the attachments of a project's beacon.",
        discussion: """
            An attachment is up to 1024 bytes of data of a namespaced type, NAMESPACE/TYPE, that \
            devices get with the beacon from beaconinfo:getforobserved. The namespace is one the \
            project owns (today: the project's own, its name); the type is 1 to 100 characters \
            without '/' or '*'.
            """,
        subcommands: [Add.self, List.self, Delete.self]
    )

    /// One attachment in text.
    static let lineOutput = "NAME, NAMESPACE/TYPE and the data in base64, separated by tabs"

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Attach data to a beacon.",
            discussion: """
                Give the data as text (--data, stored as its UTF-8 bytes) or as base64 (--data-base64), \
                not both. The namespace is the project's own unless --namespace names another it owns.

                Output: one line, \(lineOutput), NAME being beacons/N!HEX/attachments/ID. With --json \
                the API's BeaconAttachment object.

                \(exitStatuses)
                """
        )

        @OptionGroup var target: BeaconTarget

        @Option(help: ArgumentHelp("The attachment's type, without its namespace.", valueName: "type"))
        var type: String

        @Option(help: ArgumentHelp("The namespace (default: the project's).", valueName: "namespace"))
        var namespace: String?

        @Option(help: ArgumentHelp("The data, as text.", valueName: "text"))
        var data: String?

        @Option(help: ArgumentHelp("The data, as base64.", valueName: "base64"))
        var dataBase64: String?

        func validate() throws {
            guard (data == nil) != (dataBase64 == nil) else { throw ValidationError("give --data or --data-base64, one of them") }
            if let dataBase64, Data(base64Encoded: dataBase64) == nil {
                throw ValidationError("--data-base64 '\(dataBase64)' is not base64")
            }
        }

        func run() async throws {
            let bytes = data.map { Data($0.utf8) } ?? Data(base64Encoded: dataBase64 ?? "") ?? Data()
            let options = target.options
            let attachment = try await options.admin().addAttachment(project: options.project, beacon: target.beacon,
                                                                     namespace: namespace, type: type, data: bytes)
            try printAttachments([attachment], json: options.json, single: true)
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List a beacon's attachments.",
            discussion: """
                --type takes NAMESPACE/TYPE, NAMESPACE/* or */* (every namespace the project owns); \
                without it, every type of the project's own namespace.

                Output: one line per attachment, in the order created, \(lineOutput); 'no \
                attachments' when there are none. With --json: an array of the API's \
                BeaconAttachment objects.

                \(exitStatuses)
                """
        )

        @OptionGroup var target: BeaconTarget

        @Option(help: ArgumentHelp("Only attachments of this namespaced type.", valueName: "namespace/type"))
        var type: String?

        func run() async throws {
            let options = target.options
            let attachments = try await options.admin().attachments(project: options.project, beacon: target.beacon,
                                                                    namespacedType: type)
            try printAttachments(attachments, json: options.json, single: false)
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete one attachment of a beacon.",
            discussion: """
                Give the attachment's whole name, as 'add' and 'list' print it \
                (beacons/N!HEX/attachments/ID), or the beacon and the ID, the name's last part. \
                Output: 'deleted attachment ID'.

                \(exitStatuses)
                """
        )

        @OptionGroup var target: BeaconTarget

        @Argument(help: ArgumentHelp("The attachment's id, when BEACON names the beacon only.", valueName: "id"))
        var id: String?

        /// The beacon and the attachment's id, from one name or two arguments.
        private var parts: (beacon: String, id: String) {
            get throws {
                if let id { return (target.beacon, id) }
                let marker = "/attachments/"
                guard let range = target.beacon.range(of: marker), !target.beacon[range.upperBound...].isEmpty else {
                    throw ValidationError("give the attachment's name (beacons/N!HEX/attachments/ID), or BEACON and ID")
                }
                return (String(target.beacon[..<range.lowerBound]), String(target.beacon[range.upperBound...]))
            }
        }

        func validate() throws {
            _ = try parts
        }

        func run() async throws {
            let (beacon, id) = try parts
            try await target.options.admin().deleteAttachment(project: target.options.project, beacon: beacon, id: id)
            print("deleted attachment \(id)")
        }
    }
}

private func printAttachments(_ attachments: [BeaconAttachment], json: Bool, single: Bool) throws {
    if json {
        try single ? printJSON(attachments[0]) : printJSON(attachments)
    } else if attachments.isEmpty {
        print("no attachments")
    } else {
        for attachment in attachments {
            print("\(attachment.attachmentName ?? "")\t\(attachment.namespacedType)\t\(attachment.data.base64EncodedString())")
        }
    }
}
