import Foundation

/// Converts source dates to the stored form: `2026-01-14T09:09:02.000000Z` (UTC), or `2026-01-14`
/// for a date without a time.
///
/// The stored form is canonical and of fixed width, so that one instant is one text in every
/// backend (a date identity is compared as its instant) and text order is time order (`ORDER BY`,
/// `MIN`, `BETWEEN` on the text are right): the fraction always has six digits (microseconds,
/// PostgreSQL's precision; further digits are cut off), so `…:00Z`, `…:00.000Z` and
/// `…:00.0000001Z` are all `…:00.000000Z`. Years run from 0001 to 9999, the range both SQLite's
/// date functions and PostgreSQL accept (PostgreSQL has no year 0). Databases written with the
/// earlier, shortest form are rewritten when they are opened (``SQLiteStore``'s date migration).
///
/// Pure arithmetic on the proleptic Gregorian calendar; Foundation is used only to find the
/// offset of a named time zone. Never depends on the machine's locale or time zone.
struct DateConverter {
    private var zones: [String: TimeZone] = [:]
    /// Why the last conversion in a named zone found no instant, when the local time was read
    /// but names none or two (docs/pipelines.md, "Dates in a local zone"); `nil` otherwise.
    private(set) var zoneProblem: String?
    private var patterns: [String: DatePattern] = [:]
    /// The pattern used last: a run converts the same few patterns over and over.
    private var lastPattern: (text: String, compiled: DatePattern)?

    /// A civil date-time read from the source. `fraction` points into the bytes it was read
    /// from: use a `Civil` only while they live.
    struct Civil {
        var year = 1970, month = 1, day = 1, hour = 0, minute = 0, second = 0
        var fraction = UnsafeBufferPointer<UInt8>(start: nil, count: 0)
        var offsetSeconds: Int?
        var hasTime = true
    }

    mutating func convert(_ bytes: ArraySlice<UInt8>, format: DateFormat) -> String? {
        bytes.withUnsafeBufferPointer { convert($0, format: format) }
    }

    mutating func convert(_ bytes: UnsafeBufferPointer<UInt8>, format: DateFormat) -> String? {
        zoneProblem = nil
        switch format {
        case .iso8601(let zone):
            guard let civil = DateConverter.parseISO8601(bytes) else { return nil }
            return render(civil, zone: zone)
        case .pattern(let pattern, let zone):
            let compiled: DatePattern
            if let last = lastPattern, last.text == pattern {
                compiled = last.compiled
            } else if let cached = patterns[pattern] {
                compiled = cached
                lastPattern = (pattern, cached)
            } else {
                guard let p = DatePattern(pattern) else { return nil }
                patterns[pattern] = p
                lastPattern = (pattern, p)
                compiled = p
            }
            guard let civil = DateConverter.parse(bytes, pattern: compiled) else { return nil }
            return render(civil, zone: zone)
        case .unixSeconds, .unixMilliseconds:
            return nil  // numbers: see `convert(number:)`
        }
    }

    /// The instants Ingot stores, in seconds since 1970: 0001-01-01T00:00:00Z up to (not
    /// including) 10000-01-01T00:00:00Z, the dates whose year has four digits and is not 0. A
    /// date outside is refused (a rejected record), in every format.
    static let storedSeconds: Range<Double> = -62_135_596_800..<253_402_300_800

    /// The years Ingot stores (see ``storedSeconds``).
    static let storedYears: ClosedRange<Int> = 1...9999

    /// Converts seconds (or milliseconds) since 1970 given as a number; `nil` outside
    /// ``storedSeconds`` (after rounding to the microsecond, as ISO dates keep six fraction
    /// digits).
    func convert(number: Double, format: DateFormat) -> String? {
        let scale: Double = format == .unixMilliseconds ? 1000 : 1
        guard number.isFinite else { return nil }
        let micros = (number * 1_000_000 / scale).rounded()
        // Checked after rounding: 253402300799.9999999 rounds into year 10000.
        guard DateConverter.storedSeconds.contains(micros / 1_000_000) else { return nil }
        return DateConverter.format(micros: Int64(micros))
    }

