import Foundation

// What HTTPPageSource reads of the texts a server sends beside its pages — totals, `Link`
// headers, `Retry-After`, an error body's start — and how it shows a URL. A server's text is
// input: each reader returns `nil` for what it cannot read, never traps.
extension HTTPPageSource {
    /// The first position past a numbered source's end: an offset of `total`, a page number of
    /// `first + total` pages. A server's number is input: `nil` (the run fails, naming it) when
    /// it is negative or the sum overflows — never a trap.
    static func end(total n: Int, isPages: Bool, first: Int) -> Int? {
        guard n >= 0 else { return nil }
        guard isPages else { return n }
        let (end, overflow) = first.addingReportingOverflow(n)
        return overflow ? nil : end
    }

    /// A URL as shown in messages: at most 300 characters, control characters escaped.
    static func shown(_ url: String) -> String {
        let cut = url.count > 300 ? String(url.prefix(300)) + "…" : url
        return JSONText.escapingControlCharacters(cut)
    }

    /// `<url>; rel="next"` from an RFC 8288 Link header. Read link by link: the URL between `<`
    /// and `>` is taken whole (Shopify's `fields=id,title` holds a comma, a matrix URL a `;`),
    /// a parameter's quoted string may hold commas too; `rel` may list several types.
    static func nextLink(_ header: String) -> String? {
        var rest = Substring(header)
        while let open = rest.firstIndex(of: "<") {
            guard let close = rest[open...].firstIndex(of: ">") else { return nil }
            let target = rest[rest.index(after: open)..<close]
            rest = rest[rest.index(after: close)...]
            // The link's parameters, up to the next comma outside a quoted string.
            var parameters = ""
            var quoted = false
            while let c = rest.first {
                if c == "\"" { quoted.toggle() }
                if c == "," && !quoted { break }
                parameters.append(c)
                rest = rest.dropFirst()
            }
            let isNext = parameters.split(separator: ";").contains { p in
                let pair = p.split(separator: "=", maxSplits: 1)
                guard pair.count == 2, pair[0].trimmingCharacters(in: .whitespaces).lowercased() == "rel" else { return false }
                let value = pair[1].trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
                return value.lowercased().split(separator: " ").contains("next")
            }
            if isNext { return String(target) }
        }
        return nil
    }

    /// `Retry-After` as seconds: a number of seconds, or an HTTP date (IMF-fixdate,
    /// `Sun, 06 Nov 1994 08:49:37 GMT`) as seconds from `now`; `nil` for anything else (the
    /// computed backoff applies). Parsed byte by byte: a header is hostile input, and Foundation's
    /// `DateFormatter` trapped on one the fuzzer made (Tests/Fixtures/fuzz/pagination/).
    static func retryAfter(_ value: String, now: Date = Date()) -> Double? {
        let text = value.trimmingCharacters(in: .whitespaces)
        if !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") || $0 == UInt8(ascii: ".") }),
            let seconds = Double(text), seconds.isFinite
        {
            return max(0, seconds)
        }
        let b = Array(text.utf8)
        guard b.count == 29, b[3] == UInt8(ascii: ","), b[4] == 32, b[7] == 32, b[11] == 32, b[16] == 32, b[19] == UInt8(ascii: ":"),
            b[22] == UInt8(ascii: ":"), b[25] == 32, Array(b[26...]) == Array("GMT".utf8)
        else { return nil }
        func number(_ range: Range<Int>) -> Int? { b.withUnsafeBufferPointer { DateConverter.digits($0, range) } }
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].map { Array($0.utf8) }
        guard let day = number(5..<7), let monthIndex = months.firstIndex(of: Array(b[8..<11])), let year = number(12..<16),
            let hour = number(17..<19), let minute = number(20..<22), let second = number(23..<25),
            (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        let days = DateConverter.days(year, monthIndex + 1, day)
        let instant = Double(days * 86400 + hour * 3600 + minute * 60 + second)
        return max(0, instant - now.timeIntervalSince1970)
    }

    /// The start of an error response's body, for the failure's message.
    static func preview(_ body: [UInt8]) -> String {
        let text = String(decoding: body.prefix(200), as: UTF8.self)
        return text.isEmpty ? "request refused" : text
    }
}
