#!/usr/bin/env python3
"""Where one run's CPU goes, stage by stage: `perf record` of `ingot run` over a people data set
(written by bench.py into .build-bench), its samples grouped by the symbols of each stage.

Usage: profile.py --ingot BIN [--persons 200000] [--frequency 999]
Needs `perf` (linux-perf). Shares are of sampled CPU time (all threads), not of wall time.
"""
import argparse
import collections
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = [
    ("zstd (the archive's compression)", r"ZSTD|zstd|libzstd"),
    ("JSON parse", r"JSONParser|JSONDocument|JSONNumber"),
    ("mapping (records to rows, value rules, dates)",
     r"RecordMapper|MappingCursor|AttributeRules|DateConverter|DecimalText|ScalarValue|MappingPlan|DecodedPage|RecordFraming|PageFootprint"),
    ("resolve and fold (identities, batches)",
     r"BatchResolver|ResolvedBatch|IdentityKey|BatchAssembler|RunLedger|UncommittedIdentities|IdentityLookup|RowFolder|UnfoldedRows"),
    ("staged load (stage, sort, merge)", r"StageFile|Stage|HeldValues|RowFeed|FeedCursor|FeedRows|Merge|Fold|EntityRow|RowStorage"),
    ("SQLite (the write itself)", r"libsqlite3|sqlite3"),
    ("SHA-256 and CRC32C (prints, archive)", r"SHA256|libcrypto|CRC32C"),
    ("Swift runtime, allocation, reference counting", r"libswiftCore|swift_|malloc|free|libc\.so|memcpy|memmove|_int_|tcache"),
    ("Dispatch and threads", r"libdispatch|pthread|futex"),
    ("kernel", r"\[kernel|\[k\]"),
]


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--ingot", required=True)
    a.add_argument("--persons", type=int, default=200000)
    a.add_argument("--frequency", type=int, default=999)
    args = a.parse_args()
    if not shutil.which("perf"):
        sys.exit("perf is not installed (apt-get install linux-perf)")
    pages = os.path.join(ROOT, ".build-bench", "people-%d-1000" % args.persons)
    if not os.path.exists(os.path.join(pages, "expected.json")):
        subprocess.run([sys.executable, os.path.join(ROOT, "Benchmarks", "people.py"), "--out", pages, "--persons", str(args.persons),
                        "--page-size", "1000"], check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as tmp:
        data, db = os.path.join(tmp, "perf.data"), os.path.join(tmp, "people.db")
        run = subprocess.run(["perf", "record", "-F", str(args.frequency), "-o", data, args.ingot, "run",
                              os.path.join(ROOT, "pipelines", "people.yml"), "--pages", pages, "--db", db,
                              "--archive-dir", os.path.join(tmp, "archives"), "--progress-interval", "0"],
                             check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,sym", "--stdio"],
                                capture_output=True, text=True).stdout
    totals, other = collections.Counter(), collections.Counter()
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+(.*)", line)
        if not m:
            continue
        share, text = float(m.group(1)), m.group(2) + " " + m.group(3)
        stage = next((name for name, rx in STAGES if re.search(rx, text)), None)
        if stage:
            totals[stage] += share
        else:
            totals["other"] += share
            other[text[:100]] += share
    print("people-%d, ingot run with the archive on (under perf): %s" % (args.persons, phases(run.stderr)))
    print("share of sampled CPU:")
    for name, share in totals.most_common():
        print("  %5.1f%%  %s" % (share, name))
    print("  largest of the other symbols:")
    for name, share in other.most_common(6):
        print("  %5.2f%%  %s" % (share, name))


def phases(log):
    """The run's wall time and its phases, from its log: start, the stage phase, the merge, the end."""
    stamps = {}
    for line in log.splitlines():
        m = re.search(r"ts=(\S+) .*msg=(run\.started|bulk\.started|bulk\.merging|bulk\.merged|run\.summary)", line)
        if m:
            stamps[m.group(2)] = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
    names = ["run.started", "bulk.started", "bulk.merging", "bulk.merged", "run.summary"]
    if not all(n in stamps for n in names):
        return "not a staged load (no phases)"
    d = [(stamps[b] - stamps[a]).total_seconds() for a, b in zip(names, names[1:])]
    total = (stamps["run.summary"] - stamps["run.started"]).total_seconds()
    return "%.2f s: start %.2f s, stage phase %.2f s, merge %.2f s, end %.2f s" % (total, *d)


if __name__ == "__main__":
    main()