    /// Converts a number's text (a JSON number, or a string of one): exactly, digit by digit, when
    /// it is plain decimal — Slack's `ts` `1512085950.000216` keeps its microseconds, where a
    /// Double holds them only approximately — else as ``convert(number:format:)``. A seventh
    /// fraction digit rounds (half up); `nil` outside ``storedSeconds``.
    func convert(numberText text: some StringProtocol, format: DateFormat) -> String? {
        let bytes = Array(text.utf8)
        var i = 0
        let negative = bytes.first == UInt8(ascii: "-")
        if negative { i = 1 }
        var whole: Int64 = 0
        var wholeDigits = 0
        while i < bytes.count, bytes[i] >= 0x30, bytes[i] <= 0x39, wholeDigits < 15 {
            whole = whole * 10 + Int64(bytes[i] - 0x30)
            wholeDigits += 1
            i += 1
        }
        var fraction: [UInt8] = []
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            i += 1
            while i < bytes.count, bytes[i] >= 0x30, bytes[i] <= 0x39 {
                fraction.append(bytes[i] - 0x30)
                i += 1
            }
        }
        // An exponent, more digits than an instant has, or anything else: as a Double.
        guard i == bytes.count, wholeDigits > 0 else { return Double(String(text)).flatMap { convert(number: $0, format: format) } }
        // Microseconds per unit of the number, and the fraction digits that make them.
        let (perUnit, kept) = format == .unixMilliseconds ? (Int64(1000), 3) : (Int64(1_000_000), 6)
        // Fifteen digits of seconds are more microseconds than 64 bits hold: out of range, not a trap.
        let scaled = whole.multipliedReportingOverflow(by: perUnit)
        guard !scaled.overflow else { return nil }
        var micros = scaled.partialValue
        var part: Int64 = 0
        for k in 0..<kept { part = part * 10 + Int64(k < fraction.count ? fraction[k] : 0) }
        if fraction.count > kept && fraction[kept] >= 5 { part += 1 }
        let summed = micros.addingReportingOverflow(part)
        guard !summed.overflow else { return nil }
        micros = summed.partialValue
        if negative { micros = -micros }
        guard DateConverter.storedSeconds.contains(Double(micros) / 1_000_000) else { return nil }
        return DateConverter.format(micros: micros)
    }

    /// The stored form of `micros` microseconds since 1970 (UTC, six fraction digits); `nil`
    /// outside ``storedYears``.
    static func format(micros: Int64) -> String? {
        var seconds = micros >= 0 ? micros / 1_000_000 : -((-micros + 999_999) / 1_000_000)
        let fraction = Int(micros - seconds * 1_000_000)
        let days = seconds >= 0 ? seconds / 86400 : -((-seconds + 86399) / 86400)
        seconds -= days * 86400
        let (y, m, d) = DateConverter.civil(fromDays: Int(days))
        guard DateConverter.storedYears.contains(y) else { return nil }
        let s = Int(seconds)
        var civil = Civil(year: y, month: m, day: d, hour: s / 3600, minute: s / 60 % 60, second: s % 60)
        let digits = Array(String(fraction + 1_000_000).utf8.dropFirst())
        return digits.withUnsafeBufferPointer { buffer in
            civil.fraction = buffer
            return DateConverter.format(civil)
        }
    }

    // MARK: - Rendering

    private mutating func render(_ civil: Civil, zone: String) -> String? {
        guard civil.hasTime else { return DateConverter.storedYears.contains(civil.year) ? DateConverter.format(civil) : nil }
        var offset = civil.offsetSeconds
        if offset == nil {
            if zone == "UTC" || zone == "GMT" {
                offset = 0
            } else {
                guard let tz = timeZone(zone) else { return nil }
                let local =
                    DateConverter.days(civil.year, civil.month, civil.day) * 86400
                    + civil.hour * 3600 + civil.minute * 60 + civil.second
                switch DateConverter.instants(ofLocal: local, in: tz) {
                case .one(let found):
                    offset = found
                case .none(let before, let after):
                    zoneProblem =
                        "\(DateConverter.clock(local)) does not exist in \(zone) that day (the clocks went from UTC\(DateConverter.offsetText(before)) to UTC\(DateConverter.offsetText(after))): give the time with its offset"
                    return nil
                case .two(let earlier, let later):
                    zoneProblem =
                        "\(DateConverter.clock(local)) happens twice in \(zone) that day (at UTC\(DateConverter.offsetText(earlier)), then at UTC\(DateConverter.offsetText(later))): give the time with its offset"
                    return nil
                }
            }
        }
        var utc = civil
        if let offset, offset != 0 {
            var seconds =
                DateConverter.days(civil.year, civil.month, civil.day) * 86400
                + civil.hour * 3600 + civil.minute * 60 + civil.second - offset
            let days = Int((Double(seconds) / 86400).rounded(.down))
            seconds -= days * 86400
            (utc.year, utc.month, utc.day) = DateConverter.civil(fromDays: days)
            utc.hour = seconds / 3600
            utc.minute = seconds / 60 % 60
            utc.second = seconds % 60
        }
        guard DateConverter.storedYears.contains(utc.year) else { return nil }
        return DateConverter.format(utc)
    }

    /// The instants a local time (seconds since 1970 as if it were UTC) names in `tz`: its offset
    /// when it names one; none in a spring gap (the offsets before and after it), two in an
    /// autumn overlap (the earlier instant's offset first). A local time is refused in both
    /// cases — no instant is guessed (docs/pipelines.md, "Dates in a local zone").
    enum LocalInstants: Equatable {
        case one(offset: Int)
        case none(before: Int, after: Int)
        case two(earlier: Int, later: Int)
    }

    static func instants(ofLocal local: Int, in tz: TimeZone) -> LocalInstants {
        // The offsets in force a day either side: a zone changes its offset at most once in two days.
        let before = tz.secondsFromGMT(for: Date(timeIntervalSince1970: Double(local - 86400)))
        let after = tz.secondsFromGMT(for: Date(timeIntervalSince1970: Double(local + 86400)))
        let valid = Set([before, after]).filter { o in tz.secondsFromGMT(for: Date(timeIntervalSince1970: Double(local - o))) == o }
        switch valid.count {
        case 0:
            // Not either side's offset: a change between them — or none at all (then the offset
            // found by guessing and refining holds).
            let first = tz.secondsFromGMT(for: Date(timeIntervalSince1970: Double(local)))
            let refined = tz.secondsFromGMT(for: Date(timeIntervalSince1970: Double(local - first)))
            if tz.secondsFromGMT(for: Date(timeIntervalSince1970: Double(local - refined))) == refined { return .one(offset: refined) }
            return .none(before: before, after: after)
        case 1: return .one(offset: valid.first ?? before)
        default:
            // The larger offset is the earlier instant.
            return .two(earlier: Swift.max(before, after), later: Swift.min(before, after))
        }
    }

    /// `HH:MM:SS` of a local time in seconds.
    private static func clock(_ local: Int) -> String {
        let s = ((local % 86400) + 86400) % 86400
        func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(two(s / 3600)):\(two(s / 60 % 60)):\(two(s % 60))"
    }

    /// `+02:00`, `-05:30`.
    private static func offsetText(_ seconds: Int) -> String {
        let m = Swift.abs(seconds) / 60
        func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return (seconds < 0 ? "-" : "+") + two(m / 60) + ":" + two(m % 60)
    }

    private mutating func timeZone(_ name: String) -> TimeZone? {
        if let tz = zones[name] { return tz }
        let tz = TimeZone(identifier: name)
        zones[name] = tz
        return tz
    }

    /// The stored form of `c`, whose fields must be in range (year 1...9999, and so on): every
    /// caller checks them first. Out-of-range digits would be written modulo 10, never trap.
    /// The fraction is canonical: six digits, the source's first six padded with zeros.
    static func format(_ c: Civil) -> String {
        let fraction = c.fraction.prefix(6)
        // Written straight into the string's storage: no intermediate array. A date alone (10
        // bytes) asks for no more than it needs, so it is a small string, not an allocation.
        return String(unsafeUninitializedCapacity: c.hasTime ? 27 : 10) { out in
            var n = 0
            func put(_ value: Int, _ width: Int) {
                var v = value.magnitude
                for k in stride(from: width - 1, through: 0, by: -1) {
                    out[n + k] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: v % 10)
                    v /= 10
                }
                n += width
            }
            func put(_ byte: UInt8) {
                out[n] = byte
                n += 1
            }
            put(c.year, 4); put(UInt8(ascii: "-")); put(c.month, 2); put(UInt8(ascii: "-")); put(c.day, 2)
            if c.hasTime {
                put(UInt8(ascii: "T")); put(c.hour, 2); put(UInt8(ascii: ":")); put(c.minute, 2)
                put(UInt8(ascii: ":")); put(c.second, 2)
                put(UInt8(ascii: "."))
                for byte in fraction { put(byte) }
                for _ in fraction.count..<6 { put(UInt8(ascii: "0")) }
                put(UInt8(ascii: "Z"))
            }
            return n
        }
    }

    // MARK: - Parsing

    /// `YYYY-MM-DD`, optionally followed by `T` (or a space) `HH:MM[:SS[.fff…]]` and `Z` or `±HH[:MM]`.
    static func parseISO8601(_ b: UnsafeBufferPointer<UInt8>) -> Civil? {
        var i = b.startIndex
        let end = b.endIndex
        func number(_ width: Int) -> Int? {
            guard end - i >= width, let v = digits(b, i..<i + width) else { return nil }
            i += width
            return v
        }
        func expect(_ c: UInt8) -> Bool {
            guard i < end, b[i] == c else { return false }
            i += 1
            return true
        }
        var c = Civil()
        guard let y = number(4), expect(UInt8(ascii: "-")), let m = number(2), expect(UInt8(ascii: "-")), let d = number(2) else {
            return nil
        }
        (c.year, c.month, c.day) = (y, m, d)
        if i == end {
            c.hasTime = false
            return valid(c) ? c : nil
        }
        guard i < end, b[i] == UInt8(ascii: "T") || b[i] == UInt8(ascii: "t") || b[i] == UInt8(ascii: " ") else { return nil }
        i += 1
        guard let h = number(2), expect(UInt8(ascii: ":")), let mi = number(2) else { return nil }
        (c.hour, c.minute) = (h, mi)
        if expect(UInt8(ascii: ":")) {
            guard let s = number(2) else { return nil }
            c.second = s
            if i < end, b[i] == UInt8(ascii: ".") || b[i] == UInt8(ascii: ",") {
                i += 1
                let start = i
                while i < end, b[i] &- UInt8(ascii: "0") < 10 { i += 1 }
                guard i > start else { return nil }
                c.fraction = UnsafeBufferPointer(rebasing: b[start..<i])
            }
        }
        if i < end {
            if b[i] == UInt8(ascii: "Z") || b[i] == UInt8(ascii: "z") {
                i += 1
                c.offsetSeconds = 0
            } else if b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
                let sign = b[i] == UInt8(ascii: "-") ? -1 : 1
                i += 1
                guard let oh = number(2), oh <= 23 else { return nil }
                var om = 0
                if expect(UInt8(ascii: ":")) {
                    guard let v = number(2) else { return nil }
                    om = v
                } else if i < end {
                    guard let v = number(2) else { return nil }
                    om = v
                }
                guard om <= 59 else { return nil }
                c.offsetSeconds = sign * (oh * 3600 + om * 60)
            }
        }
        guard i == end, valid(c) else { return nil }
        return c
    }

    /// The decimal number the bytes of `range` spell, or `nil` when one of them is not a digit.
    @inline(__always)
    static func digits(_ b: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Int? {
        var v = 0
        for k in range {
            let d = b[k] &- UInt8(ascii: "0")
            guard d < 10 else { return nil }
            v = v * 10 + Int(d)
        }
        return v
    }

    static func parse(_ b: UnsafeBufferPointer<UInt8>, pattern: DatePattern) -> Civil? {
        var c = Civil()
        c.hasTime = pattern.hasTime
        var i = b.startIndex
        for token in pattern.tokens {
            guard b.endIndex - i >= token.width else { return nil }
            if case .literal(let byte) = token {
                guard b[i] == byte else { return nil }
                i += 1
                continue
            }
            switch token {
            case .dayName, .monthName:
                // English abbreviations, whatever the machine's locale; any letter case.
                let word = String(decoding: b[i..<i + 3], as: UTF8.self).lowercased()
                let names =
                    token == .dayName
                    ? ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
                    : ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
                guard let k = names.firstIndex(of: word) else { return nil }
                if token == .monthName { c.month = k + 1 }
                i += 3
                continue
            case .offset:
                let sign: Int
                switch b[i] {
                case UInt8(ascii: "+"): sign = 1
                case UInt8(ascii: "-"): sign = -1
                default: return nil
                }
                guard let hhmm = digits(b, i + 1..<i + 5) else { return nil }
                let (hours, minutes) = (hhmm / 100, hhmm % 100)
                guard hours <= 23, minutes <= 59 else { return nil }
                c.offsetSeconds = sign * (hours * 3600 + minutes * 60)
                i += 5
                continue
            default: break
            }
            guard let v = digits(b, i..<i + token.width) else { return nil }
            switch token {
            case .year: c.year = v
            case .month: c.month = v
            case .day: c.day = v
            case .hour: c.hour = v
            case .minute: c.minute = v
            case .second: c.second = v
            case .millisecond: c.fraction = UnsafeBufferPointer(rebasing: b[i..<i + 3])
            case .literal, .dayName, .monthName, .offset: break
            }
            i += token.width
        }
        guard i == b.endIndex, valid(c) else { return nil }
        return c
    }

    private static func valid(_ c: Civil) -> Bool {
        guard c.month >= 1 && c.month <= 12, c.day >= 1, c.hour <= 23, c.minute <= 59, c.second <= 59 else { return false }
        return c.day <= daysIn(month: c.month, of: c.year)
    }

    /// The days of `month` (1–12) of `year` in the proleptic Gregorian calendar.
    static func daysIn(month: Int, of year: Int) -> Int {
        switch month {
        case 2: year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 (Howard Hinnant's `days_from_civil`).
    static func days(_ year: Int, _ month: Int, _ day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146097 + doe - 719468
    }

    static func civil(fromDays z0: Int) -> (Int, Int, Int) {
        let z = z0 + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let doe = z - era * 146097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}
