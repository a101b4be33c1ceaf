#!/usr/bin/env python3
"""The I/O-fault sweep (docs/reliability.md, "Every write may fail").

For each load plan, people pages from local files are loaded once without a fault to count the
writes and syncs to the files under test (scripts/faultfs.c counts them), then, for N spread over
that count, once with the Nth call failing with EIO and once with every call from the Nth on
failing with ENOSPC (a disk that fills up). Each faulted run must exit 0 only if it wrote
everything (the shim never fired or the write it hit was retried), else exit non-zero with its own
code, never a signal; then `--resume` without the fault (or a fresh run when the first one left
nothing to resume) must end exactly in the data set's final state (Benchmarks/people.py --check).

Usage:
  faultsweep.py --ingot .build/release/ingot [--points 48] [--persons 20000] [--plan NAME ...]
  faultsweep.py ... --postgres      # the PostgreSQL plans, on a throwaway server
Exit 1 unless every point ends exact. Needs a C compiler (cc) and Python's standard library.
"""
import argparse, json, os, shutil, signal, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Each plan: the run's options, and the files whose writes fail.
SQLITE_PLANS = {
    "batch-by-batch": (["--no-bulk"], "people.db"),
    "staged": (["--bulk"], "people.db"),
    "staged-default": ([], "people.db"),
    # One transaction until the source ends (25,000 records a commit, no commit on time): the
    # staging file's last commit comes right before the merge.
    "staged-one-commit": (["--batch-records", "5000", "--commit-records", "25000", "--commit-interval", "3600"], "people.db"),
    "turned-staged": (["--bulk-after-mib", "1"], "people.db"),
    "archive": (["--no-bulk"], ".ingot"),
}
# PostgreSQL's own writes are the server's; what Ingot writes is the job's staging file in TMPDIR.
POSTGRES_PLANS = {
    "pg-staged": ([], "ingot-stage-"),
    "pg-staged-one-commit": (["--bulk", "--batch-records", "5000", "--commit-records", "25000", "--commit-interval", "3600"],
                             "ingot-stage-"),
}


