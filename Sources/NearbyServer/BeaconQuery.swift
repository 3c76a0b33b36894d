import NearbyCore
import ServerAPI

/// The `q` of `GET /v1beta1/beacons`: terms `FIELD:VALUE` separated by
/// spaces, all of which must hold. A value with spaces is quoted
/// (`description:"room 3"`). Fields and values are read without regard to case.
/// At most `maxTerms` terms: each is an expression of the listing's query.
enum BeaconQuery {
    static func filter(_ query: String, maxTerms: Int) throws(APIError) -> BeaconFilter {
        var filter = BeaconFilter()
        let terms = try terms(query)
        guard terms.count <= maxTerms else {
            throw APIError(.invalidArgument, "q has \(terms.count) terms; at most \(maxTerms) are taken ([limits] max-query-terms)")
        }
        for term in terms {
            guard let colon = term.firstIndex(of: ":") else {
                throw APIError(.invalidArgument, "q term '\(term)' is not FIELD:VALUE (fields: status, type, description)")
            }
            let field = term[..<colon].lowercased()
            let value = unquoted(term[term.index(after: colon)...])
            switch field {
            case "status":
                guard let status = BeaconStatus(rawValue: value.uppercased()) else {
                    throw APIError(.invalidArgument, "q term '\(term)': status is one of active, inactive, decommissioned")
                }
                filter.statuses.append(status)
            case "type":
                guard let type = AdvertisedIdType(rawValue: value.uppercased()) else {
                    throw APIError(.invalidArgument, "q term '\(term)': type is one of eddystone, eddystone_eid, ibeacon, altbeacon")
                }
                filter.types.append(type)
            case "description":
                // No stored description holds what the rule refuses, and PostgreSQL's text cannot hold a NUL.
                if let problem = TextRule.problem(value, field: "q term: a description", .freeText) {
                    throw APIError(.invalidArgument, problem)
                }
                filter.descriptions.append(value)
            default:
                throw APIError(.invalidArgument, "q term '\(term)' has the unknown field '\(field)' (fields: status, type, description)")
            }
        }
        return filter
    }

    /// The terms, split at spaces outside double quotes.
    private static func terms(_ query: String) throws(APIError) -> [Substring] {
        var terms: [Substring] = []
        var start: String.Index?
        var quoted = false
        for index in query.indices {
            let character = query[index]
            if character == "\"" { quoted.toggle() }
            if character == " " && !quoted {
                if let begun = start { terms.append(query[begun..<index]) }
                start = nil
            } else if start == nil {
                start = index
            }
        }
        guard !quoted else { throw APIError(.invalidArgument, "q '\(query)' has an unclosed '\"'") }
        if let begun = start { terms.append(query[begun...]) }
        return terms
    }

    private static func unquoted(_ value: Substring) -> String {
        guard value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") else { return String(value) }
        return String(value.dropFirst().dropLast())
    }
}
