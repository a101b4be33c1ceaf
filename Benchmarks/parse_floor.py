#!/usr/bin/env python3
"""The parse half of the pipeline floor (docs/benchmarks.md): every page of a directory read and
parsed by a fast C-speed JSON parser (orjson, from PyPI, pinned; installed by bench.py) on every
core, the records counted. Prints one JSON line: the seconds from the first read to the last
parse (the worker processes started before the clock), the records, the processes.

Usage: parse_floor.py --pages DIR [--processes N]
"""
import argparse
import glob
import json
import os
import time
from multiprocessing import Pool


def parse(path):
    import orjson
    with open(path, "rb") as f:
        return len(orjson.loads(f.read()).get("results", []))


def warm(_):
    import orjson  # noqa: F401
    return 0


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--pages", required=True)
    a.add_argument("--processes", type=int, default=os.cpu_count())
    args = a.parse_args()
    files = sorted(glob.glob(os.path.join(args.pages, "page-*.json")))
    with Pool(args.processes) as pool:
        pool.map(warm, range(args.processes))
        started = time.perf_counter()
        records = sum(pool.map(parse, files, chunksize=max(1, len(files) // (4 * args.processes))))
        seconds = time.perf_counter() - started
    print(json.dumps({"seconds": round(seconds, 4), "records": records, "processes": args.processes}))


if __name__ == "__main__":
    main()
