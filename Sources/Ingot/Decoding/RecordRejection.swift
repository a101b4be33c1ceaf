import Foundation

/// Why a record or a page was rejected, as a code: what the counts per reason are keyed by.
package enum RejectReason: String, Sendable, CaseIterable {
    /// The record has no identity, or a null one (or a reference to null).
    case missingIdentity = "missing_identity"
    /// A value of another JSON type than the attribute's.
    case wrongType = "wrong_type"
    /// A number or a date outside what is stored.
    case outOfRange = "out_of_range"
    /// A string that is not a date in the attribute's format.
    case notADate = "not_a_date"
    /// An object, array or reference of the wrong shape.
    case wrongShape = "wrong_shape"
    /// A bare reference to a row that does not exist, with `missing: reject`.
    case missingReference = "missing_reference"
    /// A record of an identity no row has, with `write: {mode: update_only, unknown: reject}`.
    case unknownIdentity = "unknown_identity"
    /// A page that is not JSON.
    case notJSON = "not_json"
    /// A page with no array of records at `records`.
    case noRecords = "no_records"
    /// A page over `max_page_bytes`.
    case pageTooLarge = "page_too_large"
    /// A page its source could not read (a damaged unit of a joined run).
    case unreadable
    /// A page whose text values pass 4 GiB.
    case tooLarge = "too_large"
    /// A value no database stores alike: text holding `\u0000` or a lone surrogate escape, or a
    /// value the database itself refused (its message is the reason).
    case unstorable
    /// The entity's Swift hook (``IngotEntity/prepare``) threw; its error is the reason.
    case prepareFailed = "prepare_failed"
    /// A record of a child entity whose identity another child of the same parent holds (a
    /// vehicle numbered as a stored starship): one identity, one kind (OneKindRule).
    case wrongKind = "wrong_kind"
}

/// A record (or a whole page) that could not be saved, and why. A value, not a thrown error:
/// rejections are counted and stored in `_ingot_rejects`; the run goes on.
public struct RecordRejection: Sendable, Equatable, CustomStringConvertible {
    /// The entity the record was mapped as.
    public var entity: String
    /// Where in the page the problem is, like `results[3].dogs[1].id`.
    public var codingPath: String
    /// Why, in words (the database's message for a value it refused).
    public var reason: String
    /// The file, URL or archive entry the page came from.
    public var source: String
    /// The record's index in the page's records; `nil` when the whole page was rejected.
    public var recordIndex: Int?
    /// The record's JSON text (the page's text for a rejected page), at most ``rawLimit`` bytes of
    /// it: the archive entry holds the whole.
    public var raw: String
    /// The byte length of the whole text ``raw`` is a prefix of.
    public var rawLength: Int
    /// Why, as a code to count by.
    package var code: RejectReason
    /// The archive entry the page is stored in, when it was archived.
    package var archive: ArchiveLocation?
    /// In a shared run (`--join`): the unit of the page, until the run's archive — written by the
    /// job that finishes the run — names the entry (``archive``).
    package var unit: Int?

    /// Why, as a code to count by (`_ingot_runs.reject_counts`, the summary's `rejects.<code>`):
    /// `missing_identity`, `wrong_type`, `out_of_range`, `not_a_date`, `wrong_shape`,
    /// `missing_reference`, `not_json`, `no_records`, `page_too_large`, `unreadable`,
    /// `too_large`, `unstorable`.
    public var reasonCode: String { code.rawValue }
    /// The archive file holding the page, when it was archived.
    public var archivePath: String? { archive?.path }
    /// The page's entry in that archive.
    public var archiveEntry: Int? { archive?.entry }

    /// A rejection as a database stored it (`_ingot_rejects`); a code it does not know reads as
    /// `unreadable`.
    package static func stored(
        entity: String, codingPath: String, reason: String, source: String, recordIndex: Int?, raw: String, rawLength: Int?,
        code: String?, archive: String?, entry: Int?
    ) -> RecordRejection {
        RecordRejection(
            entity: entity, codingPath: codingPath, reason: reason, source: source, recordIndex: recordIndex, raw: raw,
            rawLength: rawLength, archive: archive.flatMap { path in entry.map { ArchiveLocation(path: path, entry: $0) } },
            code: code.flatMap(RejectReason.init(rawValue:)) ?? .unreadable)
    }

    /// The most of a rejected text stored with its rejection: bad input must not grow the
    /// database by its own size.
    public static let rawLimit = 16 << 10

    package init(
        entity: String, codingPath: String, reason: String, source: String, recordIndex: Int?, raw: String,
        rawLength: Int? = nil, archive: ArchiveLocation? = nil, code: RejectReason
    ) {
        self.code = code
        self.entity = RecordRejection.storable(entity)
        self.codingPath = RecordRejection.storable(codingPath)
        self.reason = RecordRejection.storable(reason)
        self.source = RecordRejection.storable(source)
        self.recordIndex = recordIndex
        let utf8 = raw.utf8
        self.rawLength = rawLength ?? utf8.count
        self.raw = RecordRejection.storable(
            utf8.count <= RecordRejection.rawLimit ? raw : RecordRejection.prefix(Array(utf8.prefix(RecordRejection.rawLimit))[...]))
        self.archive = archive
    }

    /// `text` with each NUL character written as the six characters `\u0000`: a rejection is
    /// stored in every backend (PostgreSQL's text cannot hold U+0000), whatever bytes the page
    /// held; the archive keeps the exact bytes.
    static func storable(_ text: String) -> String {
        guard text.utf8.contains(0) else { return text }
        return text.replacingOccurrences(of: "\u{0}", with: "\\u0000")
    }

    /// At most ``rawLimit`` bytes of `bytes` as text, never ending inside a UTF-8 sequence.
    static func prefix(_ bytes: ArraySlice<UInt8>) -> String {
        var cut = bytes.prefix(rawLimit)
        if cut.count < bytes.count {
            while let last = cut.last, last & 0xC0 == 0x80 { cut = cut.dropLast() }
            if let last = cut.last, last & 0x80 != 0 { cut = cut.dropLast() }  // the lead byte of the cut sequence
        }
        return String(decoding: cut, as: UTF8.self)
    }

    /// As shown in messages.
    public var description: String {
        "\(entity) at \(codingPath): \(reason) (\(source)\(recordIndex.map { ", record \($0)" } ?? ""))"
    }
}
