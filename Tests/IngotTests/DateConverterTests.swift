import Testing

@testable import Ingot

/// Dates are stored in UTC, fractions kept, whatever the machine's locale or time zone.
struct DateConverterTests {
    private func convert(_ text: String, _ format: DateFormat) -> String? {
        var converter = DateConverter()
        return converter.convert(ArraySlice(text.utf8), format: format)
    }

    @Test func iso8601WithOffsetsAndFractions() {
        #expect(convert("2026-01-14T09:09:02Z", .iso8601(timeZone: "UTC")) == "2026-01-14T09:09:02.000000Z")
        #expect(convert("2026-01-14T10:09:02.250+01:00", .iso8601(timeZone: "UTC")) == "2026-01-14T09:09:02.250000Z")
        #expect(convert("2026-01-01T00:30:00-0130", .iso8601(timeZone: "UTC")) == "2026-01-01T02:00:00.000000Z")
        #expect(convert("2026-03-01T00:00:00+01:00", .iso8601(timeZone: "UTC")) == "2026-02-28T23:00:00.000000Z")
        #expect(convert("2026-01-14", .iso8601(timeZone: "UTC")) == "2026-01-14")
    }

    @Test func noOffsetMeansTheAttributesTimeZone() {
        // Madrid is UTC+1 in January and UTC+2 in July.
        #expect(convert("2026-01-14T10:00:00", .iso8601(timeZone: "Europe/Madrid")) == "2026-01-14T09:00:00.000000Z")
        #expect(convert("2026-07-14T10:00:00", .iso8601(timeZone: "Europe/Madrid")) == "2026-07-14T08:00:00.000000Z")
    }

