#!/usr/bin/env python3
"""The people data set: deterministic pages of a paginated "people" API, the final state Ingot
must reach from them, and a check of a database against that state.

Test tooling of the repository (make test, make bench, make chaos, make run's check); it needs
only Python's standard library.

The pages imitate a REST API ({"count", "next", "previous", "results"}): persons with a nested
key path (origin.country.name) and a to-many relationship to dogs given as nested objects
(dogs are shared between persons); later pages re-send some persons with changed values, with
keys left out or set to null. The expected state follows Ingot's merge rules
(docs/pipelines.md, "Merge rules"), modelled here independently of Ingot:

  * identity is person.id and dog.id: a record whose id is stored updates that row;
  * a key present sets the column, present with null sets NULL, absent leaves it as it was;
  * a key path (origin.country.name) whose root is present but whose leaf is missing sets NULL;
  * "dogs" present replaces the person's set of dogs; absent leaves it as it was;
  * nested dogs are upserted by id with the same rules;
  * pages apply in order, records in array order; the later value wins.

With --faults, some records are bad (no id, an id that is a string) and some pages are not
JSON; they are counted under "rejected" in expected.json and change nothing.

Usage:
  people.py --out DIR [--persons N] [--page-size P] [--update-fraction F] [--seed S] [--faults]
  people.py --check DB --expected DIR/expected.json   # prints {"ok", "expected", "got"}; exit 1 unless ok
  people.py --expect DIR                              # recompute the expected state of any such pages
"""
import argparse
import hashlib
import json
import os
import random
import sqlite3
import sys

GIVEN = ["Ada", "Alan", "Grace", "Linus", "Barbara", "Ken", "Dennis", "Margaret", "Edsger", "Frances",
         "Radia", "Tim", "Donald", "Leslie", "Niklaus", "Katherine", "Guido", "Yukihiro", "Hedy", "Sophie"]
FAMILY = ["Lovelace", "Turing", "Hopper", "Liskov", "Thompson", "Ritchie", "Hamilton", "Dijkstra",
          "Perlman", "Knuth", "Lamport", "Wirth", "Johnson", "Kernighan", "Lamarr", "Müller", "Ōtomo", "Ñúñez"]
COUNTRIES = ["Spain", "Japan", "Kenya", "Brazil", "Iceland", "India", "Chile", "Vietnam",
             "Côte d'Ivoire", "Україна", "中国", "O\"Brien\\Land"]
DOGS = ["Rex", "Laika", "Fido", "Bella", "Nala", "Kuro", "Pipa", "Odie"]
BREEDS = ["collie", "pug", "beagle", "akita", "husky", "corgi", None]
PERSON_COLUMNS = ("first_name", "last_name", "birthday", "email", "country", "score", "active", "updated_at")


# ---------------------------------------------------------------------------------------------
# The reference model of the merge rules

class State:
    """The final state of person, dog and person_dogs, built by applying records in order."""

    def __init__(self):
        self.persons = {}   # id -> {column: value}
        self.dogs = {}      # id -> {"name", "breed"}
        self.links = {}     # person id -> set of dog ids

    def apply(self, record):
        row = self.persons.setdefault(record["id"], dict.fromkeys(PERSON_COLUMNS))
        for key in ("first_name", "last_name", "birthday", "email", "score", "active", "updated_at"):
            if key in record:
                row[key] = record[key]
        if "origin" in record:
            # origin.country.name: root present, so the leaf (or NULL) is set
            origin = record["origin"]
            country = origin.get("country") if isinstance(origin, dict) else None
            row["country"] = country.get("name") if isinstance(country, dict) else None
        if "dogs" in record:
            owned = set()
            for dog in record["dogs"] or []:
                stored = self.dogs.setdefault(dog["id"], {"name": None, "breed": None})
                for key in ("name", "breed"):
                    if key in dog:
                        stored[key] = dog[key]
                owned.add(dog["id"])
            self.links[record["id"]] = owned

    def summary(self):
        links = {k: v for k, v in self.links.items() if v}   # an empty set has no join rows
        return {"persons": len(self.persons), "dogs": len(self.dogs),
                "links": sum(len(v) for v in links.values()), "checksum": digest(self.persons, self.dogs, links)}


