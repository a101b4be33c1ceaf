/// Where a page's records sit: the one place both the record mapper and pagination ask (page
/// and offset pagination stop on a page without records). Today an array at a key path
/// (`records: results`, or `.` for a page that is the array); a page format of its own (a single
/// object, JSON Lines) is another case here, and both users get it.
struct RecordFraming: Sendable, Equatable {
    enum Shape: Sendable, Equatable {
        /// An array of records at this key path of the page's object (empty: the page itself).
        case array(at: [String])
    }

    var shape: Shape

    /// Records in an array at `path` (`[]`: the page is the array).
    static func array(at path: [String]) -> RecordFraming { RecordFraming(shape: .array(at: path)) }

    /// Why a page holds no records where the framing says, as its rejection says it.
    struct Failure: Error, Equatable {
        /// The coding path where the records should have been.
        var path: String
        var reason: String
    }

    /// Where the records sit as a coding path prefix: empty for the top level.
    var codingPath: String {
        switch shape {
        case .array(let path): path.joined(separator: ".")
        }
    }

    /// The path as the pipeline file writes it: `.` for the top level.
    var pathText: String { codingPath.isEmpty ? "." : codingPath }

    /// The records' array in `document`, or why there is none.
    func records(in document: JSONDocument) -> Result<JSONValue, Failure> {
        switch shape {
        case .array(let components):
            var value = document.root
            var path = ""
            for component in components {
                path += path.isEmpty ? component : "." + component
                guard let next = value[component] else { return .failure(Failure(path: path, reason: "the page has no '\(path)'")) }
                value = next
            }
            guard value.kind == .array else {
                return .failure(
                    Failure(
                        path: path, reason: "expected an array of records at '\(path.isEmpty ? "." : path)', got \(value.kind.rawValue)"))
            }
            return .success(value)
        }
    }
}
