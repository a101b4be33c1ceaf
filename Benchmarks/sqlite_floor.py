#!/usr/bin/env python3
"""The SQLite write floor of `make bench`: the final rows of a people database copied into a new
database with the same tables, indexes and pragmas (16 KiB pages, WAL, synchronous NORMAL), by
`INSERT … SELECT` from the attached source (rows in the source's order, indexes created
first, as Ingot has them while it writes), in one transaction. No JSON, no merge, no lookups:
what writing the final state alone costs. Ingot's time over this is its overhead.

Usage: sqlite_floor.py --from SOURCE.db --db OUT.db
"""
import argparse
import os
import sqlite3

TABLES = ("person", "dog", "person_dogs")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="source", required=True)
    p.add_argument("--db", required=True)
    a = p.parse_args()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(a.db + suffix):
            os.remove(a.db + suffix)
    out = sqlite3.connect(a.db, isolation_level=None)
    out.execute("PRAGMA page_size = 16384")
    out.execute("PRAGMA journal_mode = WAL")
    out.execute("PRAGMA synchronous = NORMAL")
    out.execute("ATTACH ? AS src", (a.source,))
    schema = out.execute(
        "SELECT type, name, sql FROM src.sqlite_master WHERE tbl_name IN (%s) AND sql IS NOT NULL" % ",".join("?" * len(TABLES)),
        TABLES).fetchall()
    out.execute("BEGIN")
    # Tables and their indexes first, as Ingot has them while it writes.
    for kind in ("table", "index"):
        for sql in (sql for k, _, sql in schema if k == kind):
            out.execute(sql)
    for table in TABLES:
        out.execute('INSERT INTO main."%s" SELECT * FROM src."%s"' % (table, table))
    out.execute("COMMIT")
    out.execute("DETACH src")
    out.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out.close()


if __name__ == "__main__":
    main()