def digest(persons, dogs, links):
    """A SHA-256 over the state in a canonical text form (floats to 2 places, booleans as 0/1)."""
    def text(v, column=None):
        if v is None:
            return "\\N"
        if column == "score":
            return "%.2f" % (float(v) + 0.0)   # -0.0 is stored as 0 (SQLite keeps no negative zero)
        if column == "active":
            return "1" if v else "0"
        return str(v)
    h = hashlib.sha256()
    for pid in sorted(persons):
        h.update(("person\t%d\t%s\n" % (pid, "\t".join(text(persons[pid][c], c) for c in PERSON_COLUMNS))).encode())
    for did in sorted(dogs):
        h.update(("dog\t%d\t%s\t%s\n" % (did, text(dogs[did]["name"]), text(dogs[did]["breed"]))).encode())
    for pid in sorted(links):
        h.update(("links\t%d\t%s\n" % (pid, ",".join(str(d) for d in sorted(links[pid])))).encode())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Generating pages

def person(rng, pid, dog_count, version):
    given, family = rng.choice(GIVEN), rng.choice(FAMILY)
    record = {
        "id": pid,
        "first_name": given,
        "last_name": family if version == 0 else "%s (v%d)" % (family, version),
        "birthday": "%04d-%02d-%02d" % (rng.randint(1935, 2012), rng.randint(1, 12), rng.randint(1, 28)),
        "email": "%s.%d.%d@example.org" % (given.lower(), pid, version) if rng.random() > 0.1 else None,
        "origin": {"country": {"code": rng.randint(1, 250), "name": rng.choice(COUNTRIES)}},
        "score": round(rng.uniform(-100, 1000), 2),
        "active": rng.random() < 0.6,
        "updated_at": "2026-%02d-%02dT%02d:%02d:%02dZ" % (
            rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)),
        "tags": rng.sample(["admin", "owner", "user", "guest", "beta"], rng.randint(0, 3)),
        "dogs": [{"id": rng.randint(1, dog_count), "name": rng.choice(DOGS) + str(version), "breed": rng.choice(BREEDS)}
                 for _ in range(rng.randint(0, 3))],
    }
    return record


