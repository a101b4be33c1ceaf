#!/usr/bin/env python3
"""The DuckDB peer of `make bench`: the people pages ingested by DuckDB with set-based SQL and
exactly Ingot's merge rules, the final state written into a new SQLite database with the tables
Ingot makes (so `people.py --check` reads both the same way).

What an engineer would write to beat Ingot with an analytical engine instead of find-or-create:

  * every record of every page, numbered in page order then array order (`seq`);
  * per person and per column, the value of the last record in which the key is present
    (`arg_max(value, seq) FILTER (WHERE key present)`): absent keys leave the column as it
    was, a present null clears it; `country` follows its key path's root (`origin`): a present
    root with a missing leaf sets NULL;
  * dogs (nested objects) the same way, per dog id, over every person's dogs in order;
  * links: a person's set of dogs is the one of its last record whose `dogs` key is present;
  * the final rows written into SQLite (same pragmas as Ingot: WAL, synchronous NORMAL,
    16 KiB pages) in one transaction.

Usage: duckdb_peer.py --pages DIR --db OUT.db [--threads 2] [--memory-limit 1GB]
Needs the `duckdb` package from PyPI (`pip install duckdb==1.4.4`; bench.py installs it).
"""
import argparse
import glob
import os
import sqlite3
import sys

SCHEMA = """
PRAGMA page_size = 16384;
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
CREATE TABLE person (id INTEGER NOT NULL, first_name TEXT, last_name TEXT, birthday TEXT, email TEXT,
  country TEXT, score REAL, active INTEGER, updated_at TEXT, tags TEXT);
CREATE UNIQUE INDEX person_identity ON person(id);
CREATE TABLE dog (id INTEGER NOT NULL, name TEXT, breed TEXT);
CREATE UNIQUE INDEX dog_identity ON dog(id);
CREATE TABLE person_dogs (person_id INTEGER NOT NULL, dog_id INTEGER NOT NULL,
  PRIMARY KEY (person_id, dog_id)) WITHOUT ROWID;
"""

# Every record, numbered in page order then array order (seq), with each key the merge reads
# extracted once as JSON: SQL NULL when the key is absent, the JSON text 'null' when it is null.
KEYS = ["id", "first_name", "last_name", "birthday", "email", "origin", "score", "active", "updated_at", "tags", "dogs"]
RECORDS = """
CREATE TEMP TABLE page AS
SELECT row_number() OVER (ORDER BY filename) AS page_no, results
FROM read_json(?, columns = {'results': 'JSON[]'}, filename = true, format = 'auto', maximum_object_size = 1073741824);
CREATE TEMP TABLE rec AS
SELECT seq, CAST(x[1] ->> '$' AS BIGINT) AS id, %s
FROM (SELECT seq, json_extract(v, [%s]) AS x
      FROM (SELECT (page_no << 20) + i AS seq, v
            FROM (SELECT page_no, unnest(results) AS v, unnest(range(len(results))) AS i FROM page)))
WHERE json_type(x[1]) IN ('BIGINT', 'UBIGINT');
DROP TABLE page;
""" % (", ".join("x[%d] AS %s" % (k + 1, key) for k, key in enumerate(KEYS) if key != "id"),
       ", ".join("'$.%s'" % key for key in KEYS))


# The second formulation (--read transform): every page read whole as text, its records taken
# with one JSON path (`$.results[*]`), each record parsed once into typed fields
# (json_transform) beside its list of keys (json_keys: presence), and the merge over the typed
# fields. What a DuckDB user who knows json_transform would write; kept beside the first because
# neither is faster everywhere, and the benchmark holds Ingot to the faster.
TRANSFORM = """
CREATE TEMP TABLE raw AS
SELECT (page_no << 20) + i AS seq, v FROM (
  SELECT page_no, unnest(results) AS v, unnest(range(len(results))) AS i FROM (
    SELECT row_number() OVER (ORDER BY filename) AS page_no, json_extract(content, '$.results[*]') AS results FROM read_text(?)));
CREATE TEMP TABLE typed AS
SELECT seq, json_keys(v) AS k, json_transform(v, '{"id": "BIGINT", "first_name": "VARCHAR", "last_name": "VARCHAR",
  "birthday": "VARCHAR", "email": "VARCHAR", "origin": "JSON", "score": "DOUBLE", "active": "BOOLEAN", "updated_at": "VARCHAR",
  "tags": "JSON", "dogs": "JSON"}') AS s
FROM raw WHERE json_type(v, '$.id') IN ('BIGINT', 'UBIGINT');
DROP TABLE raw;
"""


def present(key, value, name):
    """The value of the last record in which `key` is present (NULL when present as null)."""
    return "arg_max_null(%s, seq) FILTER (WHERE list_contains(k, '%s')) AS %s" % (value, key, name)


TYPED_PERSONS = """
SELECT s.id AS id, %s FROM typed GROUP BY s.id ORDER BY s.id
""" % ", ".join([present(c, "s." + c, c) for c in ("first_name", "last_name", "birthday", "email")]
                + [present("origin", "CAST(s.origin ->> '$.country.name' AS VARCHAR)", "country"),
                   present("score", "s.score", "score"), present("active", "s.active", "active"),
                   present("updated_at", "rpad(split_part(s.updated_at, 'Z', 1) || CASE WHEN contains(s.updated_at, '.') THEN '' "
                                         "ELSE '.' END, 26, '0') || 'Z'", "updated_at"),
                   present("tags", "CAST(s.tags AS VARCHAR)", "tags")])

