#!/usr/bin/env python3
"""Checks the symbol links of the Swift sources' doc comments (``Type``, ``Type/member(label:)``,
``member``): each names a type, or a member declared somewhere in Sources/; and the type names the
docs' prose puts in backticks (`Type`, `Type.member`): each is declared in Sources/ or Tests/. A
link or a name of a renamed or removed symbol is stale documentation; `make lint` fails on it,
naming the file and line."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent / "Sources"
declared = set()
decl = re.compile(
    r"\b(?:func|var|let|case|init|subscript|struct|class|enum|protocol|actor|typealias|associatedtype)\s+`?([A-Za-z_]\w*)")
cases = re.compile(r"^\s*(?:indirect\s+)?case\s+(.+)$")
links = []
for path in sorted(root.rglob("*.swift")):
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        code = line.split("//", 1)[0]
        declared.update(decl.findall(code))
        if "init(" in code:
            declared.add("init")
        m = cases.match(code)
        if m:  # case a, b(x), c
            for part in re.split(r",(?![^(]*\))", m.group(1)):
                name = re.match(r"\s*`?([A-Za-z_]\w*)", part)
                if name:
                    declared.add(name.group(1))
        if line.lstrip().startswith("///"):
            for link in re.findall(r"``([^`]+)``", line):
                links.append((path, n, link))

# Symbols of other modules a link may start from.
declared.update({"Swift", "Foundation", "Logger", "Logging", "Metrics", "GRDB", "Dispatch"})
stale = []
external = {"Swift", "Foundation", "Logger", "Logging", "Metrics", "GRDB", "Dispatch"}
for path, n, link in links:
    parts = link.split("/")
    # A link into another module's type: only its last part (a member Ingot adds) is Ingot's.
    for part in parts[-1:] if parts[0] in external else parts:
        name = re.match(r"[A-Za-z_]\w*", part)
        if name and name.group(0) not in declared:
            stale.append(f"{path.relative_to(root.parent)}:{n}: ``{link}``: no declaration named {name.group(0)}")
            break
# The prose: a type the docs name in backticks (`PGJoinedStore`, `LoadPlan.decide(_:)`) is
# declared in Sources/ or Tests/ (a test the docs cite), or is a folder of the library, or is one
# of the names below that other code owns (Swift, Foundation, GRDB, PostgreSQL, HTTP, Kubernetes,
# a profiler's symbol) or that a doc names as history. A renamed type leaves no stale prose.
OTHERS = {
    "AsyncSequence", "AsyncThrowingStream", "Bool", "CaseIterable", "Character", "Codable", "Data", "Date", "DateFormatter",
    "Decimal", "Decodable", "DecodingError", "EncodingError", "DispatchQueue", "DispatchSpecificKey", "Double", "Encodable", "Float", "ISO8601DateFormatter",
    "Int", "Int8", "JSONDecoder", "Mutex", "NSCondition", "Set", "SortDescriptor", "String", "UInt32", "URL", "UUID",
    "DatabaseError", "DatabasePool", "DatabaseQueue", "ValueObservation", "ModelContext", "NIOThreadPool",
    "ExecInsertIndexTuples", "NextCopyFrom", "ParseDateTime", "EntityLayoutVwcp", "Authorization", "ETag", "Link",
    "ReadOnlyMany", "Wed", "Ingot", "ReadmeExamples", "PersonAttribute", "PQprepare", "PQexecPrepared", "DeletedEntry",
}
tests = pathlib.Path(__file__).resolve().parent.parent / "Tests"
for path in sorted(tests.rglob("*.swift")):
    for line in path.read_text(encoding="utf-8").splitlines():
        declared.update(decl.findall(line.split("//", 1)[0]))
folders = {d.name for d in (root / "Ingot").rglob("*") if d.is_dir()}
prose = 0
docs = sorted((root.parent / "docs").glob("*.md")) + [root.parent / "README.md"]
for path in docs:
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        # A name, or a name and a member (a call's labels allowed), and nothing else: not a path
        # (`Sources/…`, `PGStore.swift`), not a header (`Retry-After`), not words.
        for name, member in re.findall(r"`([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)(?:\.([a-z_]\w*))?(?:\([^`()]*\))?`", line):
            prose += 1
            if name in OTHERS or name in folders or member == "swift":
                continue
            if name not in declared:
                stale.append(f"{path.relative_to(root.parent)}:{n}: `{name}`: no declaration named {name}")
            elif member and member not in declared:
                stale.append(f"{path.relative_to(root.parent)}:{n}: `{name}.{member}`: no declaration named {member}")
for line in stale:
    print(line)
print(f"{len(links)} symbol links, {prose} names in the docs' prose, {len(stale)} stale", file=sys.stderr)
sys.exit(1 if stale else 0)