class PostgresTarget:
    """A throwaway PostgreSQL server (Benchmarks/bench.py's), and the tables of one uninterrupted
    run of the people pages into it: what every faulted-then-resumed run must end with."""

    def __init__(self, work, ingot, pages):
        sys.path.insert(0, os.path.join(ROOT, "Benchmarks"))
        import bench
        bench.BENCH = work
        os.chmod(work, 0o755)  # the server runs as nobody under root: it must reach its directory
        self.bench = bench
        self.pg = bench.Postgres()
        self.name = "people"
        reference = self.pg.fresh("reference")
        subprocess.run([ingot, "run", os.path.join(ROOT, "pipelines", "people.yml"), "--pages", pages, "--db", reference,
                        "--no-archive", "--progress-interval", "0"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.expected = bench.table_digest(self.pg, "reference")

    def recreate(self, name):
        self.name = name
        self.pg.fresh(name)

    def url(self, name):
        return self.pg.url(name)

    def check_people(self, _expected):
        got = self.bench.table_digest(self.pg, self.name)
        return got == self.expected, got

    def stop(self):
        self.pg.stop()


def build_shim(work):
    out = os.path.join(work, "faultfs.so")
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        sys.exit("faultsweep: no C compiler (cc, gcc or clang) on PATH")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", out, os.path.join(HERE, "faultfs.c"), "-ldl"], check=True)
    return out


def run(cmd, env, timeout=600):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stderr.decode(errors="replace")


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--ingot", required=True)
    a.add_argument("--points", type=int, default=48, help="fault points per plan and mode")
    a.add_argument("--persons", type=int, default=20000)
    a.add_argument("--plan", action="append", help="only these plans")
    a.add_argument("--postgres", action="store_true")
    a.add_argument("--keep", action="store_true")
    args = a.parse_args()
    ingot = os.path.abspath(args.ingot)
    work = tempfile.mkdtemp(prefix="ingot-faultsweep-")
    shim = build_shim(work)
    pages = os.path.join(work, "pages")
    subprocess.run([sys.executable, os.path.join(ROOT, "Benchmarks", "people.py"), "--out", pages,
                    "--persons", str(args.persons), "--page-size", "500"], check=True, stdout=subprocess.DEVNULL)
    expected = os.path.join(pages, "expected.json")
    plans = POSTGRES_PLANS if args.postgres else SQLITE_PLANS
    if args.plan:
        plans = {k: v for k, v in plans.items() if k in args.plan}
    server = None
    if args.postgres:
        server = PostgresTarget(work, ingot, pages)
    failures = []
    total = 0
    try:
        for name, (options, match) in plans.items():
            failures += sweep(name, options, match, args, ingot, shim, pages, expected, work, server)
            total += 2 * args.points
    finally:
        if server:
            server.stop()
    print(json.dumps({"points": total, "failed": len(failures)}))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failures else 0)


def sweep(name, options, match, args, ingot, shim, pages, expected, work, server):
    failures = []
    dir = os.path.join(work, name)

    def fresh():
        shutil.rmtree(dir, ignore_errors=True)
        os.makedirs(os.path.join(dir, "tmp"))
        if server:
            server.recreate("people")

    def target():
        return server.url("people") if server else os.path.join(dir, "people.db")

    def command(resume):
        cmd = [ingot, "run", os.path.join(ROOT, "pipelines", "people.yml"), "--pages", pages, "--db", target(),
               "--archive-dir", os.path.join(dir, "archives"), "--lanes", "2", "--progress-interval", "0"]
        cmd += options if "--batch-records" in options else ["--batch-records", "1000", "--commit-records", "2000"] + options
        return cmd + (["--resume"] if resume else [])

    def env(**faults):
        e = dict(os.environ, TMPDIR=os.path.join(dir, "tmp"))
        if faults:
            e.update(LD_PRELOAD=shim, FAULTFS_MATCH=match, **{k: str(v) for k, v in faults.items()})
        return e

    def check():
        if server:
            return server.check_people(expected)
        p = subprocess.run([sys.executable, os.path.join(ROOT, "Benchmarks", "people.py"), "--check", target(),
                            "--expected", expected], stdout=subprocess.PIPE)
        return p.returncode == 0, p.stdout.decode()[:300]

    fresh()
    report = os.path.join(work, name + ".count")
    code, err = run(command(False), env(FAULTFS_AT=0, FAULTFS_REPORT=report))
    if code != 0:
        return [f"{name}: the run without a fault exited {code}: {err[-500:]}"]
    calls = int(open(report).read().split("\n")[0].split("=")[1])
    points = sorted({max(1, round(1 + i * (calls - 1) / max(1, args.points - 1))) for i in range(args.points)})
    print(f"{name}: {calls} writes and syncs to *{match}*; {len(points)} points x eio, enospc", flush=True)
    for mode in ("eio", "enospc"):
        for n in points:
            fresh()
            hit_report = os.path.join(work, name + ".hit")
            code, err = run(command(False), env(FAULTFS_AT=n, FAULTFS_MODE=mode, FAULTFS_REPORT=hit_report))
            hit = open(hit_report).read().split("hit=")[1].strip() if os.path.exists(hit_report) else ""
            where = f"{name} {mode}@{n} ({hit or 'no fault fired'})"
            if code < 0 or code >= 128:
                failures.append(f"{where}: ended by a signal (exit {code}): {err[-300:]}")
                continue
            if code == 0:
                ok, got = check()
                if not ok:
                    failures.append(f"{where}: exit 0 without every row: {got}")
                continue
            # Failed as it should: the resume without the fault ends exact.
            code2, err2 = run(command(True), env())
            if code2 != 0:
                failures.append(f"{where}: first run exit {code}, the resume exited {code2}: {err2[-400:]}")
                continue
            ok, got = check()
            if not ok:
                failures.append(f"{where}: first run exit {code}, resumed to a wrong state: {got}")
    print(f"{name}: {len(failures)} of {2 * len(points)} points failed", flush=True)
    for f in failures[:10]:
        print("  " + f, flush=True)
    return failures


if __name__ == "__main__":
    main()
