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

Generation and check stream: pages are written one at a time, each record is a function of
(seed, id, version), the generator keeps a few bytes per person and per dog, and the final
state is recomputed one person at a time; the check reads the database in id order. People-10M
(12M records, 3.7 GB of pages) needs no more memory than people-200k. Up to 300,000 persons,
the generator also applies the reference model below to the pages read back and asserts the
same state.

Usage:
  people.py --out DIR [--persons N] [--page-size P] [--update-fraction F] [--seed S] [--faults]
  people.py --check DB --expected DIR/expected.json   # prints {"ok", "expected", "got"}; exit 1 unless ok
  people.py --expect DIR                              # recompute the expected state of any such pages
"""
import argparse
from array import array
import hashlib
import json
import os
import random
import re
import sqlite3
import sys
import tempfile

GIVEN = ["Ada", "Alan", "Grace", "Linus", "Barbara", "Ken", "Dennis", "Margaret", "Edsger", "Frances",
         "Radia", "Tim", "Donald", "Leslie", "Niklaus", "Katherine", "Guido", "Yukihiro", "Hedy", "Sophie"]
FAMILY = ["Lovelace", "Turing", "Hopper", "Liskov", "Thompson", "Ritchie", "Hamilton", "Dijkstra",
          "Perlman", "Knuth", "Lamport", "Wirth", "Johnson", "Kernighan", "Lamarr", "Müller", "Ōtomo", "Ñúñez"]
COUNTRIES = ["Spain", "Japan", "Kenya", "Brazil", "Iceland", "India", "Chile", "Vietnam",
             "Côte d'Ivoire", "Україна", "中国", "O\"Brien\\Land"]
DOGS = ["Rex", "Laika", "Fido", "Bella", "Nala", "Kuro", "Pipa", "Odie"]
BREEDS = ["collie", "pug", "beagle", "akita", "husky", "corgi", None]
DATE_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
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
                row[key] = stored_date(record[key]) if key == "updated_at" else record[key]
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


def stored_date(v):
    """A date-time as Ingot stores it: UTC with six fraction digits (`…:05.000000Z`), so that
    text order is time order."""
    if isinstance(v, str) and DATE_TIME.match(v):
        whole, _, fraction = v[:-1].partition(".")
        return "%s.%sZ" % (whole, (fraction + "000000")[:6])
    return v


def text(v, column=None):
    """A value in the digest's canonical text form (floats to 2 places, booleans as 0/1)."""
    if v is None:
        return "\\N"
    if column == "score":
        return "%.2f" % (float(v) + 0.0)   # -0.0 is stored as 0 (SQLite keeps no negative zero)
    if column == "active":
        return "1" if v else "0"
    return str(v)


def person_line(pid, row):
    return ("person\t%d\t%s\n" % (pid, "\t".join(text(row[c], c) for c in PERSON_COLUMNS))).encode()


def digest(persons, dogs, links):
    """A SHA-256 over the state in a canonical text form: persons, then dogs, then links, each
    in id order."""
    h = hashlib.sha256()
    for pid in sorted(persons):
        h.update(person_line(pid, persons[pid]))
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


def record(seed, pid, dog_count, version):
    """The record of person `pid` sent in `version` (0: the first load; 1, 2: the two waves of
    updates, with keys left out, set to null, a country leaf missing). A function of its
    arguments alone (its own seeded generator), so the expected state can be recomputed one
    person at a time without keeping the pages or the state in memory."""
    rng = random.Random((seed * 1_000_003 + pid) * 4 + version)
    r = person(rng, pid, dog_count, version)
    if version == 0:
        return r
    roll = rng.random()
    if roll < 0.2:
        del r["email"]
    elif roll < 0.3:
        r["email"] = None
    if rng.random() < 0.25:
        del r["dogs"]
    roll = rng.random()
    if roll < 0.1:
        del r["origin"]
    elif roll < 0.15:
        r["origin"] = {"country": {"code": 1}}   # leaf missing: country becomes NULL
    if rng.random() < 0.05:
        r["score"] = None
    return r


NO_DOGS = 255   # links_version: no applied record of the person sent its dogs


