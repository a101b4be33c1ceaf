#!/usr/bin/env python3
"""Chaos: kill -9 an `ingot run --resume` over HTTP at random moments, resume after each kill,
and check that the database ends at the exact expected state with no duplicate rows.

  scripts/chaos.py --ingot .build/release/ingot --kills 20 --persons 50000
  scripts/chaos.py --ingot .build/release/ingot --kills 20 --persons 50000 --postgres

With --postgres the run writes into a throwaway PostgreSQL server (Benchmarks/bench.py's, on
127.0.0.1, stopped at the end) and the final tables are compared with those of one uninterrupted
run into a second database. With --postgres --join N, N jobs share one run (`--join`, lease 1 s);
at random moments one of them (the fetcher or not) is killed with kill -9 and a new job is
started in its place, as a Kubernetes Job restarts a pod. With --files they read the pages
from files instead of HTTP, so that the jobs exchange their rows and write the parts at the run's end.
With --fanout the pipeline has two resources: the pages, then a request per person for its
detail page (a for_each), so that kills land in a fan-out and in takeovers of its fetcher.
With --notes the second resource is each person's notes instead, 1 to 3 pages by next URL (a
for_each whose requests paginate: a single run makes four at once, a joined job follows each it
claims to its end), so that kills land inside a request's pages.
With --in-order, persons and dogs are read from both sides (`inverse:`), so the jobs commit
their units in the run's order (docs/scale-out.md, "Units committed in order").
With --replace the pipeline writes `write: replace`: both databases are first loaded by one
single run of another people data set (a tenth more persons, another seed), so that the joined
run's end deletes the persons it did not see while jobs are killed around it.

Starts Tests/Fixtures/server.py on 127.0.0.1 (loopback only, stopped at the end), generates the
people data set with Benchmarks/people.py, and prints one JSON line with the result.
Exit 0 when the final check passes.
"""
import argparse, json, os, random, shutil, signal, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEN = os.path.join(ROOT, "Benchmarks", "people.py")


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--ingot", required=True)
    a.add_argument("--kills", type=int, default=20)
    a.add_argument("--persons", type=int, default=50000)
    a.add_argument("--page-size", type=int, default=200)
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("--batch-records", type=int, default=1000,
                   help="below the page size, pages are decoded and committed in parts (kills then land mid-page)")
    a.add_argument("--commit-records", type=int, default=25000)
    a.add_argument("--max-delay", type=float, default=1.5, help="longest wait before a kill, in seconds")
    a.add_argument("--keep", action="store_true", help="keep the work directory (pages, database, archives)")
    a.add_argument("--postgres", action="store_true", help="write into a throwaway PostgreSQL server instead of SQLite")
    a.add_argument("--join", type=int, default=0, help="with --postgres: this many jobs share one run (--join)")
    a.add_argument("--fanout", action="store_true",
                   help="with --join: the people pages, then each person's detail page (a for_each resource)")
    a.add_argument("--notes", action="store_true",
                   help="the people pages, then each person's notes in 1 to 3 pages by next URL (a for_each that paginates)")
    a.add_argument("--replace", action="store_true",
                   help="with --join: write: replace over the tables a single run of another data set left")
    a.add_argument("--in-order", action="store_true",
                   help="with --join: person.dogs and dog.owners read from both sides, so units are committed in order")
    a.add_argument("--files", action="store_true",
                   help="with --join: the jobs read the pages from files (--pages), so they exchange their rows")
    a.add_argument("--bulk", action="store_true",
                   help="a staged load (--bulk): kills land while staging and while merging (with --postgres: while copying;"
                        " with --join: the jobs defer their batches to the run's end, and kills land in the merge too)")
    a.add_argument("--paged", action="store_true",
                   help="pages by number with total_pages instead of next URLs: with --join, every job fetches the pages it claims")
    a.add_argument("--untold", action="store_true",
                   help="with --paged: no total_pages, so the first empty page ends the pages (with --join, found by a job)")
    a.add_argument("--bulk-after-mib", type=int, default=None,
                   help="a load that turns staged once its database holds this many MiB: kills land before, while and after it turns")
    args = a.parse_args()
    if args.join and not args.postgres:
        a.error("--join needs --postgres")
    if args.paged and (args.fanout or args.notes or args.files):
        a.error("--paged reads the people pages by number: not with --fanout, --notes or --files")
    if args.untold and not args.paged:
        a.error("--untold needs --paged")
    if (args.files or args.in_order or args.replace) and not args.join:
        a.error("--files, --in-order and --replace need --join")
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="ingot-chaos-")
    pg = None
    pages = os.path.join(work, "pages")
    subprocess.run([sys.executable, GEN, "--out", pages, "--persons", str(args.persons), "--page-size", str(args.page_size)],
                   check=True, stdout=subprocess.DEVNULL)
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests/Fixtures/server.py"), "--people", pages, "--exit-on-eof"],
                              stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().split()[1])
        pipeline = open(os.path.join(ROOT, "pipelines/people.yml")).read().replace(
            '  files: {dir: samples/people, glob: "page-*.json"}',
            "  http:\n    url: http://127.0.0.1:%d/people/next\n    paginate: {next_url: next}\n" % port)
        if args.paged:
            numbered = ("url: http://127.0.0.1:%d/people/page\n    paginate: {page: {param: page, start: 1}}\n" if args.untold else
                        "url: http://127.0.0.1:%d/people/paged\n    paginate: {page: {param: page, start: 1, total_pages: meta.total_pages}}\n")
            pipeline = pipeline.replace(
                "url: http://127.0.0.1:%d/people/next\n    paginate: {next_url: next}\n" % port,
                numbered % port + "    concurrency: 4\n")
            if "people/page" not in pipeline:
                a.error("--paged could not rewrite pipelines/people.yml")
        if args.fanout or args.notes:
            # Resources: the pages, then a request per person (its detail page, or the last of its
            # notes pages, sets `note`).
            details = ('  - {name: notes, for_each: {resource: pages, path: "people/notes/{id}"},'
                       ' source: {http: {paginate: {next_url: next}}}, records: results, root: person}\n') if args.notes else \
                '  - {name: details, for_each: {resource: pages, path: \"people/detail/{id}\"}, records: \".\", root: person}\n'
            pipeline = pipeline.replace(
                "source:\n  http:\n    url: http://127.0.0.1:%d/people/next\n    paginate: {next_url: next}\n\nrecords: results\nroot: person\n" % port,
                "defaults: {http: {url: \"http://127.0.0.1:%d/\", concurrency: 4}}\nresources:\n"
                "  - {name: pages, source: {http: {url: people/next, paginate: {next_url: next}}}, records: results, root: person}\n" % port
                + details,
            ).replace("      tags: json\n", "      tags: json\n      note: string\n")
            if "for_each" not in pipeline:
                a.error("--fanout/--notes could not rewrite pipelines/people.yml")
        if args.in_order:
            pipeline = pipeline.replace("      dogs: {to: dog, many: true, key: dogs}\n",
                                        "      dogs: {to: dog, many: true, key: dogs, inverse: owners}\n")
            pipeline = pipeline.rstrip("\n") + "\n    relationships:\n      owners: {to: person, many: true, key: owners, inverse: dogs}\n"
            if "inverse: owners" not in pipeline:
                a.error("--in-order could not rewrite pipelines/people.yml")
        if args.replace:
            pipeline = pipeline.replace("\nwrite: merge\n", "\nwrite: replace\n", 1)
            if "write: replace" not in pipeline:
                a.error("--replace could not rewrite pipelines/people.yml")
        yml = os.path.join(work, "people-http.yml")
        open(yml, "w").write(pipeline)
        db = os.path.join(work, "chaos.db")
        if args.postgres:
            sys.path.insert(0, os.path.join(ROOT, "Benchmarks"))
            import bench
            bench.BENCH = work
            os.chmod(work, 0o755)  # the server runs as nobody under root: it must reach its directory
            pg = bench.Postgres()
            db = pg.fresh("chaos")
        seeded = []
        if args.replace:
            # Another data set, loaded alone into both databases first (the reference is made now too).
            seed_pages = os.path.join(work, "seed")
            subprocess.run([sys.executable, GEN, "--out", seed_pages, "--persons", str(args.persons + args.persons // 10),
                            "--page-size", str(args.page_size), "--seed", str(args.seed + 1000)], check=True, stdout=subprocess.DEVNULL)
            seeded = [db, pg.fresh("reference")]
            for target in seeded:
                subprocess.run([os.path.abspath(args.ingot), "run", os.path.join(ROOT, "pipelines/people.yml"), "--pages", seed_pages,
                                "--db", target, "--no-archive", "--progress-interval", "0"], check=True, capture_output=True)
        cmd = [os.path.abspath(args.ingot), "run", yml, "--db", db, "--resume", "--archive-dir", os.path.join(work, "archives"),
               "--progress-interval", "0", "--batch-records", str(args.batch_records),
               "--commit-records", str(args.commit_records)]
        if args.bulk:
            cmd.append("--bulk")
        elif args.bulk_after_mib is not None:
            cmd += ["--bulk-after-mib", str(args.bulk_after_mib)]
        else:
            cmd.append("--no-bulk")
        kills, runs, finished = 0, 0, False
        # A staged PostgreSQL load keeps its staging file in TMPDIR: a killed job leaves it there,
        # its resume goes on in it, and the copy removes it.
        env = dict(os.environ, TMPDIR=work)
        if args.join:
            cmd = [os.path.abspath(args.ingot), "run", yml, "--db", db, "--join", "chaos", "--lease", "1", "--progress-interval", "0",
                   "--batch-records", str(args.batch_records), "--archive-dir", os.path.join(work, "archives")]
            if args.bulk:
                cmd.append("--bulk")
            if args.files:
                # Local pages: the jobs exchange their rows and write the parts at the run's end (a
                # job killed while it writes a part leaves its part file in TMPDIR, removed by the
                # job that finishes the run).
                local = open(os.path.join(ROOT, "pipelines/people.yml")).read()
                if args.replace:
                    local = local.replace("\nwrite: merge\n", "\nwrite: replace\n", 1)
                local_yml = os.path.join(work, "people-files.yml")
                open(local_yml, "w").write(local)
                cmd[2:3] = [local_yml, "--pages", pages]
            procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
                     for _ in range(args.join)]
            runs = args.join
            while procs:
                if kills < args.kills:
                    time.sleep(rng.uniform(0.05, args.max_delay))
                    alive = [p for p in procs if p.poll() is None]
                    if alive:
                        victim = alive[rng.randrange(len(alive))]
                        victim.send_signal(signal.SIGKILL)
                        victim.communicate()
                        procs.remove(victim)
                        kills += 1
                        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env))
                        runs += 1
                else:
                    time.sleep(0.05)
                for p in [p for p in procs if p.poll() is not None]:
                    _, err = p.communicate()
                    if p.returncode != 0:
                        print(json.dumps({"ok": False, "error": "ingot exited %d" % p.returncode, "stderr": err[-2000:]}))
                        return 1
                    procs.remove(p)
            finished = True
        while not finished:
            runs += 1
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            if kills < args.kills:
                time.sleep(rng.uniform(0.05, args.max_delay))
                if p.poll() is None:
                    p.send_signal(signal.SIGKILL)
                    kills += 1
            _, err = p.communicate()
            if p.returncode == 0:
                finished = True
            elif p.returncode not in (-signal.SIGKILL,):
                print(json.dumps({"ok": False, "error": "ingot exited %d" % p.returncode, "stderr": err[-2000:]}))
                return 1
            if runs > args.kills + 50:
                print(json.dumps({"ok": False, "error": "no run finished"}))
                return 1
        if pg:
            reference = seeded[1] if seeded else pg.fresh("reference")
            subprocess.run([os.path.abspath(args.ingot), "run", yml, "--db", reference, "--no-archive", "--progress-interval", "0"],
                           check=True, capture_output=True)
            got, want = bench.table_digest(pg, "chaos"), bench.table_digest(pg, "reference")
            counts = pg.psql("chaos", "SELECT (SELECT count(*) FROM person), (SELECT count(*) FROM dog), (SELECT count(*) FROM person_dogs)").stdout.strip()
            leftover = [f for f in os.listdir(work) if f.startswith("ingot-stage-") or f.startswith("ingot-part-")]
            # The keys and indexes, as the reference has them (a merge drops some and builds them again).
            keys = "SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes WHERE tablename IN ('person', 'dog', 'person_dogs')"
            same_keys = pg.psql("chaos", keys).stdout.strip() == pg.psql(reference.rsplit("/", 1)[-1], keys).stdout.strip()
            ok = got == want and not leftover and same_keys
            # A joined run counts every page once, whichever job committed it and however often
            # its jobs were killed; without a total, the first empty page among them.
            last_pages = "SELECT pages FROM _ingot_runs ORDER BY started_at DESC LIMIT 1"
            pages_counted = [pg.psql("chaos", last_pages).stdout.strip(), pg.psql(reference.rsplit("/", 1)[-1], last_pages).stdout.strip()]
            if args.untold:
                ok = ok and pages_counted[0] == pages_counted[1]
            deleted = pg.psql("chaos", "SELECT deleted FROM _ingot_runs ORDER BY started_at DESC LIMIT 1").stdout.strip()
            print(json.dumps({"ok": ok, "kills": kills, "runs": runs, "persons": args.persons, "backend": "postgresql", "jobs": args.join,
                              "bulk": args.bulk, "paged": args.paged, "untold": args.untold, "pages_counted_and_uninterrupted": pages_counted,
                              "tables": counts, "replace_deleted": deleted if args.replace else None, "same_as_uninterrupted": got == want, "same_keys": same_keys, "staging_files_left": leftover}))
            return 0 if ok else 1
        check = json.loads(subprocess.run([sys.executable, GEN, "--check", db, "--expected", os.path.join(pages, "expected.json")],
                                          capture_output=True, text=True).stdout)
        print(json.dumps({"ok": check["ok"], "kills": kills, "runs": runs, "persons": args.persons, "bulk": args.bulk,
                          "bulk_after_mib": args.bulk_after_mib, "got": check["got"]}))
        return 0 if check["ok"] else 1
    finally:
        if pg:
            pg.stop()
        server.stdin.close()
        server.terminate()
        server.wait()
        if args.keep:
            print("kept " + work, file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
