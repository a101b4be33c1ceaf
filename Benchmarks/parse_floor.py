#!/usr/bin/env python3
"""The parse half of the pipeline floor (docs/benchmarks.md): every page of a directory read and
parsed by the fastest JSON parser there is (simdjson, through pysimdjson from PyPI, pinned;
installed by bench.py: the whole document validated and laid out, as simdjson's own benchmarks
parse) on every core, the records counted. `--parser orjson` parses with orjson instead, for
comparison. Prints one JSON line: the seconds from the first read to the last parse (the worker
processes started before the clock), the records, the processes, the parser.

Usage: parse_floor.py --pages DIR [--processes N] [--parser simdjson|orjson]
"""
import argparse
import glob
import json
import os
import time
from multiprocessing import Pool


PARSER = "simdjson"
_simdjson = None


def parse(path):
    with open(path, "rb") as f:
        data = f.read()
    if PARSER == "orjson":
        import orjson
        return len(orjson.loads(data).get("results", []))
    # One parser per process, reused page after page (its buffers kept), as simdjson is meant
    # to be used; each page's document released before the next.
    document = _simdjson.parse(data)
    try:
        return len(document.at_pointer("/results"))
    except KeyError:
        return 0


def setup(parser):
    """Each worker process's start: its parser made before the clock."""
    global PARSER, _simdjson
    PARSER = parser
    if parser == "orjson":
        import orjson  # noqa: F401
    else:
        import simdjson
        _simdjson = simdjson.Parser()


def warm(_):
    return 0


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--pages", required=True)
    a.add_argument("--processes", type=int, default=os.cpu_count())
    a.add_argument("--parser", choices=["simdjson", "orjson"], default="simdjson")
    args = a.parse_args()
    files = sorted(glob.glob(os.path.join(args.pages, "page-*.json")))
    with Pool(args.processes, initializer=setup, initargs=(args.parser,)) as pool:
        pool.map(warm, range(args.processes))
        started = time.perf_counter()
        records = sum(pool.map(parse, files, chunksize=max(1, len(files) // (4 * args.processes))))
        seconds = time.perf_counter() - started
    print(json.dumps({"seconds": round(seconds, 4), "records": records, "processes": args.processes, "parser": args.parser}))


if __name__ == "__main__":
    main()
