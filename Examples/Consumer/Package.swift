// swift-tools-version:6.0
// A package outside Ingot's own, depending on it by path, as a user's service would: it builds
// against the documented public API only (`make consumer`).
import PackageDescription

let package = Package(
    name: "Consumer",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "Ingot", path: "../..")],
    targets: [
        .executableTarget(name: "Consumer", dependencies: [.product(name: "Ingot", package: "Ingot")])
    ],
    swiftLanguageModes: [.v6]
)
