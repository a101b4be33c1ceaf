#!/usr/bin/env python3
"""make bench: people data sets through the release binary; medians of 3 runs.

Generates people-200k once (Benchmarks/people.py) into .build-bench/, then measures:
decode alone on one thread; `ingot run` over loose pages with all lanes, with 1 lane and without
the archive; the archive's size as a share of the raw bytes; `ingot replay` of that archive;
peak RSS (/usr/bin/time); pages of dense tiny records (peak RSS must follow the settings); hostile
shapes (a million rejections, a record of a million children, …) against their memory bounds.
a slow API (100 ms a page) with concurrent and serial pagination.
Ingot against its peers, paired: the DuckDB peer (Benchmarks/duckdb_peer.py) and the SQLite write
floor (Benchmarks/sqlite_floor.py). `--big` adds people-1M to that comparison and its ratio to
200k; `--huge` runs people-10M alone; `--only CASE` runs one case. Every database is
checked with people.py --check. Copy the output into docs/benchmarks.md.
"""
import argparse
import resource, glob, json, os, re, shutil, statistics, subprocess, sys, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEN = os.path.join(ROOT, "Benchmarks", "people.py")
BENCH = os.path.join(ROOT, ".build-bench")
PIPELINE = os.path.join(ROOT, "pipelines/people.yml")


def dataset(persons, page_size):
    data = os.path.join(BENCH, "people-%d-%d" % (persons, page_size))
    if not os.path.exists(os.path.join(data, "expected.json")):
        subprocess.run([sys.executable, GEN, "--out", data, "--persons", str(persons), "--page-size", str(page_size)],
                       check=True, stdout=subprocess.DEVNULL)
    return data, json.load(open(os.path.join(data, "expected.json")))


