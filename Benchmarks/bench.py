#!/usr/bin/env python3
"""make bench: people-200k through the release binary, 3 runs, medians.

Generates the data set once into .build-bench/ (gen_people.py from ../shared), runs
`ingot run` with all lanes and with 1 lane, checks the database with --check, and prints
wall time, records/s, MB/s and peak RSS. Copy the table into docs/benchmarks.md.
"""
import argparse, json, os, re, statistics, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEN = os.path.join(os.path.dirname(ROOT), "shared", "bench", "gen_people.py")


def run(ingot, pages, db, lanes):
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    cmd = ["/usr/bin/time", "-f", "rss_kb=%M", ingot, "run", os.path.join(ROOT, "pipelines/people.yml"),
           "--pages", pages, "--db", db, "--progress-interval", "0"]
    if lanes:
        cmd += ["--lanes", str(lanes)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("ingot failed:\n" + p.stderr)
    summary = [l for l in p.stderr.splitlines() if "msg=run.summary" in l][-1]
    duration = float(re.search(r"duration_s=([0-9.]+)", summary).group(1))
    rss = int(re.search(r"rss_kb=(\d+)", p.stderr).group(1))
    return duration, rss


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--ingot", required=True)
    a.add_argument("--persons", type=int, default=200000)
    a.add_argument("--page-size", type=int, default=1000)
    a.add_argument("--runs", type=int, default=3)
    args = a.parse_args()
    data = os.path.join(ROOT, ".build-bench", "people-%d-%d" % (args.persons, args.page_size))
    if not os.path.exists(os.path.join(data, "expected.json")):
        subprocess.run([sys.executable, GEN, "--out", data, "--persons", str(args.persons),
                        "--page-size", str(args.page_size)], check=True, stdout=subprocess.DEVNULL)
    expected = json.load(open(os.path.join(data, "expected.json")))
    db = os.path.join(ROOT, ".build-bench", "bench.db")
    mb = expected["bytes"] / 1e6
    print("people: %d pages, %d records, %.1f MB" % (expected["pages"], expected["records"], mb))
    for _ in range(args.runs):
        p = subprocess.run([args.ingot, "bench-decode", os.path.join(ROOT, "pipelines/people.yml"), "--pages", data],
                           capture_output=True, text=True, check=True)
        print("decode (1 thread): " + p.stdout.strip())
    for label, lanes in (("all lanes", None), ("1 lane", 1)):
        results = [run(args.ingot, data, db, lanes) for _ in range(args.runs)]
        check = subprocess.run([sys.executable, GEN, "--check", db, "--expected", os.path.join(data, "expected.json")],
                               capture_output=True, text=True)
        ok = json.loads(check.stdout)["ok"]
        wall = statistics.median(r[0] for r in results)
        rss = max(r[1] for r in results) / 1024
        print("%-9s  median %.2f s  %7.0f records/s  %5.1f MB/s  peak RSS %.0f MB  check ok=%s  (runs: %s)" % (
            label, wall, expected["records"] / wall, mb / wall, rss, ok, ", ".join("%.2f" % r[0] for r in results)))


if __name__ == "__main__":
    main()