    /// A local time the zone's clocks skip (spring) names no instant, and one they pass twice
    /// (autumn) names two: both are refused as not a date, saying why — no instant is guessed.
    /// The times either side of each change convert.
    @Test(arguments: [
        ("Europe/Berlin", "2026-03-29T02:30:00", String?.none, String?.some("does not exist in Europe/Berlin")),
        ("Europe/Berlin", "2026-03-29T01:59:59", "2026-03-29T00:59:59.000000Z", nil),
        ("Europe/Berlin", "2026-03-29T03:00:00", "2026-03-29T01:00:00.000000Z", nil),
        ("Europe/Berlin", "2026-10-25T02:30:00", nil, "happens twice in Europe/Berlin that day (at UTC+02:00, then at UTC+01:00)"),
        ("Europe/Berlin", "2026-10-25T01:59:59", "2026-10-24T23:59:59.000000Z", nil),
        ("Europe/Berlin", "2026-10-25T03:00:00", "2026-10-25T02:00:00.000000Z", nil),
        ("America/New_York", "2026-11-01T01:30:00", nil, "happens twice in America/New_York that day (at UTC-04:00, then at UTC-05:00)"),
        ("America/New_York", "2026-03-08T02:15:00", nil, "from UTC-05:00 to UTC-04:00"),
        ("Australia/Lord_Howe", "2026-04-05T01:45:00", nil, "happens twice"),
    ])
    func aLocalTimeTheZoneSkipsOrRepeatsIsRefused(zone: String, text: String, stored: String?, problem: String?) {
        var converter = DateConverter()
        #expect(converter.convert(ArraySlice(text.utf8), format: .iso8601(timeZone: zone)) == stored)
        #expect(converter.zoneProblem?.contains(problem ?? "") ?? (problem == nil), "\(converter.zoneProblem ?? "none")")
        if problem == nil { #expect(converter.zoneProblem == nil) }
        // With its offset, the same local time names one instant.
        #expect(convert(text + "+01:00", .iso8601(timeZone: zone)) != nil)
    }

    /// A record with such a time is rejected with its coding path and the reason.
    @Test func aRecordWithAnAmbiguousLocalTimeIsRejectedSayingWhy() throws {
        let yaml = """
            version: 1
            name: local
            records: results
            root: event
            entities: {event: {identity: id, attributes: {id: integer, at: {type: date, format: iso8601, timezone: Europe/Berlin}}}}
            """
        let (summary, db) = try ingest(
            yaml, [#"{"results": [{"id": 1, "at": "2026-10-25T02:30:00"}, {"id": 2, "at": "2026-10-25T03:30:00"}]}"#])
        #expect(summary.counters.rejectedRecords == 1)
        let reasons = try rows(db, "SELECT coding_path, reason FROM _ingot_rejects")
        #expect(reasons.first?.first == "results[0].at", "\(reasons)")
        #expect(reasons.first?.last?.contains("happens twice in Europe/Berlin") == true, "\(reasons)")
        #expect(try rows(db, "SELECT at FROM event") == [["2026-10-25T02:30:00.000000Z"]])
    }

    @Test func patternsAndUnixTimes() {
        #expect(convert("14/01/2026 09:09", .pattern("dd/MM/yyyy HH:mm", timeZone: "UTC")) == "2026-01-14T09:09:00.000000Z")
        #expect(convert("2026-01-14", .pattern("yyyy-MM-dd", timeZone: "UTC")) == "2026-01-14")
        let converter = DateConverter()
        #expect(converter.convert(number: 1_768_381_742, format: .unixSeconds) == "2026-01-14T09:09:02.000000Z")
        #expect(converter.convert(number: 1_768_381_742_250, format: .unixMilliseconds) == "2026-01-14T09:09:02.250000Z")
        #expect(converter.convert(number: -1, format: .unixSeconds) == "1969-12-31T23:59:59.000000Z")
    }

    /// Unix times keep microseconds, as ISO dates keep six fraction digits: Slack's `ts`
    /// `1512085950.000216` (a message's identity) was stored as `…:30Z`, so two messages 1 µs
    /// apart collided. A plain decimal is read digit by digit; a seventh digit rounds.
    @Test func unixTimesKeepMicroseconds() {
        let converter = DateConverter()
        #expect(converter.convert(numberText: "1512085950.000216", format: .unixSeconds) == "2017-11-30T23:52:30.000216Z")
        #expect(converter.convert(numberText: "1512085950.000217", format: .unixSeconds) == "2017-11-30T23:52:30.000217Z")
        #expect(converter.convert(numberText: "1512085950.0000005", format: .unixSeconds) == "2017-11-30T23:52:30.000001Z")
        #expect(converter.convert(numberText: "1768381742250.5", format: .unixMilliseconds) == "2026-01-14T09:09:02.250500Z")
        #expect(converter.convert(numberText: "-0.5", format: .unixSeconds) == "1969-12-31T23:59:59.500000Z")
        #expect(converter.convert(numberText: "1.5e9", format: .unixSeconds) == "2017-07-14T02:40:00.000000Z")
        #expect(converter.convert(numberText: "253402300800", format: .unixSeconds) == nil, "year 10000")
        // Found by the page fuzzer: fifteen digits of seconds overflowed 64-bit microseconds (a trap).
        #expect(converter.convert(numberText: "25340202300799.9999996", format: .unixSeconds) == nil)
        #expect(converter.convert(numberText: "999999999999999", format: .unixMilliseconds) == nil)
        #expect(converter.convert(number: 1_512_085_950.000216, format: .unixSeconds) == "2017-11-30T23:52:30.000216Z")
    }

    /// Twitter's `created_at` (`EEE MMM dd HH:mm:ss Z yyyy`): English names whatever the
    /// machine's locale, a numeric offset that moves the instant to UTC.
    @Test func englishNamesAndNumericOffsets() {
        let twitter = DateFormat.pattern("EEE MMM dd HH:mm:ss Z yyyy", timeZone: "UTC")
        #expect(convert("Fri Aug 08 02:16:23 +0000 2008", twitter) == "2008-08-08T02:16:23.000000Z")
        #expect(convert("Tue Dec 31 22:30:00 -0800 2024", twitter) == "2025-01-01T06:30:00.000000Z")
        #expect(convert("fri aug 08 02:16:23 +0000 2008", twitter) == "2008-08-08T02:16:23.000000Z", "any letter case")
        #expect(convert("Fry Aug 08 02:16:23 +0000 2008", twitter) == nil)
        #expect(convert("Fri Augu 08 02:16:23 +0000 2008", twitter) == nil)
        #expect(convert("Fri Aug 08 02:16:23 +2400 2008", twitter) == nil)
        #expect(convert("Fri Feb 30 02:16:23 +0000 2008", twitter) == nil)
        #expect(DatePattern.problem(in: "EEE MMM dd HH:mm:ss Z yyyy") == nil)
        #expect(DatePattern.problem(in: "dd MMM yyyy Z")?.contains("Z needs HH") == true)
        #expect(DatePattern.problem(in: "dd MMM MM yyyy") != nil)
    }

    /// Text in single quotes is literal (Open-Meteo's `2026-12-06T01:00`), `''` a quote.
    @Test func quotedTextIsLiteral() {
        let hours = DateFormat.pattern("yyyy-MM-dd'T'HH:mm", timeZone: "UTC")
        #expect(convert("2026-12-06T01:00", hours) == "2026-12-06T01:00:00.000000Z")
        #expect(convert("2026-12-06 01:00", hours) == nil)
        #expect(convert("06 Dec '2026 at 01h", .pattern("dd MMM ''yyyy 'at' HH'h'", timeZone: "UTC")) == "2026-12-06T01:00:00.000000Z")
        #expect(DatePattern.problem(in: "yyyy-MM-dd'T") != nil, "a quote without its end")
        #expect(DatePattern.problem(in: "yyyy-MM-dd'é'") != nil, "quoted text is ASCII")
    }

    @Test func invalidDatesAreRefused() {
        #expect(convert("2026-02-30", .iso8601(timeZone: "UTC")) == nil)
        #expect(convert("2026-01-14T25:00:00Z", .iso8601(timeZone: "UTC")) == nil)
        #expect(convert("14.01.2026", .pattern("dd/MM/yyyy", timeZone: "UTC")) == nil)
        #expect(convert("yesterday", .iso8601(timeZone: "UTC")) == nil)
    }
}