def timed(cmd, db, keep=False):
    if not keep:
        remove_db(db)
    p = subprocess.run(["/usr/bin/time", "-f", "rss_kb=%M"] + cmd + ["--db", db, "--progress-interval", "0"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("ingot failed:\n" + p.stderr[-2000:])
    summary = [l for l in p.stderr.splitlines() if "msg=run.summary" in l][-1]
    duration = float(re.search(r"duration_s=([0-9.]+)", summary).group(1))
    rss = int(re.search(r"rss_kb=(\d+)", p.stderr).group(1))
    archive = re.search(r"archive=(\S+)", summary)
    timed.summary = summary
    return duration, rss, archive.group(1) if archive else None


def refresh(ingot, data, expected, db, runs, url=None, label="SQLite"):
    """A cache refreshed: people-200k loaded, then the same pages again into the same database
    (paired: first load, rerun, full rerun; medians). The rerun leaves out the pages that are byte
    for byte the last run's (docs/pipelines.md, "Refreshes"): here all of them. The full rerun
    (--full-refresh) reads every page and writes only the rows whose values differ (the data set
    re-sends persons and dogs with other values within a run: those flip away and back)."""
    firsts, reruns, fulls = [], [], []
    for k in range(runs):
        target = url(k) if url else db
        firsts.append(timed([ingot, "run", PIPELINE, "--pages", data, "--no-archive"], target))
        reruns.append(timed([ingot, "run", PIPELINE, "--pages", data, "--no-archive"], target, keep=True))
        left_out = re.search(r"pages_unchanged=(\d+)", timed.summary)
        fulls.append(timed([ingot, "run", PIPELINE, "--pages", data, "--no-archive", "--full-refresh"], target, keep=True))
    counts = " ".join(re.search(r"(?<![.\w])%s=(\d+)" % key, timed.summary).group(0) for key in ("inserted", "updated", "unchanged"))
    first, rerun, full = (statistics.median(r[0] for r in rs) for rs in (firsts, reruns, fulls))
    ok = check(db, data) if not url else None
    print("refresh (%s): first load median %.2f s, rerun median %.2f s (pages left out: %s), rerun / first %.2f; "
          "full rerun (--full-refresh) %.2f s, / first %.2f  (full rerun %s; check ok=%s)" % (
              label, first, rerun, left_out.group(1) if left_out else 0, rerun / first, full, full / first, counts, ok))
    quiet_refresh(ingot, target, runs, url, label)
    if url:
        return
    changed_refresh(ingot, data, runs)
    # The full rerun staged (--bulk): the whole load folded first, so rows the pages change and
    # change back are not written at all; the stored rows read in one sweep.
    staged = []
    for _ in range(runs):
        timed([ingot, "run", PIPELINE, "--pages", data, "--no-archive"], db)
        staged.append(timed([ingot, "run", PIPELINE, "--pages", data, "--no-archive", "--bulk", "--full-refresh"], db, keep=True))
    counts = " ".join(re.search(r"(?<![.\w])%s=(\d+)" % key, timed.summary).group(0) for key in ("inserted", "updated", "unchanged"))
    rerun = statistics.median(r[0] for r in staged)
    print("refresh (%s, full rerun --bulk): rerun median %.2f s, rerun / first %.2f  (rerun %s; check ok=%s)" % (
        label, rerun, rerun / first, counts, check(db, data)))


def changed_refresh(ingot, data, runs):
    """A refresh where a few pages changed: people-200k loaded, then its pages again with one
    person renamed on page 120 and one on page 240 (the other pages linked, not copied). The rerun
    applies the changed pages and every page sharing a row with them, in turn (the data set's
    dogs are shared across the whole run); it must end where a full rerun ends."""
    changed = os.path.join(BENCH, "people-200k-changed")
    if not os.path.isdir(changed):
        os.makedirs(changed + ".tmp", exist_ok=True)
        for name in sorted(os.listdir(data)):
            if not name.endswith(".json"):
                continue
            path = os.path.join(data, name)
            if name in ("page-00120.json", "page-00240.json"):
                with open(path) as f:
                    text = f.read()
                with open(os.path.join(changed + ".tmp", name), "w") as f:
                    f.write(text.replace('"first_name":"', '"first_name":"Renamed ', 1))
            else:
                os.symlink(os.path.abspath(path), os.path.join(changed + ".tmp", name))
        os.rename(changed + ".tmp", changed)
    a, b = os.path.join(BENCH, "changed-a.db"), os.path.join(BENCH, "changed-b.db")
    firsts, reruns = [], []
    for _ in range(runs):
        firsts.append(timed([ingot, "run", PIPELINE, "--pages", data, "--no-archive"], a))
        reruns.append(timed([ingot, "run", PIPELINE, "--pages", changed, "--no-archive"], a, keep=True))
        left_out = re.search(r"pages_unchanged=(\d+)", timed.summary)
    timed([ingot, "run", PIPELINE, "--pages", data, "--no-archive"], b)
    timed([ingot, "run", PIPELINE, "--pages", changed, "--no-archive", "--full-refresh"], b, keep=True)
    same = sqlite_tables(a) == sqlite_tables(b)
    first, rerun = statistics.median(r[0] for r in firsts), statistics.median(r[0] for r in reruns)
    print("changed refresh (SQLite, 2 of 240 pages changed): first load median %.2f s, rerun median %.2f s (pages left out: %s), "
          "rerun / first %.2f  (tables as a full rerun leaves them: %s)" % (
              first, rerun, left_out.group(1) if left_out else 0, rerun / first, same))


def sqlite_tables(db):
    """Every table of the pipeline's (person, dog, person_dogs), sorted: to compare two databases."""
    import sqlite3
    with sqlite3.connect(db) as c:
        return {t: sorted(map(repr, c.execute('SELECT * FROM "%s"' % t))) for t in ("person", "dog", "person_dogs")}


def quiet_refresh(ingot, loaded, runs, url, label):
    """A refresh where nothing changed (docs/pipelines.md, "Refreshes"): people-200k's final state exported
    (`ingot export --format jsonl` of the database `loaded`), cut into pages of 1000, loaded into a
    fresh database, then loaded again (paired; medians). The rerun writes nothing."""
    pages = os.path.join(BENCH, "quiet-200k")
    if not os.path.isdir(pages):
        lines = subprocess.run([ingot, "export", PIPELINE, "--db", loaded, "--format", "jsonl"],
                               capture_output=True, text=True, check=True).stdout.splitlines()
        os.makedirs(pages + ".tmp", exist_ok=True)
        for k in range(0, len(lines), 1000):
            with open(os.path.join(pages + ".tmp", "page-%05d.json" % (k // 1000 + 1)), "w") as f:
                f.write('{"results": [' + ",".join(lines[k:k + 1000]) + "]}")
        os.rename(pages + ".tmp", pages)
    firsts, reruns = [], []
    for k in range(runs):
        target = url(100 + k) if url else os.path.join(BENCH, "quiet.db")
        firsts.append(timed([ingot, "run", PIPELINE, "--pages", pages, "--no-archive"], target))
        reruns.append(timed([ingot, "run", PIPELINE, "--pages", pages, "--no-archive"], target, keep=True))
    counts = " ".join(re.search(r"(?<![.\w])%s=(\d+)" % key, timed.summary).group(0) for key in ("inserted", "updated", "unchanged"))
    first, rerun = statistics.median(r[0] for r in firsts), statistics.median(r[0] for r in reruns)
    print("quiet refresh (%s): first load median %.2f s, rerun median %.2f s, rerun / first %.2f  (rerun %s)" % (
        label, first, rerun, rerun / first, counts))


def check(db, data):
    p = subprocess.run([sys.executable, GEN, "--check", db, "--expected", os.path.join(data, "expected.json")],
                       capture_output=True, text=True)
    return json.loads(p.stdout)["ok"]


def report(label, results, records, mb, ok):
    wall = statistics.median(r[0] for r in results)
    rss = max(r[1] for r in results) / 1024
    print("%-22s median %6.2f s  %8.0f records/s  %6.1f MB/s  peak RSS %4.0f MB  check ok=%s  (runs: %s)" % (
        label, wall, records / wall, mb / wall, rss, ok, ", ".join("%.2f" % r[0] for r in results)))
    return wall


# The cookbook's APIs as the fixture server serves them (InitTests drafts the same ones).
DRAFTED = ["/api/people/", "/stripe/v1/customers?limit=10", "/jira/rest/api/3/search?startAt=0&maxResults=3",
           "/github/repos/octocat/hello-world/issues?per_page=3", "/shopify/admin/api/2024-01/products.json?limit=2",
           "/notion/v1/users?page_size=3", "/reddit/r/swift/overview.json", "/pokeapi/api/v2/pokemon?offset=0&limit=10",
           "/zendesk/api/v2/tickets.json?per_page=2", "/wp/wp-json/wp/v2/posts?per_page=2", "/npm/left-pad",
           "/meteo/v1/forecast?latitude=52.52", "/twitter/1.1/followers/list.json",
           "/contentful/spaces/cfexample/environments/master/sync?initial=true",
           "/slack/api/conversations.history?channel=C1&limit=2", "/gitlab/api/v4/projects/278964/issues?per_page=3",
           "/zendesk/api/v2/tickets.json?include=users,groups&per_page=2", "/hn/v0/item/8952.json"]


def draft(ingot, data, expected, db, runs):
    """`ingot init URL --dry-run` against each cookbook API on the fixture server (127.0.0.1): the
    whole command, from its start to the draft printed (at most 3 pages read, the next page's
    request included; for a list of links, 3 of the detail pages it names too). Goal: every
    draft under a second."""
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests/Fixtures/server.py"), "--exit-on-eof"],
                              stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().split()[1])
        import time
        medians = {}
        for path in DRAFTED:
            walls = []
            for _ in range(runs):
                started = time.time()
                subprocess.run([ingot, "init", "http://127.0.0.1:%d%s" % (port, path), "--dry-run"], capture_output=True, check=True)
                walls.append(time.time() - started)
            medians[path] = statistics.median(walls)
        slowest = max(medians, key=medians.get)
        print("ingot init, %d cookbook APIs: median of the drafts %.3f s, slowest %.3f s (%s); goal < 1 s each" % (
            len(medians), statistics.median(medians.values()), medians[slowest], slowest.split("?")[0]))
    finally:
        server.stdin.close()
        server.wait()


def fetch(ingot, data, expected, db, runs):
    """Fetching people-200k from the fixture server on 127.0.0.1, page pagination, concurrency 1 vs 4."""
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests/Fixtures/server.py"), "--people", data, "--exit-on-eof"],
                              stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().split()[1])
        base = open(PIPELINE).read()
        for concurrency in (1, 4):
            yml = os.path.join(BENCH, "people-http-%d.yml" % concurrency)
            open(yml, "w").write(base.replace(
                '  files: {dir: samples/people, glob: "page-*.json"}',
                "  http:\n    url: http://127.0.0.1:%d/people/page\n    paginate: {page: {param: page, start: 1}}\n"
                "    concurrency: %d\n" % (port, concurrency)))
            for _ in range(runs):
                p = subprocess.run([ingot, "bench-fetch", yml], capture_output=True, text=True, check=True)
                print("concurrency %d, fetch alone: %s" % (concurrency, p.stdout.strip()))
            results = [timed([ingot, "run", yml, "--no-archive"], db) for _ in range(runs)]
            wall = report("HTTP, concurrency %d" % concurrency, results, expected["records"], expected["bytes"] / 1e6, check(db, data))
            print("  %.0f pages/s" % ((expected["pages"] + 1) / wall))
    finally:
        server.stdin.close()
        server.wait()


def latency(ingot, data, expected, db, runs):
    """A slow API: the fixture server answers every page after 100 ms. 240 pages with page-number
    pagination at concurrency 8 should take about 240 x 0.1 s / 8 = 3 s (the transfers overlap);
    next-URL pagination, serial by nature, about 24 s."""
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests/Fixtures/server.py"), "--people", data,
                               "--delay", "0.1", "--exit-on-eof"],
                              stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().split()[1])
        base = open(PIPELINE).read()
        cases = [("page, concurrency 8", "page", "{page: {param: page, start: 1}}\n    concurrency: 8", runs),
                 ("next URL (serial)", "next", "{next_url: next}", 1)]
        for label, path, paginate, n in cases:
            yml = os.path.join(BENCH, "people-latency-%s.yml" % path)
            open(yml, "w").write(base.replace(
                '  files: {dir: samples/people, glob: "page-*.json"}',
                "  http:\n    url: http://127.0.0.1:%d/people/%s\n    paginate: %s\n" % (port, path, paginate)))
            if path == "page":  # the server renders each page once: warm it up untimed
                subprocess.run([ingot, "bench-fetch", yml], capture_output=True, check=True)
            results = [timed([ingot, "run", yml, "--no-archive"], db) for _ in range(n)]
            report("100 ms/page, " + label, results, expected["records"], expected["bytes"] / 1e6, check(db, data))
    finally:
        server.stdin.close()
        server.wait()


class Postgres:
    """A throwaway PostgreSQL 15 server (Debian's binaries) in .build-bench/pg, on 127.0.0.1 and a free
    port, as `nobody` when run as root (PostgreSQL refuses root); stopped by stop()."""
    BIN = "/usr/lib/postgresql/15/bin"
    CPUACCT = "/sys/fs/cgroup/cpuacct"

    def __init__(self, settings=()):
        import socket, time
        self.dir = os.path.join(BENCH, "pg")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.as_nobody = os.getuid() == 0
        if self.as_nobody:
            subprocess.run(["chown", "-R", "nobody", self.dir], check=True)
        self._run([self.BIN + "/initdb", "-D", self.dir + "/data", "-A", "trust", "-U", "postgres", "--no-sync"])
        log = open(os.path.join(self.dir, "log"), "w")
        # As root, the server goes in a cpuacct group of its own: its CPU is then every process
        # it ever ran, backends that ended included, whether or not the postmaster reaped them yet.
        self.group = None
        if self.as_nobody and os.access(self.CPUACCT, os.W_OK):
            self.group = os.path.join(self.CPUACCT, "ingot-bench-pg-%d" % self.port)
            os.makedirs(self.group, exist_ok=True)
        procs = self.group and os.path.join(self.group, "cgroup.procs")
        self.server = subprocess.Popen(self._cmd([self.BIN + "/postgres", "-D", self.dir + "/data", "-k", self.dir, "-h", "127.0.0.1",
                                                  "-p", str(self.port), "-c", "shared_buffers=256MB", "-c", "max_wal_size=4GB"]
                                                 + [a for kv in settings for a in ("-c", kv)]),
                                       stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                       preexec_fn=(lambda: open(procs, "w").write(str(os.getpid()))) if procs else None)
        for _ in range(600):
            if subprocess.run(["psql", self.url("postgres"), "-c", "select 1"], capture_output=True).returncode == 0:
                return
            time.sleep(0.05)
        sys.exit("PostgreSQL did not start: " + open(os.path.join(self.dir, "log")).read()[-2000:])

    def _cmd(self, cmd):
        return ["runuser", "-u", "nobody", "--"] + cmd if self.as_nobody else cmd

    def _run(self, cmd):
        subprocess.run(self._cmd(cmd), check=True, capture_output=True)

    def url(self, db):
        return "postgresql://postgres@127.0.0.1:%d/%s" % (self.port, db)

    def psql(self, db, sql, **kw):
        return subprocess.run(["psql", self.url(db), "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql], check=True, capture_output=True, text=True, **kw)

    def fresh(self, name):
        self.psql("postgres", "DROP DATABASE IF EXISTS %s" % name)
        self.psql("postgres", "CREATE DATABASE %s" % name)
        return self.url(name)

    def digest_and_drop(self, name):
        """`table_digest` of database `name`, which is then dropped: a scale-out case measures each
        run's server CPU between two reads of `cpu`, and an earlier run's database left behind
        is work for autovacuum in a later run's window (its tables vacuumed and analyzed
        there: one single run measured 1.42 s and 2.92 s of server CPU in one sitting that way)."""
        digest = table_digest(self, name)
        self.psql("postgres", "DROP DATABASE IF EXISTS %s" % name)
        return digest

    def settle(self):
        """Waits (up to 10 s) until no client backend is left: a job's backend goes on for a moment
        after the job exits, and its CPU is the run's."""
        import time
        for _ in range(200):
            left = self.psql("postgres", "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()").stdout.strip()
            if left == "0":
                return
            time.sleep(0.05)

    def cpu(self, checkpoint=False):
        """The server's CPU seconds so far, once its backends ended: its cpuacct group's usage where
        it has one (every process it ran); otherwise the postmaster's own and its reaped backends',
        and its living children's (the background writers, the backends still connected).
        `checkpoint`: after a CHECKPOINT, so that a run measured between two such reads pays for
        writing out its own dirty pages and for no earlier run's (a timed checkpoint landing in
        one run of a case, every five minutes, wrote up to the 256 MB of shared buffers there)."""
        self.settle()
        if checkpoint:
            self.psql("postgres", "CHECKPOINT")
        if self.group:
            return int(open(os.path.join(self.group, "cpuacct.usage")).read()) / 1e9
        tick = os.sysconf("SC_CLK_TCK")
        def fields(pid):
            text = open("/proc/%d/stat" % pid).read()
            return text[text.rindex(")") + 2:].split()
        try:
            main = int(open(os.path.join(self.dir, "data", "postmaster.pid")).readline())
            f = fields(main)
            total = sum(int(x) for x in f[11:15])
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    try:
                        g = fields(int(entry))
                    except OSError:
                        continue
                    if int(g[1]) == main:
                        total += int(g[11]) + int(g[12])
            return total / tick
        except (OSError, ValueError):
            return float("nan")

    def stop(self):
        # A fast shutdown, to the postmaster itself (under root, the child of runuser).
        subprocess.run(["pkill", "-INT", "-f", "postgres -D " + self.dir + "/data"])
        self.server.wait()
        if self.group:
            import time
            for _ in range(100):  # the server's last processes leave the group as they exit
                try:
                    os.rmdir(self.group)
                    break
                except OSError:
                    time.sleep(0.05)


PEER_SQL = """
CREATE TEMP TABLE raw (seq bigserial, doc jsonb);
\\copy raw (doc) FROM '%(jsonl)s' WITH (FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')
CREATE TEMP TABLE rec AS SELECT seq, (doc->>'id')::bigint AS id, doc FROM raw;
INSERT INTO person (id, first_name, last_name, birthday, email, country, score, active, updated_at, tags)
SELECT id,
  (array_agg(doc->>'first_name' ORDER BY seq DESC) FILTER (WHERE doc ? 'first_name'))[1],
  (array_agg(doc->>'last_name' ORDER BY seq DESC) FILTER (WHERE doc ? 'last_name'))[1],
  (array_agg(doc->>'birthday' ORDER BY seq DESC) FILTER (WHERE doc ? 'birthday'))[1]::date,
  (array_agg(doc->>'email' ORDER BY seq DESC) FILTER (WHERE doc ? 'email'))[1],
  (array_agg(doc#>>'{origin,country,name}' ORDER BY seq DESC) FILTER (WHERE doc ? 'origin'))[1],
  (array_agg(doc->>'score' ORDER BY seq DESC) FILTER (WHERE doc ? 'score'))[1]::double precision,
  (array_agg(doc->>'active' ORDER BY seq DESC) FILTER (WHERE doc ? 'active'))[1]::boolean,
  (array_agg(doc->>'updated_at' ORDER BY seq DESC) FILTER (WHERE doc ? 'updated_at'))[1]::timestamptz,
  (array_agg(NULLIF(doc->'tags', 'null'::jsonb) ORDER BY seq DESC) FILTER (WHERE doc ? 'tags'))[1]
FROM rec GROUP BY id
ON CONFLICT (id) DO NOTHING;
CREATE TEMP TABLE dogrec AS
  SELECT r.seq, x.ord, (x.d->>'id')::bigint AS id, x.d FROM rec r, jsonb_array_elements(r.doc->'dogs') WITH ORDINALITY AS x(d, ord)
  WHERE jsonb_typeof(r.doc->'dogs') = 'array' AND jsonb_typeof(x.d) = 'object';
INSERT INTO dog (id, name, breed)
SELECT id,
  (array_agg(d->>'name' ORDER BY seq DESC, ord DESC) FILTER (WHERE d ? 'name'))[1],
  (array_agg(d->>'breed' ORDER BY seq DESC, ord DESC) FILTER (WHERE d ? 'breed'))[1]
FROM dogrec GROUP BY id
ON CONFLICT (id) DO NOTHING;
INSERT INTO person_dogs (person_id, dog_id)
SELECT DISTINCT l.id, (x.d->>'id')::bigint
FROM (SELECT DISTINCT ON (id) id, doc FROM rec WHERE doc ? 'dogs' ORDER BY id, seq DESC) l, jsonb_array_elements(l.doc->'dogs') AS x(d)
WHERE jsonb_typeof(l.doc->'dogs') = 'array'
ON CONFLICT DO NOTHING;
"""


def table_digest(pg, db):
    # score + 0 makes -0 and 0 one value (jsonb numbers, which the SQL peer goes through, have no -0).
    return pg.psql(db, "SELECT (SELECT md5(string_agg(row(id, first_name, last_name, birthday, email, country, score + 0, active, "
                       "updated_at, tags)::text, ',' ORDER BY id)) FROM person t), "
                       "(SELECT md5(string_agg(row(id, name, breed)::text, ',' ORDER BY id)) FROM dog t), "
                       "(SELECT md5(string_agg(t::text, ',' ORDER BY person_id, dog_id)) FROM person_dogs t)").stdout.strip()


def copy_floor(ingot, pg, data, expected, runs, label, bulk=None, batch=None):
    """One job's defaults against the COPY floor (the same final rows, dumped from a first run,
    copied with psql's \\copy into an empty schema), paired run by run into fresh databases on
    one server, so that the machine's drift hits both: their medians and the median of the pairs'
    ratios (goal <= 1.1). `bulk`, `batch`: the other modes' medians, also given as ratios."""
    import time
    tables = ["person", "dog", "person_dogs"]
    dump = os.path.join(BENCH, "pg-floor")
    os.makedirs(dump, exist_ok=True)
    reference = pg.fresh("floorref")
    timed([ingot, "run", PIPELINE, "--pages", data, "--no-archive"], reference)
    counts = pg.psql("floorref", "SELECT (SELECT count(*) FROM person), (SELECT count(*) FROM dog), (SELECT count(*) FROM person_dogs)").stdout.strip()
    if counts != "%d|%d|%d" % (expected["persons"], expected["dogs"], expected["links"]):
        sys.exit("%s: persons|dogs|links %s, not as expected" % (label, counts))
    for t in tables:
        pg.psql("floorref", "\\copy %s TO '%s/%s.tsv'" % (t, dump, t))
    schema = subprocess.run([ingot, "schema", PIPELINE, "--db", pg.url("x")], capture_output=True, text=True, check=True).stdout
    walls, floors = [], []
    for k in range(runs):
        walls.append(timed([ingot, "run", PIPELINE, "--pages", data, "--no-archive"], pg.fresh("ingot%d" % k))[0])
        url = pg.fresh("floor%d" % k)
        subprocess.run(["psql", url, "-qAt", "-v", "ON_ERROR_STOP=1"], input=schema, text=True, check=True, capture_output=True)
        started = time.time()
        for t in tables:
            pg.psql("floor%d" % k, "\\copy %s FROM '%s/%s.tsv'" % (t, dump, t))
        floors.append(time.time() - started)
    same = table_digest(pg, "ingot0") == table_digest(pg, "floorref")
    wall, floor = statistics.median(walls), statistics.median(floors)
    ratios = [w / f for w, f in zip(walls, floors)]
    others = "".join(", %s / floor %.2f" % (name, m / floor) for name, m in (("--bulk", bulk), ("--no-bulk", batch)) if m)
    print("%s, PostgreSQL, 1 job against the COPY floor (psql \\copy per table), paired: Ingot %.2f s, floor %.2f s; "
          "Ingot / floor %.2f (pairs: %s; goal <= 1.1)%s; same tables: %s" % (
              label, wall, floor, statistics.median(ratios), ", ".join("%.2f" % r for r in ratios), others, same))
    for name in ["floorref"] + ["ingot%d" % k for k in range(runs)] + ["floor%d" % k for k in range(runs)]:
        pg.psql("postgres", "DROP DATABASE IF EXISTS %s" % name)


def postgres(ingot, data, expected, db, runs):
    """people-200k into PostgreSQL (a throwaway server sharing the 2 cores), one job, against two peers:
    the fastest hand-written way (psql: COPY the records into a staging table, then one set-based INSERT per
    table with the same merge rules: later records win key by key, absent keys keep, links replaced), and
    the COPY floor (the same final rows copied into an empty schema)."""
    import time
    pg = Postgres()
    try:
        results, staged, batches = [], [], []
        for k in range(runs):
            # Paired: the defaults (a first load from local pages in no identity order: staged from
            # its first batch), --bulk, batch by batch (--no-bulk, as joined jobs write).
            results.append(timed([ingot, "run", PIPELINE, "--pages", data, "--no-archive"], pg.fresh("bench%d" % k)))
            staged.append(timed([ingot, "run", PIPELINE, "--pages", data, "--no-archive", "--bulk"], pg.fresh("bulk%d" % k)))
            batches.append(timed([ingot, "run", PIPELINE, "--pages", data, "--no-archive", "--no-bulk"], pg.fresh("batch%d" % k)))
        wall = report("PostgreSQL, 1 job", results, expected["records"], expected["bytes"] / 1e6, None)
        bulk = report("PostgreSQL, 1 job, --bulk", staged, expected["records"], expected["bytes"] / 1e6, None)
        batch = report("PostgreSQL, 1 job, --no-bulk", batches, expected["records"], expected["bytes"] / 1e6, None)
        print("  --bulk / defaults: %.2f; --no-bulk / defaults: %.2f; same tables: %s" % (
            bulk / wall, batch / wall, table_digest(pg, "bulk0") == table_digest(pg, "bench0") == table_digest(pg, "batch0")))
        refresh(ingot, data, expected, db, runs, url=lambda k: pg.fresh("refresh%d" % k), label="PostgreSQL")
        counts = pg.psql("bench0", "SELECT (SELECT count(*) FROM person), (SELECT count(*) FROM dog), (SELECT count(*) FROM person_dogs)").stdout.strip()
        ok = counts == "%d|%d|%d" % (expected["persons"], expected["dogs"], expected["links"])
        print("  persons|dogs|links %s, as expected: %s" % (counts, ok))
        schema = subprocess.run([ingot, "schema", PIPELINE, "--db", pg.url("x")], capture_output=True, text=True, check=True).stdout
        copy_floor(ingot, pg, data, expected, runs, "people-200k", bulk=bulk, batch=batch)
        # The SQL peer: records as JSON lines (page order), COPY, set-based INSERTs.
        jsonl = os.path.join(BENCH, "people-200k.jsonl")
        if not os.path.exists(jsonl):
            with open(jsonl, "w") as out:
                for name in sorted(f for f in os.listdir(data) if f.startswith("page-")):
                    for record in json.load(open(os.path.join(data, name)))["results"]:
                        out.write(json.dumps(record, separators=(",", ":")) + "\n")
        # Joined runs (--join): N jobs at once sharing one run; wall time from the first start to
        # the last exit. The jobs and the server share the machine's cores.
        for jobs in (1, 2):
            walls = []
            for k in range(runs):
                url = pg.fresh("join%d_%d" % (jobs, k))
                started = time.time()
                procs = [subprocess.Popen([ingot, "run", PIPELINE, "--pages", data, "--db", url, "--join", "bench",
                                           "--no-archive", "--progress-interval", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                         for _ in range(jobs)]
                for proc in procs:
                    _, err = proc.communicate()
                    if proc.returncode != 0:
                        sys.exit("joined ingot failed:\n" + err[-2000:])
                walls.append(time.time() - started)
            joined = statistics.median(walls)
            same = table_digest(pg, "join%d_0" % jobs) == table_digest(pg, "bench0")
            print("PostgreSQL, %d joined job%s  median %6.2f s  %8.0f records/s  (runs: %s); same tables as 1 job: %s; / 1 job: %.2f, / 1 job batch by batch: %.2f" % (
                jobs, "" if jobs == 1 else "s", joined, expected["records"] / joined, ", ".join("%.2f" % w for w in walls), same,
                joined / wall, joined / batch))
        peers = []
        for k in range(runs):
            url = pg.fresh("peer%d" % k)
            subprocess.run(["psql", url, "-qAt", "-v", "ON_ERROR_STOP=1"], input=schema, text=True, check=True, capture_output=True)
            started = time.time()
            subprocess.run(["psql", url, "-qAt", "-v", "ON_ERROR_STOP=1", "-1"], input=PEER_SQL % {"jsonl": jsonl}, text=True,
                           check=True, capture_output=True)
            peers.append(time.time() - started)
        peer = statistics.median(peers)
        same = table_digest(pg, "peer0") == table_digest(pg, "bench0")
        print("SQL peer (psql: COPY + set-based INSERT) median %.2f s (runs: %s); same tables as Ingot's: %s; Ingot / peer: %.2f" % (
            peer, ", ".join("%.2f" % p for p in peers), same, wall / peer))
    finally:
        pg.stop()


DENSE_PIPELINE = """version: 1
name: dense
records: results
root: item
entities:
  item:
    identity: id
    attributes: {id: integer}
"""


def rss_run(cmd, status=0, cwd=None):
    """Runs `cmd` under /usr/bin/time: (wall seconds, peak RSS in KiB). An exit status other than
    `status` ends the benchmark."""
    p = subprocess.run(["/usr/bin/time", "-f", "wall=%e rss_kb=%M"] + cmd, capture_output=True, text=True, cwd=cwd)
    if p.returncode != status:
        sys.exit("%s exited with %d, not %d:\n%s" % (cmd[0], p.returncode, status, p.stderr[-2000:]))
    wall, rss = re.findall(r"wall=([0-9.]+) rss_kb=(\d+)", p.stderr)[-1]
    return float(wall), int(rss)


def pip_ready(module, pinned, what):
    """`module` importable, installed from PyPI at `pinned` when missing; `what` is skipped, and
    says so, when the install fails."""
    try:
        __import__(module)
        return True
    except ImportError:
        p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", pinned], capture_output=True, text=True)
        if p.returncode != 0:
            print("%s skipped: pip install %s failed: %s" % (what, pinned, p.stderr.strip()[-300:]))
        return p.returncode == 0


def parse_floor(data):
    """Seconds to read and parse every page with simdjson on every core (Benchmarks/parse_floor.py)."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "Benchmarks", "parse_floor.py"), "--pages", data],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout)["seconds"]


def peers(ingot, data, expected, db, runs, label="people-200k"):
    """Ingot, the DuckDB peer (Benchmarks/duckdb_peer.py) and the SQLite write floor
    (Benchmarks/sqlite_floor.py: Ingot's final rows copied into a new database), paired: each
    round runs the three one after the other (A B C A B C), so a slow spell hits all three.
    Whole-process wall time and peak RSS; every database checked."""
    archives = os.path.join(BENCH, "archives")
    duck_db, floor_db = os.path.join(BENCH, "duckdb.db"), os.path.join(BENCH, "floor.db")
    have_duck = pip_ready("duckdb", "duckdb==1.4.4", "DuckDB peers")
    bulk_db = os.path.join(BENCH, "bulk.db")
    rows = {"ingot": [], "bulk": [], "duckdb": [], "duckdb_t": [], "floor": []}
    have_simdjson = pip_ready("simdjson", "pysimdjson==6.0.2", "pipeline floor")
    parses = []
    duck_t_db = os.path.join(BENCH, "duckdb-transform.db")
    for _ in range(runs):
        for target in (db, bulk_db):
            shutil.rmtree(archives, ignore_errors=True)
            remove_db(target)
            rows["ingot" if target == db else "bulk"].append(rss_run(
                [ingot, "run", PIPELINE, "--pages", data, "--archive-dir", archives, "--db", target, "--progress-interval", "0"]
                + (["--bulk"] if target == bulk_db else [])))
        if have_duck:
            # Two formulations of the same ingest (Benchmarks/duckdb_peer.py --read): Ingot is held
            # to the faster of the pair, round by round.
            rows["duckdb"].append(rss_run([sys.executable, os.path.join(ROOT, "Benchmarks", "duckdb_peer.py"),
                                           "--pages", data, "--db", duck_db]))
            rows["duckdb_t"].append(rss_run([sys.executable, os.path.join(ROOT, "Benchmarks", "duckdb_peer.py"),
                                             "--pages", data, "--db", duck_t_db, "--read", "transform"]))
        rows["floor"].append(rss_run([sys.executable, os.path.join(ROOT, "Benchmarks", "sqlite_floor.py"),
                                      "--from", db, "--db", floor_db]))
        if have_simdjson:
            parses.append(parse_floor(data))
    shutil.rmtree(archives, ignore_errors=True)
    ok = {"ingot": check(db, data), "bulk": check(bulk_db, data), "duckdb": check(duck_db, data) if have_duck else None,
          "duckdb_t": check(duck_t_db, data) if have_duck else None, "floor": check(floor_db, data)}
    if have_duck:
        rows["fastest_duckdb"] = [min(a, b) for a, b in zip(rows["duckdb"], rows["duckdb_t"])]
    med = {k: (statistics.median(w for w, _ in v), max(r for _, r in v) / 1024) for k, v in rows.items() if v}
    print("%s, paired x%d (archive on): Ingot %.2f s (%.0f MiB) | Ingot --bulk %.2f s (%.0f MiB) | DuckDB peers: json %s, "
          "transform %s | SQLite floor %.2f s  check ok=%s" % (
              label, runs, med["ingot"][0], med["ingot"][1], med["bulk"][0], med["bulk"][1],
              "%.2f s (%.0f MiB)" % med["duckdb"] if "duckdb" in med else "-",
              "%.2f s (%.0f MiB)" % med["duckdb_t"] if "duckdb_t" in med else "-", med["floor"][0], ok))
    ratios = lambda a, b: statistics.median(x[0] / y[0] for x, y in zip(rows[a], rows[b]))
    for run in ("ingot", "bulk"):
        name = "Ingot" if run == "ingot" else "Ingot --bulk"
        if "duckdb" in med:
            print("  %s: the faster DuckDB peer / it %.2f (goal >= 2); it / floor %.2f" % (
                name, ratios("fastest_duckdb", run), ratios(run, "floor")))
        if parses:
            # The pipeline floor: the pages parsed on every core, then the final rows written.
            pipeline = [p + f[0] for p, f in zip(parses, rows["floor"])]
            print("  %s / pipeline floor (simdjson parse %.2f s on every core + write floor %.2f s) %.2f (goal <= 1.5)" % (
                name, statistics.median(parses), med["floor"][0],
                statistics.median(x[0] / y for x, y in zip(rows[run], pipeline))))
        else:
            print("  %s / floor %.2f (goal <= 1.5)" % (name, ratios(run, "floor")))
    return med["ingot"][0], med["bulk"][0]


def huge(ingot, runs):
    """people-10M (12M records, about 3.9 GB of pages; generated once, 15 minutes to an hour): one
    run with the defaults (the load turns staged once its database outgrows the page cache), one
    with --bulk, each against people-200k's time measured the same way just before it (linear:
    50x). Batch by batch throughout (--no-bulk) took 738 s (docs/performance-notes.md): not rerun."""
    small, _ = dataset(200000, 1000)
    big, exp = dataset(10000000, 1000)
    db = os.path.join(BENCH, "huge.db")

    def run(pages, bulk):
        remove_db(db)
        return rss_run([ingot, "run", PIPELINE, "--pages", pages, "--no-archive", "--db", db, "--progress-interval", "0"]
                       + (["--bulk"] if bulk else []))

    for bulk in (False, True):
        name = "--bulk" if bulk else "defaults"
        base = statistics.median(run(small, bulk)[0] for _ in range(3))
        wall, rss = run(big, bulk)
        print("people-10M (%s, no archive): %.1f s, %.0f records/s, peak RSS %.0f MiB; people-200k %.2f s: ratio %.1f "
              "(linear 50, goal <= 55)  check ok=%s" % (name, wall, exp["records"] / wall, rss / 1024, base, wall / base, check(db, big)))
    remove_db(db)


def phases(ingot, db, runs, sizes=(200000, 1000000)):
    """Where a run's time goes, phase by phase (people-200k and people-1M; with --huge, people-10M
    too): the process's user and system CPU, page faults and block I/O (/proc/PID/stat and io)
    read as each phase's log line arrives — opening (schema, run row), the stage phase (parse,
    map, fold, sort, the stage file written), the merge (runs read and folded, the rows and links
    copied, the index built), the end (commit, checkpoint, summary). No archive, as --huge runs."""
    marks = [("bulk.started", "open"), ("bulk.merging", "stage"), ("bulk.merged", "merge"), ("run.summary", "end")]
    tick = os.sysconf("SC_CLK_TCK")

    def sample(pid):
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/%d/io" % pid) as f:
            io = dict(line.split(": ") for line in f.read().splitlines())
        return (time.monotonic(), int(fields[11]) / tick, int(fields[12]) / tick, int(fields[7]), int(fields[9]),
                int(io["read_bytes"]), int(io["write_bytes"]))

    for persons in sizes:
        data, _ = dataset(persons, 1000)
        label = "people-%s" % ({200000: "200k", 1000000: "1M", 10000000: "10M"}.get(persons) or persons)
        rows = []
        for _ in range(runs if persons < 10000000 else 1):
            remove_db(db)
            p = subprocess.Popen([ingot, "run", PIPELINE, "--pages", data, "--no-archive", "--db", db, "--progress-interval", "0"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            taken = [("start", sample(p.pid))]
            for line in p.stderr:
                for msg, name in marks:
                    if "msg=%s " % msg in line:
                        try:
                            taken.append((name, sample(p.pid)))
                        except OSError:
                            pass
            _, status, usage = os.wait4(p.pid, 0)
            end = time.monotonic()
            if status != 0:
                sys.exit("%s: ingot exited with %d" % (label, status))
            rows.append((taken, end, usage.ru_maxrss))
        # The run whose wall is the median; the last run's database checked.
        ok = check(db, data)
        rows.sort(key=lambda r: r[1] - r[0][0][1][0])
        taken, end, rss = rows[len(rows) // 2]
        print("%s, no archive, phase by phase (%d run%s, the median's): wall %.2f s, peak %.0f MiB  check ok=%s" % (
            label, len(rows), "" if len(rows) == 1 else "s", end - taken[0][1][0], rss / 1024, ok))
        print("  %-6s %8s %8s %8s %10s %8s %9s %9s" % ("phase", "wall s", "user s", "sys s", "minflt", "majflt", "read MB", "write MB"))
        for (_, a), (name, b) in zip(taken, taken[1:]):
            d = [y - x for x, y in zip(a, b)]
            print("  %-6s %8.2f %8.2f %8.2f %10d %8d %9.1f %9.1f" % (name, d[0], d[1], d[2], d[3], d[4], d[5] / 1e6, d[6] / 1e6))
    remove_db(db)


def remove_db(db):
    # With a staged load's file beside it (<db>.stage.<pipeline>, gone once merged; a stopped load leaves it).
    for suffix in ("", "-wal", "-shm", "-journal"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    for stage in glob.glob(glob.escape(db) + ".stage*"):
        os.remove(stage)


def dense(ingot, db, runs):
    """Hostile density: four pages of 60 MiB of {"id":n} records (16.4 million records). Peak RSS must
    follow the settings (docs/concurrency.md), not the number of records in a page."""
    data = os.path.join(BENCH, "dense")
    if not os.path.exists(os.path.join(data, "page-3.json")):
        os.makedirs(data, exist_ok=True)
        n = 0
        for p in range(4):
            with open(os.path.join(data, "page-%d.json" % p), "w") as out:
                out.write('{"results":[')
                size, first = 0, True
                while size < 60 << 20:
                    chunk = ",".join('{"id":%d}' % k for k in range(n, n + 100000))
                    n += 100000
                    size += len(chunk) + 1
                    out.write(("" if first else ",") + chunk)
                    first = False
                out.write("]}")
    yml = os.path.join(BENCH, "dense.yml")
    open(yml, "w").write(DENSE_PIPELINE)
    total = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))
    results = [timed([ingot, "run", yml, "--pages", data, "--no-archive"], db) for _ in range(runs)]
    wall = statistics.median(r[0] for r in results)
    rss = max(r[1] for r in results) / 1024
    print("dense pages (4 x 60 MiB of {\"id\":n}): median %.2f s, peak RSS %.0f MB, %.1f MB/s" % (wall, rss, total / 1e6 / wall))


BOUNDS_ITEMS = """version: 1
name: bounds
source: {files: {dir: pages%s}}
root: item
entities:
  item: {identity: id, attributes: {id: integer, name: string}}
"""

BOUNDS_OWNERS = """version: 1
name: owners
source: {files: {dir: pages}}
root: owner
entities:
  owner:
    identity: id
    attributes: {id: integer}
    relationships:
      children: {to: child, many: true, owned: true}
      tags: {to: tag, many: true}
  child: {attributes: {n: integer}}
  tag: {identity: id, attributes: {id: integer}}
"""

BOUNDS_FOR_EACH = """version: 1
name: fe
defaults: {http: {url: "http://127.0.0.1:1/api/", retry: {attempts: 1, base_delay_ms: 1, max_delay_ms: 1}, timeout_s: 2}}
resources:
  - {name: list, source: {files: {dir: pages, glob: "*.json"}}, records: results}
  - {name: detail, for_each: {resource: list, path: "items/{id}", with: {listed_as: name}}, records: ".", root: item}
entities:
  item: {identity: id, attributes: {id: integer, listed_as: string}}
"""


def owners_page(records, key, count, element):
    """`[{"id": 1, "KEY": [element(0), …]}, …]`: `records` owners of `count` elements each."""
    return "[" + ",".join('{"id":%d,"%s":[%s]}' % (1 + r, key, ",".join(element(k) for k in range(count)))
                          for r in range(records)) + "]"


def bounds(ingot, db, runs):
    """Hostile shapes against the memory bounds docs/reliability.md promises (hostile input):
    each case is one run of the release binary over one page made here; its exit status, what
    it stored and its peak RSS are checked, and a case over its bound ends the benchmark."""
    cases = [
        # (name, pipeline, page file, page text, extra arguments, exit status, bound MiB, check SQL, expected)
        ("a page of a million {} (3 MB)", BOUNDS_ITEMS % "", "p.json",
         lambda: "[" + ",".join(["{}"] * 1000000) + "]", ["--lanes", "2"], 3, 160,
         "SELECT count(*) FROM _ingot_rejects", "10000"),
        ("a million lines that are not JSON", BOUNDS_ITEMS % ', glob: "*.jsonl", format: jsonl', "p.jsonl",
         lambda: "x\n" * 1000000, ["--lanes", "2"], 3, 160, "SELECT count(*) FROM _ingot_rejects", "10000"),
        ("one record of a million owned children (11 MB)", BOUNDS_OWNERS, "p.json",
         lambda: owners_page(1, "children", 1000000, lambda k: '{"n":%d}' % k)[:-1] + ',{"id":2,"children":[{"n":1}],"tags":[7]}]',
         ["--lanes", "2"], 0, 160, "SELECT coding_path FROM _ingot_rejects", "[0].children[49999]"),
        ("one record of a million bare identities (7 MB)", BOUNDS_OWNERS, "p.json",
         lambda: owners_page(1, "tags", 1000000, str), ["--lanes", "2"], 3, 160,
         "SELECT coding_path FROM _ingot_rejects", "[0].tags[99999]"),
        ("500 records of a thousand children (5 MB page)", BOUNDS_OWNERS, "p.json",
         lambda: owners_page(500, "children", 1000, lambda k: '{"n":%d}' % k), ["--lanes", "2", "--no-bulk"], 0, 320,
         "SELECT count(*) || ' ' || sum(n) FROM child", "500000 %d" % (500 * 999 * 500)),
        ("a for_each over 300,000 parents", BOUNDS_FOR_EACH, "list.json",
         lambda: '{"results": [' + ", ".join('{"id": %d, "name": "item-%d"}' % (k, k) for k in range(300000)) + "]}",
         [], 75, 120, None, None),
    ]
    import sqlite3
    over = []
    print("hostile shapes against their memory bounds (release build, peak RSS of %d run%s):" % (runs, "" if runs == 1 else "s"))
    for name, pipeline, page, text, extra, status, bound, sql, expected in cases:
        work = os.path.join(BENCH, "bounds")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(os.path.join(work, "pages"))
        open(os.path.join(work, "pages", page), "w").write(text())
        yml = os.path.join(work, "p.yml")
        open(yml, "w").write(pipeline)
        peaks, walls = [], []
        for _ in range(runs):
            remove_db(db)
            wall, rss = rss_run([ingot, "run", yml, "--db", db, "--no-archive"] + extra, status=status, cwd=work)
            if sql:
                got = str(sqlite3.connect(db).execute(sql).fetchone()[0])
                if got != expected:
                    sys.exit("%s: %s gave %s, expected %s" % (name, sql, got, expected))
            peaks.append(rss / 1024)
            walls.append(wall)
        peak = max(peaks)
        print("  %-50s %6.1f s  peak %4.0f MiB  bound %3d MiB  %s" % (name, statistics.median(walls), peak, bound, "ok" if peak < bound else "OVER"))
        if peak >= bound:
            over.append(name)
    shutil.rmtree(os.path.join(BENCH, "bounds"), ignore_errors=True)
    remove_db(db)
    if over:
        sys.exit("over their memory bound: " + ", ".join(over))


class CPUQuota:
    """Confines each job to `share` of a core: a cgroup v1 CPU group per job (`cpu.cfs_quota_us`)
    when this runs as root on a machine with /sys/fs/cgroup/cpu; otherwise every job is pinned to
    one core with taskset (no quota: say so), so that a job stands for one small machine."""
    ROOT = "/sys/fs/cgroup/cpu"

    def __init__(self, share):
        self.share = share
        self.cgroups = os.getuid() == 0 and os.access(self.ROOT, os.W_OK)
        self.made = []

    def describe(self):
        if self.cgroups:
            return "each job in a cgroup v1 CPU group of %d%% of a core" % (self.share * 100)
        return "no cgroup (not root): each job pinned to one core with taskset, no quota"

    def start(self, k, cmd, **kw):
        if not self.cgroups:
            return subprocess.Popen(["taskset", "-c", str(k % os.cpu_count())] + cmd, **kw)
        group = os.path.join(self.ROOT, "ingot-job-%d" % k)
        if not os.path.isdir(group):
            os.mkdir(group)
            self.made.append(group)
        period = 100000
        open(os.path.join(group, "cpu.cfs_period_us"), "w").write(str(period))
        open(os.path.join(group, "cpu.cfs_quota_us"), "w").write(str(int(period * self.share)))
        procs = os.path.join(group, "cgroup.procs")
        return subprocess.Popen(cmd, preexec_fn=lambda: open(procs, "w").write(str(os.getpid())), **kw)

    def close(self):
        for group in self.made:
            try:
                os.rmdir(group)
            except OSError:
                pass


def run_jobs(n, base, name, label, start=lambda k, cmd, **kw: subprocess.Popen(cmd, **kw)):
    """`base` as one single job (n = 0) or n jobs joined under `name`, started at once by
    `start(k, cmd, …)`; the wall time from the first start to the last exit (`run_jobs.peak_kb`:
    the largest peak RSS of one job, read by /usr/bin/time). A job that fails ends the benchmark."""
    import time
    started = time.time()
    procs = [start(k, ["/usr/bin/time", "-f", "rss_kb=%M"] + base + ([] if n == 0 else ["--join", name]),
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for k in range(max(n, 1))]
    errors = [p.communicate()[1] for p in procs]
    wall = time.time() - started
    failed = [e[-600:] for p, e in zip(procs, errors) if p.returncode != 0]
    if failed:
        sys.exit("%s: a job failed: %s" % (label, failed[0]))
    run_jobs.peak_kb = max(int(m.group(1)) for m in (re.search(r"rss_kb=(\d+)", e) for e in errors) if m)
    return wall


def joined(ingot, data, expected, db, runs, share=0.25, jobs=(1, 2, 4, 8)):
    """Scale-out: people-200k from local pages into PostgreSQL (fsync on), one single job and N joined
    jobs (--join) each confined to a quarter of a core, so that a job stands for one small machine and
    the PostgreSQL server for the database machine. Wall time from the first job's start to the last
    job's exit, medians; every database checked against the single job's tables. The yardstick, the
    partitioned bound at 2 and 4 jobs (`partitioned`), runs in the same rounds on the same server:
    single, 1, 2, 4, 8 joined, 2 and 4 partitioned, single, … — the machine's drift falls on both."""
    pg = Postgres()
    quota = CPUQuota(share)
    peaks = {}
    bounded = tuple(n for n in jobs if n in (2, 4)) if os.path.basename(data) == "people-200000-1000" else ()
    parts = {n: partition_pages(data, n) for n in bounded}
    print("scale-out, %s into PostgreSQL: " % os.path.basename(data) + quota.describe())
    try:
        def run(n, k):
            name = "j%d_%d" % (n, k)
            url = pg.fresh(name)
            base = [ingot, "run", PIPELINE, "--pages", data, "--no-archive", "--db", url, "--progress-interval", "0"]
            server, jobs_cpu = pg.cpu(checkpoint=True), resource.getrusage(resource.RUSAGE_CHILDREN)
            wall = run_jobs(n, base, name, "scale-out", start=quota.start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            peaks.setdefault(n, []).append(run_jobs.peak_kb)
            used = pg.cpu(checkpoint=True) - server
            return wall, pg.digest_and_drop(name), used, (after.ru_utime + after.ru_stime) - (jobs_cpu.ru_utime + jobs_cpu.ru_stime)
        walls = {n: [] for n in (0,) + tuple(jobs)}
        cpus = {n: [] for n in walls}
        bound = {n: [] for n in bounded}
        digests = {n: set() for n in walls}
        for k in range(runs):
            for n in walls:  # interleaved: single, 1, 2, 4, 8, then the bound's 2, 4; single, 1, …
                wall, digest, server, client = run(n, k)
                walls[n].append(wall)
                cpus[n].append((server, client))
                digests[n].add(digest)
            for n in bounded:
                bound[n].append(run_partitioned(pg, quota, ingot, parts[n], "p%d_%d" % (n, k)))
        single = digests[0]
        medians = {n: statistics.median(w) for n, w in walls.items()}
        single_server = statistics.median(c[0] for c in cpus[0])
        for n, w in walls.items():
            label = "1 single job" if n == 0 else "%d joined job%s" % (n, "" if n == 1 else "s")
            exact = digests[n] == single and len(single) == 1
            server = statistics.median(c[0] for c in cpus[n])
            client = statistics.median(c[1] for c in cpus[n])
            print("  %-16s median %.2f s (runs: %s); CPU: server %.2f s (%.1fx a single job's), jobs %.2f s together; a job's peak %.0f MiB%s" % (
                label, medians[n], ", ".join("%.2f" % x for x in w), server, server / single_server if single_server else float("nan"),
                client, max(peaks[n]) / 1024, "" if exact else "  NOT THE SINGLE JOB'S TABLES"))
        one = medians[jobs[0]]
        print("  one joined / one single: %.2f; speed-up over one joined job: %s" % (
            one / medians[0], ", ".join("%d jobs %.2fx" % (n, one / medians[n]) for n in jobs[1:])))
        for n, results in bound.items():
            w = [r[0] for r in results]
            print("  %d jobs, a part each (the bound) median %.2f s (runs: %s); CPU: server %.2f s, jobs %.2f s together; %.2fx the single job" % (
                n, statistics.median(w), ", ".join("%.2f" % x for x in w), statistics.median(r[1] for r in results),
                statistics.median(r[2] for r in results), medians[0] / statistics.median(w)))
        if bounded:
            print("  joined against the partitioned bound: " + ", ".join(
                "%d jobs %.0f %% of its speed (%.2f s against %.2f s)" % (
                    n, 100 * statistics.median(r[0] for r in bound[n]) / medians[n], medians[n], statistics.median(r[0] for r in bound[n]))
                for n in bounded))
    finally:
        quota.close()
        pg.stop()


def partition_pages(data, n):
    """people-200k's pages split by person id modulo n into n directories (each page keeps its
    place, with the records of one part; a person's nested dogs go with it), made once."""
    parts = [os.path.join(BENCH, "people-200k-part%dof%d" % (k, n)) for k in range(n)]
    if all(os.path.exists(os.path.join(d, "done")) for d in parts):
        return parts
    for d in parts:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    for f in sorted(os.listdir(data)):
        if not f.startswith("page-"):
            continue
        page = json.load(open(os.path.join(data, f)))
        for k, d in enumerate(parts):
            part = dict(page, results=[r for r in page["results"] if r["id"] % n == k])
            json.dump(part, open(os.path.join(d, f), "w"), ensure_ascii=False, separators=(",", ":"))
    for d in parts:
        open(os.path.join(d, "done"), "w").close()
    return parts


def run_partitioned(pg, quota, ingot, parts, name):
    """One round of the partitioned bound: a single job per directory of `parts`, all at once, each
    into a database of its own (`name_k`) on `pg`, each started by `quota`; the wall time, the
    server's CPU and the jobs' together."""
    import time
    cmds = [[ingot, "run", PIPELINE, "--pages", d, "--no-archive", "--db", pg.fresh("%s_%d" % (name, k)),
             "--progress-interval", "0"] for k, d in enumerate(parts)]
    server, before = pg.cpu(checkpoint=True), resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    procs = [quota.start(k, c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for k, c in enumerate(cmds)]
    errors = [p.communicate()[1] for p in procs]
    wall = time.time() - started
    failed = [e[-600:] for p, e in zip(procs, errors) if p.returncode != 0]
    if failed:
        sys.exit("partitioned: a job failed: %s" % failed[0])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = pg.cpu(checkpoint=True) - server
    for k in range(len(parts)):
        pg.psql("postgres", "DROP DATABASE IF EXISTS %s_%d" % (name, k))  # no later window pays its autovacuum
    return wall, used, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def partitioned(ingot, data, expected, db, runs, share=0.25, jobs=(2, 4)):
    """The bound of partitioning the work by identity instead of by page (docs/scale-out.md, "The
    limit on this machine"): N single jobs at once, each given only its own part of the persons
    (id modulo N: no job reads, parses or maps another's records, nothing is exchanged through
    the server), each into a database of its own on the same PostgreSQL server, each confined to
    a quarter of a core as in the joined case; against one single job given every page. A real
    partitioned run would do more than this (every job parsing every page to find its records),
    so its speed-up is at most what this prints."""
    pg = Postgres()
    quota = CPUQuota(share)
    print("partitioned by identity (a bound), people-200k into PostgreSQL: " + quota.describe())
    try:
        dirs = {1: [data]}
        dirs.update({n: partition_pages(data, n) for n in jobs})
        walls = {n: [] for n in dirs}
        cpus = {n: [] for n in dirs}
        for r in range(runs):
            for n, parts in dirs.items():
                wall, server, client = run_partitioned(pg, quota, ingot, parts, "p%d_%d" % (n, r))
                walls[n].append(wall)
                cpus[n].append((server, client))
        one = statistics.median(walls[1])
        for n, w in walls.items():
            label = "1 single job" if n == 1 else "%d jobs, a part each" % n
            print("  %-20s median %.2f s (runs: %s); CPU: server %.1f s, jobs %.1f s together%s" % (
                label, statistics.median(w), ", ".join("%.2f" % x for x in w), statistics.median(c[0] for c in cpus[n]),
                statistics.median(c[1] for c in cpus[n]), "" if n == 1 else "; %.2fx one job" % (one / statistics.median(w))))
        return {n: statistics.median(w) for n, w in walls.items()}
    finally:
        quota.close()
        pg.stop()


def joined_http(ingot, data, expected, db, runs, share=0.25, jobs=(1, 2, 4)):
    """Scale-out over HTTP: people-200k served by the fixture server by page number with
    total_pages (the fetcher reads page 1, every job fetches the pages it claims, concurrency 4 a
    job), into PostgreSQL (fsync on), each job at a quarter of a core as in the joined case: one
    single job and N joined jobs, by default (each batch written with positions at its commit)
    and with --bulk (each job's batches deferred to the run's end). Medians, interleaved; every
    database checked against the default single job's tables."""
    pg = Postgres()
    quota = CPUQuota(share)
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests/Fixtures/server.py"), "--people", data, "--exit-on-eof"],
                              stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    print("scale-out over HTTP, people-200k by page number into PostgreSQL: " + quota.describe())
    try:
        port = int(server.stdout.readline().split()[1])
        yml = os.path.join(BENCH, "people-joined-http.yml")
        open(yml, "w").write(open(PIPELINE).read().replace(
            '  files: {dir: samples/people, glob: "page-*.json"}\n',
            '  http:\n    url: http://127.0.0.1:%d/people/paged\n'
            '    paginate: {page: {param: page, start: 1, total_pages: meta.total_pages}}\n    concurrency: 4\n' % port))
        modes = ("default", "--bulk")
        walls = {(n, m): [] for n in (0,) + tuple(jobs) for m in modes}
        cpus = {key: [] for key in walls}
        digests = {}
        for k in range(runs):
            for key in walls:
                n, mode = key
                name = "h%d%s_%d" % (n, "b" if mode == "--bulk" else "d", k)
                url = pg.fresh(name)
                base = [ingot, "run", yml, "--no-archive", "--db", url, "--progress-interval", "0"] + ([mode] if mode == "--bulk" else [])
                server_cpu, jobs_cpu = pg.cpu(checkpoint=True), resource.getrusage(resource.RUSAGE_CHILDREN)
                walls[key].append(run_jobs(n, base, name, "scale-out over HTTP", start=quota.start))
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpus[key].append((pg.cpu(checkpoint=True) - server_cpu, (after.ru_utime + after.ru_stime) - (jobs_cpu.ru_utime + jobs_cpu.ru_stime)))
                digests.setdefault(key, set()).add(pg.digest_and_drop(name))
        reference = digests[(0, "default")]
        medians = {key: statistics.median(w) for key, w in walls.items()}
        for key, w in walls.items():
            n, mode = key
            label = ("1 single job" if n == 0 else "%d joined job%s" % (n, "" if n == 1 else "s")) + ", " + mode
            exact = digests[key] == reference and len(reference) == 1
            print("  %-26s median %.2f s (runs: %s); CPU: server %.1f s, jobs %.1f s together%s" % (
                label, medians[key], ", ".join("%.2f" % x for x in w), statistics.median(c[0] for c in cpus[key]),
                statistics.median(c[1] for c in cpus[key]), "" if exact else "  NOT THE SINGLE JOB'S TABLES"))
        for mode in modes:
            one = medians[(jobs[0], mode)]
            print("  %s: speed-up over one joined job: %s; over one single job: %s" % (
                mode, ", ".join("%d jobs %.2fx" % (n, one / medians[(n, mode)]) for n in jobs[1:]),
                ", ".join("%d jobs %.2fx" % (n, medians[(0, mode)] / medians[(n, mode)]) for n in jobs)))
    finally:
        server.stdin.close()
        server.wait()
        quota.close()
        pg.stop()


def fanout(ingot, data, expected, db, runs, persons=2000, jobs=(1, 4)):
    """Scale-out of a fetch-bound fan-out: people pages of 100, then each person's detail page (a
    for_each resource, concurrency 4), every answer after 100 ms, into PostgreSQL: one single job,
    then N joined jobs at the same concurrency. Wall time from the first start to the last exit,
    medians; every database checked against the single job's tables, and the requests counted."""
    def pipeline(port):
        return open(PIPELINE).read().replace(
            'source:\n  files: {dir: samples/people, glob: "page-*.json"}\nrecords: results\nroot: person\n',
            'defaults: {http: {url: "http://127.0.0.1:%d/", concurrency: 4}}\nresources:\n'
            '  - {name: pages, source: {http: {url: people/next, paginate: {next_url: next}}}, records: results, root: person}\n'
            '  - {name: details, for_each: {resource: pages, path: "people/detail/{id}"}, records: ".", root: person}\n' % port,
        ).replace("      tags: json\n", "      tags: json\n      note: string\n")
    fetch_scaling(ingot, runs, persons, jobs, "fan-out", pipeline,
                  "fan-out, %d persons: their pages, then a detail request per record, 100 ms each, concurrency 4 a job, into PostgreSQL" % persons)


def fanout_pages(ingot, data, expected, db, runs, persons=500, jobs=(1, 4)):
    """Scale-out of a fetch-bound paginated fan-out: people pages of 100, then each person's notes,
    1 to 3 pages by next URL (a for_each whose requests paginate, concurrency 4), every answer after
    100 ms, into PostgreSQL: one single job, then N joined jobs. As the fan-out case."""
    def pipeline(port):
        return open(PIPELINE).read().replace(
            'source:\n  files: {dir: samples/people, glob: "page-*.json"}\nrecords: results\nroot: person\n',
            'defaults: {http: {url: "http://127.0.0.1:%d/", concurrency: 4}}\nresources:\n'
            '  - {name: pages, source: {http: {url: people/next, paginate: {next_url: next}}}, records: results, root: person}\n'
            '  - {name: notes, for_each: {resource: pages, path: "people/notes/{id}"}, source: {http: {paginate: {next_url: next}}},'
            ' records: results, root: person}\n' % port,
        ).replace("      tags: json\n", "      tags: json\n      note: string\n")
    fetch_scaling(ingot, runs, persons, jobs, "fan-out-pages", pipeline,
                  "paginated fan-out, %d persons: their pages, then each person's notes in 1 to 3 pages by next URL, 100 ms each, "
                  "concurrency 4 a job, into PostgreSQL" % persons)


def numbered(ingot, data, expected, db, runs, persons=20000, jobs=(1, 4)):
    """Scale-out of a fetch-bound numbered list: people pages of 100 by page number, every answer
    after 100 ms, concurrency 4 a job, into PostgreSQL: one single job, then N joined jobs (each
    fetching the pages it claims). As the fan-out case. With `total_pages`, then without (the
    first empty page ends the list: a single run asks for it, and past it as far as its
    concurrency; joined, a job finds it and the others' requests past it are the waste)."""
    for told in (True, False):
        def pipeline(port, told=told):
            return open(PIPELINE).read().replace(
                '  files: {dir: samples/people, glob: "page-*.json"}\n',
                ('  http:\n    url: http://127.0.0.1:%d/people/paged\n'
                 '    paginate: {page: {param: page, start: 1, total_pages: meta.total_pages}}\n    concurrency: 4\n' if told else
                 '  http:\n    url: http://127.0.0.1:%d/people/page\n'
                 '    paginate: {page: {param: page, start: 1}}\n    concurrency: 4\n') % port)
        fetch_scaling(ingot, runs, persons, jobs, "numbered" if told else "untold", pipeline,
                      "numbered pages, %d persons: pages of 100 by number %s, 100 ms each, concurrency 4 a job, into PostgreSQL" % (
                          persons, "with total_pages" if told else "without a total (an empty page ends them)"))


def fetch_scaling(ingot, runs, persons, jobs, name, pipeline, title):
    """One single job, then N joined jobs, of `pipeline(port)` over the fixture server answering
    every request after 100 ms: wall medians (interleaved), the requests made, the tables checked
    against the single job's."""
    small = os.path.join(BENCH, "people-%d-100" % persons)
    if not os.path.exists(os.path.join(small, "expected.json")):
        subprocess.run([sys.executable, GEN, "--out", small, "--persons", str(persons), "--page-size", "100"],
                       check=True, stdout=subprocess.DEVNULL)
    pg = Postgres()
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests/Fixtures/server.py"), "--people", small,
                               "--delay", "0.1", "--exit-on-eof"],
                              stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().split()[1])
        yml = os.path.join(BENCH, "people-%s.yml" % name)
        open(yml, "w").write(pipeline(port))

        def requests():
            with urllib.request.urlopen("http://127.0.0.1:%d/requests" % port) as r:
                return json.load(r).get("people_requests", 0)

        def run(n, k):
            db_name = "%s%d_%d" % (name[0], n, k)
            url = pg.fresh(db_name)
            base = [ingot, "run", yml, "--no-archive", "--db", url, "--progress-interval", "0"]
            before = requests()
            wall = run_jobs(n, base, db_name, name)
            return wall, db_name, requests() - before
        walls = {n: [] for n in (0,) + tuple(jobs)}
        names, made = {}, {}
        for k in range(runs):
            for n in walls:
                wall, names[n], made[n] = run(n, k)
                walls[n].append(wall)
        single = table_digest(pg, names[0])
        medians = {n: statistics.median(w) for n, w in walls.items()}
        print(title)
        for n, w in walls.items():
            label = "1 single job" if n == 0 else "%d joined job%s" % (n, "" if n == 1 else "s")
            exact = table_digest(pg, names[n]) == single
            print("  %-16s median %.2f s (runs: %s), %d requests%s" % (label, medians[n], ", ".join("%.2f" % x for x in w), made[n],
                                                                      "" if exact else "  NOT THE SINGLE JOB'S TABLES"))
        one = medians[jobs[0]]
        print("  speed-up over one joined job: %s" % ", ".join("%d jobs %.2fx" % (n, one / medians[n]) for n in jobs[1:]))
    finally:
        server.stdin.close()
        server.wait()
        pg.stop()


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--ingot", required=True)
    a.add_argument("--runs", type=int, default=3)
    a.add_argument("--jobs", default="1,2,4,8", help="the joined case's numbers of jobs, comma-separated")
    a.add_argument("--big", action="store_true", help="also people-1M: peers paired, and the ratio to 200k; with --only joined, one single and one joined job at 1M (their peaks); with --only postgres, one job against its COPY floor at 1M")
    a.add_argument("--huge", action="store_true", help="people-10M alone (one run, about 15 minutes to generate)")
    a.add_argument("--only", choices=["latency", "fetch", "dense", "bounds", "postgres", "refresh", "peers", "joined", "joined-http", "partitioned", "fanout", "fanout-pages", "numbered", "draft", "phases"], help="run this case alone")
    args = a.parse_args()
    ingot = os.path.abspath(args.ingot)
    if args.only == "phases":
        phases(ingot, os.path.join(BENCH, "bench.db"), args.runs,
               (200000, 1000000, 10000000) if args.huge else (200000, 1000000))
        return
    if args.huge:
        huge(ingot, args.runs)
        return
    data, expected = dataset(200000, 1000)
    db = os.path.join(BENCH, "bench.db")
    archives = os.path.join(BENCH, "archives")
    records, mb = expected["records"], expected["bytes"] / 1e6
    print("people-200k: %d pages, %d records, %.1f MB" % (expected["pages"], records, mb))
    def all_peers():
        small = peers(ingot, data, expected, db, args.runs)
        if args.big:
            big, exp = dataset(1000000, 1000)
            large = peers(ingot, big, exp, db, args.runs, label="people-1M")
            print("  people-1M / people-200k: Ingot %.1f, Ingot --bulk %.1f (linear 5, goal <= 5.5)" % (
                large[0] / small[0], large[1] / small[1]))

    if args.only:
        only = {"latency": latency, "fetch": fetch, "postgres": postgres, "refresh": refresh, "joined": joined, "joined-http": joined_http, "partitioned": partitioned,
                "fanout": fanout, "fanout-pages": fanout_pages, "numbered": numbered, "draft": draft}.get(args.only)
        if args.only == "peers":
            all_peers()
        elif args.only == "postgres":
            postgres(ingot, data, expected, db, args.runs)
            if args.big:  # one job against its COPY floor where the run is bigger
                big, exp = dataset(1000000, 1000)
                pg = Postgres()
                try:
                    copy_floor(ingot, pg, big, exp, args.runs, "people-1M")
                finally:
                    pg.stop()
        elif args.only == "joined":
            joined(ingot, data, expected, db, args.runs, jobs=tuple(int(n) for n in args.jobs.split(",")))
            if args.big:  # a lone joined job's memory against a single job's, where the run is bigger
                big, exp = dataset(1000000, 1000)
                joined(ingot, big, exp, db, 1, jobs=(1,))
        elif only:
            only(ingot, data, expected, db, args.runs)
        elif args.only == "bounds":
            bounds(ingot, db, args.runs)
        else:
            dense(ingot, db, args.runs)
        return
    for _ in range(args.runs):
        p = subprocess.run([ingot, "bench-decode", PIPELINE, "--pages", data], capture_output=True, text=True, check=True)
        print("decode (1 thread): " + p.stdout.strip())

    def run(lanes=None, archive=True):
        shutil.rmtree(archives, ignore_errors=True)
        cmd = [ingot, "run", PIPELINE, "--pages", data] + (["--lanes", str(lanes)] if lanes else [])
        cmd += ["--archive-dir", archives] if archive else ["--no-archive"]
        return timed(cmd, db)

    results = [run() for _ in range(args.runs)]
    loose = report("run, all lanes", results, records, mb, check(db, data))
    archive = results[-1][2]
    size = os.path.getsize(archive)
    print("archive: %.1f MB, %.1f%% of the raw %.1f MB" % (size / 1e6, 100.0 * size / expected["bytes"], mb))
    replay = [timed([ingot, "replay", archive], db) for _ in range(args.runs)]
    replayed = report("replay of the archive", replay, records, mb, check(db, data))
    print("replay vs loose pages: %+.1f%%" % (100.0 * (replayed - loose) / loose))
    report("run, no archive", [run(archive=False) for _ in range(args.runs)], records, mb, check(db, data))
    report("run, 1 lane", [run(lanes=1) for _ in range(args.runs)], records, mb, check(db, data))
    refresh(ingot, data, expected, db, args.runs)
    all_peers()
    fetch(ingot, data, expected, db, args.runs)
    latency(ingot, data, expected, db, args.runs)
    postgres(ingot, data, expected, db, args.runs)
    joined(ingot, data, expected, db, args.runs, jobs=tuple(int(n) for n in args.jobs.split(",")))
    joined_http(ingot, data, expected, db, args.runs)
    fanout(ingot, data, expected, db, args.runs)
    fanout_pages(ingot, data, expected, db, args.runs)
    numbered(ingot, data, expected, db, args.runs)
    draft(ingot, data, expected, db, args.runs)
    dense(ingot, db, args.runs)
    bounds(ingot, db, args.runs)
    shutil.rmtree(archives, ignore_errors=True)


if __name__ == "__main__":
    main()
