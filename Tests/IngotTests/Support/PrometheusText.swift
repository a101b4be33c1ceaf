import Foundation

/// A strict parser of the Prometheus text exposition format (version 0.0.4), for tests: it throws
/// on anything a Prometheus server would refuse, and on a few things it would accept but that
/// are wrong for Ingot's metrics (a family without TYPE, a series twice, histogram buckets that
/// are not cumulative or do not end in +Inf = _count).
struct PrometheusText {
    struct Sample: Equatable {
        var name: String
        var labels: [String: String]
        var value: Double
    }

    struct ParseError: Error, CustomStringConvertible {
        var line: Int
        var message: String
        var description: String { "line \(line): \(message)" }
    }

    private(set) var types: [String: String] = [:]
    private(set) var samples: [Sample] = []

    init(_ text: String) throws {
        guard text.isEmpty || text.hasSuffix("\n") else { throw ParseError(line: 0, message: "the exposition must end with a newline") }
        var seen: Set<String> = []
        var helped: Set<String> = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().enumerated() {
            let n = index + 1
            let line = String(raw)
            if line.hasPrefix("#") {
                let parts = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false).map(String.init)
                guard parts.count >= 3, parts[0] == "#" else { continue }  // a plain comment
                if parts[1] == "TYPE" {
                    guard parts.count == 4, Self.isMetricName(parts[2]),
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(parts[3])
                    else { throw ParseError(line: n, message: "bad TYPE line: \(line)") }
                    guard types[parts[2]] == nil else { throw ParseError(line: n, message: "second TYPE for \(parts[2])") }
                    guard !samples.contains(where: { Self.family($0.name, types: [parts[2]: parts[3]]) == parts[2] }) else {
                        throw ParseError(line: n, message: "TYPE of \(parts[2]) after its samples")
                    }
                    types[parts[2]] = parts[3]
                } else if parts[1] == "HELP" {
                    guard Self.isMetricName(parts[2]), helped.insert(parts[2]).inserted else {
                        throw ParseError(line: n, message: "bad or second HELP line: \(line)")
                    }
                }
                continue
            }
            guard !line.isEmpty else { throw ParseError(line: n, message: "empty line") }
            let sample = try Self.sample(line, n)
            guard let family = Self.family(sample.name, types: types) else {
                throw ParseError(line: n, message: "\(sample.name) has no TYPE before it")
            }
            if types[family] == "counter" {
                guard sample.value >= 0, sample.name == family else { throw ParseError(line: n, message: "bad counter sample: \(line)") }
            }
            let key = sample.name + sample.labels.sorted { $0.key < $1.key }.map { "\u{1}\($0.key)=\($0.value)" }.joined()
            guard seen.insert(key).inserted else { throw ParseError(line: n, message: "series twice: \(line)") }
            samples.append(sample)
        }
        try checkHistograms()
    }

    /// The value of the one sample named `name` whose labels include `labels`.
    func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        let matching = samples.filter { s in s.name == name && labels.allSatisfy { s.labels[$0.key] == $0.value } }
        return matching.count == 1 ? matching[0].value : nil
    }

    /// The samples named `name`.
    func all(_ name: String) -> [Sample] { samples.filter { $0.name == name } }

    private func checkHistograms() throws {
        for (family, type) in types where type == "histogram" {
            var groups: [[String: String]: [(le: Double, count: Double)]] = [:]
            for s in samples where s.name == family + "_bucket" {
                guard let le = s.labels["le"], let bound = le == "+Inf" ? Double.infinity : Double(le) else {
                    throw ParseError(line: 0, message: "\(family) bucket without a numeric le")
                }
                var rest = s.labels
                rest["le"] = nil
                groups[rest, default: []].append((bound, s.value))
            }
            for (labels, buckets) in groups {
                guard buckets.map(\.le) == buckets.map(\.le).sorted(), buckets.last?.le == .infinity else {
                    throw ParseError(line: 0, message: "\(family) buckets out of order or without +Inf")
                }
                guard zip(buckets, buckets.dropFirst()).allSatisfy({ $0.count <= $1.count }) else {
                    throw ParseError(line: 0, message: "\(family) buckets are not cumulative")
                }
                let count = samples.first { $0.name == family + "_count" && $0.labels == labels }?.value
                guard count == buckets.last?.count, samples.contains(where: { $0.name == family + "_sum" && $0.labels == labels }) else {
                    throw ParseError(line: 0, message: "\(family): +Inf bucket, _count and _sum disagree")
                }
            }
        }
    }

    private static func family(_ name: String, types: [String: String]) -> String? {
        if types[name] != nil { return name }
        for suffix in ["_bucket", "_count", "_sum"] where name.hasSuffix(suffix) {
            let base = String(name.dropLast(suffix.count))
            if types[base] == "histogram" || types[base] == "summary" { return base }
        }
        return nil
    }

    static func isMetricName(_ s: String) -> Bool {
        guard let first = s.unicodeScalars.first, !("0"..."9").contains(first) else { return false }
        return s.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "_" || $0 == ":"
        }
    }

    static func isLabelName(_ s: String) -> Bool {
        guard let first = s.unicodeScalars.first, !("0"..."9").contains(first) else { return false }
        return s.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "_" }
    }

    private static func sample(_ line: String, _ n: Int) throws -> Sample {
        let chars = Array(line.unicodeScalars)
        var i = 0
        var name = ""
        while i < chars.count, chars[i] != "{", chars[i] != " " {
            name.unicodeScalars.append(chars[i])
            i += 1
        }
        guard isMetricName(name) else { throw ParseError(line: n, message: "bad metric name '\(name)'") }
        var labels: [String: String] = [:]
        if i < chars.count, chars[i] == "{" {
            i += 1
            while true {
                guard i < chars.count else { throw ParseError(line: n, message: "unterminated labels") }
                if chars[i] == "}" {
                    i += 1
                    break
                }
                var label = ""
                while i < chars.count, chars[i] != "=" {
                    label.unicodeScalars.append(chars[i])
                    i += 1
                }
                guard isLabelName(label), i + 1 < chars.count, chars[i + 1] == "\"" else {
                    throw ParseError(line: n, message: "bad label '\(label)'")
                }
                i += 2
                var value = ""
                while true {
                    guard i < chars.count else { throw ParseError(line: n, message: "unterminated label value") }
                    let c = chars[i]
                    if c == "\"" { break }
                    if c == "\\" {
                        guard i + 1 < chars.count else { throw ParseError(line: n, message: "dangling escape") }
                        switch chars[i + 1] {
                        case "\\": value += "\\"
                        case "\"": value += "\""
                        case "n": value += "\n"
                        default: throw ParseError(line: n, message: "bad escape in a label value")
                        }
                        i += 2
                        continue
                    }
                    value.unicodeScalars.append(c)
                    i += 1
                }
                i += 1
                guard labels.updateValue(value, forKey: label) == nil else { throw ParseError(line: n, message: "label \(label) twice") }
                if i < chars.count, chars[i] == "," { i += 1 }
            }
        }
        guard i < chars.count, chars[i] == " " else { throw ParseError(line: n, message: "no value: \(line)") }
        let rest = String(String.UnicodeScalarView(chars[(i + 1)...])).split(separator: " ", omittingEmptySubsequences: false)
        guard (1...2).contains(rest.count) else { throw ParseError(line: n, message: "bad value: \(line)") }
        let text = String(rest[0])
        let value: Double
        switch text {
        case "+Inf": value = .infinity
        case "-Inf": value = -.infinity
        case "NaN": value = .nan
        default:
            guard let v = Double(text), text.allSatisfy({ $0.isNumber || "+-.eE".contains($0) }) else {
                throw ParseError(line: n, message: "bad value '\(text)'")
            }
            value = v
        }
        if rest.count == 2 { guard Int64(rest[1]) != nil else { throw ParseError(line: n, message: "bad timestamp") } }
        return Sample(name: name, labels: labels, value: value)
    }
}