TYPED_DOG_MENTIONS = """
CREATE TEMP TABLE mention AS
SELECT person_id, rseq, (rseq << 8) + i AS seq, CAST(x[1] ->> '$' AS BIGINT) AS dog_id, x[2] AS name, x[3] AS breed
FROM (SELECT s.id AS person_id, seq AS rseq, i, json_extract(d, ['$.id', '$.name', '$.breed']) AS x
      FROM (SELECT s, seq, unnest(CAST(s.dogs AS JSON[])) AS d, unnest(range(CAST(json_array_length(s.dogs) AS BIGINT))) AS i
            FROM typed WHERE list_contains(k, 'dogs') AND json_type(s.dogs) = 'ARRAY'))
"""

TYPED_LINKS = """
WITH latest AS (SELECT s.id AS id, max(seq) AS seq FROM typed WHERE list_contains(k, 'dogs') GROUP BY s.id)
SELECT DISTINCT m.person_id, m.dog_id FROM mention m JOIN latest l ON m.person_id = l.id AND m.rseq = l.seq
ORDER BY 1, 2
"""


def last(column, value=None, cast="VARCHAR"):
    """The value of the last record in which the key is present (NULL when present as null).
    arg_max_null, not arg_max: arg_max skips rows whose value is NULL, which would keep an old
    value where the record cleared it."""
    value = value or "CAST(%s ->> '$' AS %s)" % (column, cast)
    return "arg_max_null(%s, seq) FILTER (WHERE %s IS NOT NULL) AS %s" % (value, column, column)


# A date-time as Ingot stores it: six fraction digits before the Z (text order is time order).
STORED_DATE = ("rpad(split_part(updated_at ->> '$', 'Z', 1) || CASE WHEN contains(updated_at ->> '$', '.') THEN '' ELSE '.' END, 26, '0')"
               " || 'Z'")

PERSONS = """
SELECT id, %s FROM rec GROUP BY id ORDER BY id
""" % ", ".join([last("first_name"), last("last_name"), last("birthday"), last("email"),
                 last("origin", "CAST(origin ->> '$.country.name' AS VARCHAR)").replace("AS origin", "AS country"),
                 last("score", cast="DOUBLE"), last("active", cast="BOOLEAN"), last("updated_at", STORED_DATE),
                 last("tags", "CASE WHEN tags = 'null' THEN NULL ELSE CAST(tags AS VARCHAR) END")])

# Each nested dog of each record whose dogs key holds an array, with its own keys extracted.
DOG_MENTIONS = """
CREATE TEMP TABLE mention AS
SELECT person_id, rseq, (rseq << 8) + i AS seq, CAST(x[1] ->> '$' AS BIGINT) AS dog_id, x[2] AS name, x[3] AS breed
FROM (SELECT id AS person_id, seq AS rseq, i, json_extract(d, ['$.id', '$.name', '$.breed']) AS x
      FROM (SELECT id, seq, unnest(CAST(dogs AS JSON[])) AS d, unnest(range(CAST(json_array_length(dogs) AS BIGINT))) AS i
            FROM rec WHERE json_type(dogs) = 'ARRAY'))
"""

DOGS = """
SELECT dog_id AS id, %s, %s FROM mention GROUP BY dog_id ORDER BY dog_id
""" % (last("name"), last("breed"))

# The last record of each person whose dogs key is present decides its set of dogs.
LINKS = """
WITH latest AS (SELECT id, max(seq) AS seq FROM rec WHERE dogs IS NOT NULL GROUP BY id)
SELECT DISTINCT m.person_id, m.dog_id FROM mention m JOIN latest l ON m.person_id = l.id AND m.rseq = l.seq
ORDER BY 1, 2
"""


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pages", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--memory-limit", default=None)
    p.add_argument("--read", choices=["json", "transform"], default="json",
                   help="json: read_json and one json_extract of every key per record; transform: read_text, json_transform and json_keys")
    a = p.parse_args()
    try:
        import duckdb
    except ImportError:
        sys.exit("duckdb is not installed: pip install duckdb==1.4.4")
    files = sorted(glob.glob(os.path.join(a.pages, "page-*.json")))
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(a.db + suffix):
            os.remove(a.db + suffix)
    duck = duckdb.connect(":memory:")
    duck.execute("SET threads = %d" % a.threads)
    duck.execute("SET preserve_insertion_order = false")
    if a.memory_limit:
        duck.execute("SET memory_limit = '%s'" % a.memory_limit)
    first, *rest = [sql for sql in (RECORDS if a.read == "json" else TRANSFORM).split(";") if sql.strip()]
    duck.execute(first, [files])
    for sql in rest:
        duck.execute(sql)
    duck.execute(DOG_MENTIONS if a.read == "json" else TYPED_DOG_MENTIONS)
    persons, links = (PERSONS, LINKS) if a.read == "json" else (TYPED_PERSONS, TYPED_LINKS)
    out = sqlite3.connect(a.db, isolation_level=None)
    out.executescript(SCHEMA)
    out.execute("BEGIN")
    for table, sql, width in (("person", persons, 10), ("dog", DOGS, 3), ("person_dogs", links, 2)):
        cursor = duck.execute(sql)
        insert = "INSERT INTO %s VALUES (%s)" % (table, ", ".join("?" * width))
        while True:
            rows = cursor.fetchmany(50000)
            if not rows:
                break
            out.executemany(insert, rows)
    out.execute("COMMIT")
    out.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out.close()


if __name__ == "__main__":
    main()