def generate(args):
    rng = random.Random(args.seed)
    count = args.persons
    dog_count = max(1, count // 2)
    records = [person(rng, pid, dog_count, 0) for pid in range(1, count + 1)]
    rng.shuffle(records)
    # Two waves of updates: re-sent persons, some keys absent, some null, a country leaf missing.
    for version in (1, 2):
        for pid in rng.sample(range(1, count + 1), int(count * args.update_fraction / 2)):
            record = person(rng, pid, dog_count, version)
            roll = rng.random()
            if roll < 0.2:
                del record["email"]
            elif roll < 0.3:
                record["email"] = None
            if rng.random() < 0.25:
                del record["dogs"]
            roll = rng.random()
            if roll < 0.1:
                del record["origin"]
            elif roll < 0.15:
                record["origin"] = {"country": {"code": 1}}   # leaf missing: country becomes NULL
            if rng.random() < 0.05:
                record["score"] = None
            records.append(record)
    if args.faults:
        # A bad copy of some records follows them: its id removed, or made a string.
        bad = {}
        for i in rng.sample(range(len(records)), max(1, len(records) // 400)):
            copy = dict(records[i])
            if rng.random() < 0.5:
                del copy["id"]
            else:
                copy["id"] = "p%s" % copy["id"]
            bad[i] = copy
        records = [r for i, record in enumerate(records) for r in ([record, bad[i]] if i in bad else [record])]

    pages = [records[i:i + args.page_size] for i in range(0, len(records), args.page_size)]
    broken = set(rng.sample(range(1, len(pages)), max(1, len(pages) // 40))) if args.faults and len(pages) > 4 else set()
    os.makedirs(args.out, exist_ok=True)
    total = 0
    cut_records = {}
    for i, page in enumerate(pages):
        following = "page-%05d.json" % (i + 2) if i + 1 < len(pages) else None
        body = json.dumps({"count": len(records), "next": following, "previous": None, "results": page},
                          ensure_ascii=False, separators=(",", ":"))
        if i in broken:
            body = body[: len(body) * 2 // 3]   # cut: not JSON, the page is rejected whole
            cut_records["page-%05d.json" % (i + 1)] = len(page)
        with open(os.path.join(args.out, "page-%05d.json" % (i + 1)), "w", encoding="utf-8") as f:
            f.write(body)
        total += len(body.encode())
    expected = expect(args.out, cut_records)
    assert expected["records"] == len(records) and expected["bytes"] == total
    print(json.dumps(expected))


def expect(directory, cut_records=None):
    """The expected state of the pages in `directory`, by the reference model; written to expected.json.
    `cut_records` gives the records of each page that is not JSON (the generator knows them;
    for other pages they are estimated)."""
    state = State()
    rejected = {"missing_id": 0, "wrong_type_id": 0, "invalid_json_pages": 0, "records_in_invalid_pages": 0}
    names = sorted(n for n in os.listdir(directory) if n.startswith("page-") and n.endswith(".json"))
    records = total = 0
    for name in names:
        raw = open(os.path.join(directory, name), "rb").read()
        total += len(raw)
        try:
            page = json.loads(raw)
        except ValueError:
            # A page that is not JSON: its records are counted from what the generator wrote.
            rejected["invalid_json_pages"] += 1
            kept = (cut_records or {}).get(name, raw.count(b'"first_name"'))
            rejected["records_in_invalid_pages"] += kept
            records += kept
            continue
        for record in page["results"]:
            records += 1
            if "id" not in record:
                rejected["missing_id"] += 1
            elif not isinstance(record["id"], int) or isinstance(record["id"], bool):
                rejected["wrong_type_id"] += 1
            else:
                state.apply(record)
    expected = {"pages": len(names), "records": records, "bytes": total, "rejected": rejected}
    expected.update(state.summary())
    with open(os.path.join(directory, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2)
    return expected


# ---------------------------------------------------------------------------------------------
# Checking a database

def check(db, expected_path):
    expected = json.load(open(expected_path))
    if not os.path.isfile(db):
        print(json.dumps({"ok": False, "error": "no database at %s" % db}))
        return 1
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"person", "dog", "person_dogs"} <= tables:
        print(json.dumps({"ok": False, "error": "missing tables"}))
        return 1
    persons = {r[0]: dict(zip(PERSON_COLUMNS, r[1:]))
               for r in con.execute("SELECT id, %s FROM person" % ", ".join(PERSON_COLUMNS))}
    dogs = {r[0]: {"name": r[1], "breed": r[2]} for r in con.execute("SELECT id, name, breed FROM dog")}
    links = {}
    for pid, did in con.execute("SELECT person_id, dog_id FROM person_dogs"):
        links.setdefault(pid, set()).add(did)
    # A person whose set of dogs is empty has no join rows: compare sets of non-empty ones.
    expected_links = expected.get("links")
    duplicates = sum(con.execute(sql).fetchone()[0] for sql in (
        "SELECT count(*) - count(DISTINCT id) FROM person",
        "SELECT count(*) - count(DISTINCT id) FROM dog",
        "SELECT count(*) - (SELECT count(*) FROM (SELECT DISTINCT person_id, dog_id FROM person_dogs)) FROM person_dogs"))
    got = {"persons": len(persons), "dogs": len(dogs), "links": sum(len(v) for v in links.values()),
           "checksum": digest(persons, dogs, {k: v for k, v in links.items() if v}), "duplicate_rows": duplicates}
    want = {"persons": expected["persons"], "dogs": expected["dogs"], "links": expected_links,
            "checksum": expected["checksum"], "duplicate_rows": 0}
    ok = got == want
    print(json.dumps({"ok": ok, "expected": want, "got": got}))
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out")
    p.add_argument("--persons", type=int, default=10000)
    p.add_argument("--page-size", type=int, default=500)
    p.add_argument("--update-fraction", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--faults", action="store_true")
    p.add_argument("--check")
    p.add_argument("--expected")
    p.add_argument("--expect", metavar="DIR")
    a = p.parse_args()
    if a.check:
        sys.exit(check(a.check, a.expected))
    if a.expect:
        print(json.dumps(expect(a.expect)))
        return
    if not a.out:
        p.error("--out, --check or --expect is required")
    generate(a)


if __name__ == "__main__":
    main()
