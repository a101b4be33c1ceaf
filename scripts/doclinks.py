#!/usr/bin/env python3
"""Checks the symbol links of the Swift sources' doc comments (``Type``, ``Type/member(label:)``,
``member``): each names a type, or a member declared somewhere in Sources/. A link to a renamed or
removed symbol is stale documentation; `make lint` fails on it, naming the file and line."""
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
for line in stale:
    print(line)
print(f"{len(links)} symbol links, {len(stale)} stale", file=sys.stderr)
sys.exit(1 if stale else 0)
