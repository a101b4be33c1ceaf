extension HTTPPageSource {
    /// The URLs of a list source, read one at a time: a for_each's requests are kept out of
    /// memory (Fetch/Resources/RequestList.swift), and millions of them are never held as strings.
    package struct URLs: Sendable {
        package let count: Int
        private let url: @Sendable (Int) -> String
        package var isEmpty: Bool { count == 0 }

        package init(count: Int, _ url: @escaping @Sendable (Int) -> String) {
            self.count = count
            self.url = url
        }

        package init(_ urls: [String]) { self.init(count: urls.count) { urls[$0] } }

        package subscript(k: Int) -> String { url(k) }
    }
}