def generate(args):
    """Writes the pages one at a time and keeps only small per-id arrays (a few bytes per person
    and per dog), so people-10M (12M records, 3.7 GB of pages) needs no more memory than
    people-200k needs for its pages: what each person's final row is gets recomputed from its
    records afterwards (`record` is deterministic)."""
    rng = random.Random(args.seed)
    count = args.persons
    dog_count = max(1, count // 2)
    order = array("q", range(1, count + 1))
    rng.shuffle(order)
    waves = [(0, order)]
    for version in (1, 2):
        waves.append((version, rng.sample(range(1, count + 1), int(count * args.update_fraction / 2))))
    faults = random.Random(args.seed + 1) if args.faults else None

    def stream():
        sent = 0
        for version, pids in waves:
            for pid in pids:
                r = record(args.seed, pid, dog_count, version)
                yield r, version
                sent += 1
                if faults and sent % 400 == 10:   # from the first page on
                    # A bad copy of the record follows it: its id removed, or made a string.
                    copy = dict(r)
                    if faults.random() < 0.5:
                        del copy["id"]
                    else:
                        copy["id"] = "p%s" % copy["id"]
                    yield copy, None

    applied = bytearray(count + 1)                  # bit v: the person's version-v record was applied
    links_version = bytearray([NO_DOGS]) * (count + 1)
    dog_name = bytearray([255]) * (dog_count + 1)   # name index * 3 + version of the last mention
    dog_breed = bytearray(dog_count + 1)
    rejected = {"missing_id": 0, "wrong_type_id": 0, "invalid_json_pages": 0, "records_in_invalid_pages": 0}
    total = records = 0
    cut_records = {}
    total_records = count + sum(len(pids) for _, pids in waves[1:])   # the "count" of the API's pages
    os.makedirs(args.out, exist_ok=True)
    for old in os.listdir(args.out):
        if old.startswith("page-") and old.endswith(".json"):
            os.remove(os.path.join(args.out, old))
    source = stream()
    number = 0
    page = [item for _, item in zip(range(args.page_size), source)]
    while page:
        number += 1
        following = [item for _, item in zip(range(args.page_size), source)]
        name = "page-%05d.json" % number
        body = json.dumps({"count": total_records, "next": "page-%05d.json" % (number + 1) if following else None,
                           "previous": None, "results": [r for r, _ in page]},
                          ensure_ascii=False, separators=(",", ":"))
        # Cut: not JSON, the page is rejected whole (the 4th, 44th, … of a set of more than 4 pages).
        broken = args.faults and number % 40 == 4 and total_records > 4 * args.page_size
        if broken:
            body = body[: len(body) * 2 // 3]
            rejected["invalid_json_pages"] += 1
            rejected["records_in_invalid_pages"] += len(page)
            cut_records[name] = len(page)
        else:
            for r, version in page:
                if version is None:
                    rejected["missing_id" if "id" not in r else "wrong_type_id"] += 1
                    continue
                pid = r["id"]
                applied[pid] |= 1 << version
                if "dogs" in r:
                    links_version[pid] = version
                    for dog in r["dogs"]:
                        dog_name[dog["id"]] = DOGS.index(dog["name"][:-1]) * 3 + version
                        dog_breed[dog["id"]] = BREEDS.index(dog["breed"])
        data = body.encode()
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(data)
        total += len(data)
        records += len(page)
        page = following
    expected = {"pages": number, "records": records, "bytes": total, "rejected": rejected}
    expected.update(final_state(args.seed, count, dog_count, applied, links_version, dog_name, dog_breed))
    if count <= 300_000:
        # Cross-check against the reference model applied to the pages read back (small sets only).
        assert expect(args.out, cut_records) == expected, "the streamed state disagrees with the model"
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2)
    print(json.dumps(expected))


def final_state(seed, count, dog_count, applied, links_version, dog_name, dog_breed):
    """The digest of the final state (as `digest` computes it), one person at a time: each
    person's applied records are regenerated and merged by the reference model (`State`)."""
    h = hashlib.sha256()
    persons = links = 0
    with tempfile.TemporaryFile("w+b") as link_lines:
        for pid in range(1, count + 1):
            if not applied[pid]:
                continue
            state = State()
            for version in (0, 1, 2):
                if applied[pid] >> version & 1:
                    state.apply(record(seed, pid, dog_count, version))
            row = state.persons[pid]
            persons += 1
            h.update(person_line(pid, row))
            if links_version[pid] != NO_DOGS:
                dogs = {d["id"] for d in record(seed, pid, dog_count, links_version[pid])["dogs"]}
                if dogs:
                    links += len(dogs)
                    link_lines.write(("links\t%d\t%s\n" % (pid, ",".join(str(d) for d in sorted(dogs)))).encode())
        dogs = 0
        for did in range(1, dog_count + 1):
            if dog_name[did] != 255:
                dogs += 1
                name = DOGS[dog_name[did] // 3] + str(dog_name[did] % 3)
                h.update(("dog\t%d\t%s\t%s\n" % (did, text(name), text(BREEDS[dog_breed[did]]))).encode())
        link_lines.seek(0)
        for chunk in iter(lambda: link_lines.read(1 << 20), b""):
            h.update(chunk)
    return {"persons": persons, "dogs": dogs, "links": links, "checksum": h.hexdigest()}


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
    # Streamed in id order (the digest's order): memory stays flat at any size.
    h = hashlib.sha256()
    persons = dogs = links = 0
    for r in con.execute("SELECT id, %s FROM person ORDER BY id" % ", ".join(PERSON_COLUMNS)):
        persons += 1
        h.update(person_line(r[0], dict(zip(PERSON_COLUMNS, r[1:]))))
    for did, name, breed in con.execute("SELECT id, name, breed FROM dog ORDER BY id"):
        dogs += 1
        h.update(("dog\t%d\t%s\t%s\n" % (did, text(name), text(breed))).encode())
    # A person whose set of dogs is empty has no join rows.
    current, owned = None, []
    for pid, did in con.execute("SELECT person_id, dog_id FROM person_dogs ORDER BY person_id, dog_id"):
        if pid != current:
            if owned:
                h.update(("links\t%d\t%s\n" % (current, ",".join(str(d) for d in owned))).encode())
            current, owned = pid, []
        if not owned or owned[-1] != did:
            owned.append(did)
            links += 1
    if owned:
        h.update(("links\t%d\t%s\n" % (current, ",".join(str(d) for d in owned))).encode())
    duplicates = sum(con.execute(sql).fetchone()[0] for sql in (
        "SELECT count(*) - count(DISTINCT id) FROM person",
        "SELECT count(*) - count(DISTINCT id) FROM dog",
        "SELECT count(*) - (SELECT count(*) FROM (SELECT DISTINCT person_id, dog_id FROM person_dogs)) FROM person_dogs"))
    got = {"persons": persons, "dogs": dogs, "links": links, "checksum": h.hexdigest(), "duplicate_rows": duplicates}
    want = {"persons": expected["persons"], "dogs": expected["dogs"], "links": expected["links"],
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
