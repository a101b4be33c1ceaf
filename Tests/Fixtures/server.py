#!/usr/bin/env python3
"""A small HTTP/1.1 fixture server for Ingot's fetch tests. Loopback only; stops on SIGTERM (or, with --exit-on-eof, when stdin closes).

Serves
  /api/{films,people,planets,species}/[?page=N]   the Star Wars API from ./swapi (vendored), rendered as
                                                   (--api-slow N: the Nth request sleeps --slow seconds;
                                                   --api-fail N: the Nth request is answered 401)
                                                   the public API does: pages of 10, {count,next,previous,results},
                                                   relations as URLs http://HOST/api/people/1/
  /people/next?page=N        people pages (--people DIR, from Benchmarks/people.py) with "next" rewritten to this server's URL
  /people/link?page=N        the same pages, the next page in an RFC 8288 Link header
  /people/page?page=N        page N; past the last, an empty page
  /people/offset?offset=O&limit=L   L must be the page size; "count" holds the total
  /people/cursor[?cursor=C]  meta.next_cursor holds the next cursor
  /people/paged?page=N       page N with meta.total_pages (how many pages there are); past the last, 404
  /people/offset404?offset=O&limit=L   as offset, but past the total a 404 (as some APIs answer)
  /people/detail/ID          one person's detail ({"id": ID, "note": …}), for a for_each fan-out
  /people/notes/ID?page=N    one person's notes in 1 + ID % 3 pages ({"results": [{"id": ID, "note": …}], "next": URL|null}):
                             a paginated fan-out, the last page's note winning
  /stripe/v1/customers?limit=L[&starting_after=ID]   a Stripe list: {object: list, data, has_more, url}, 25 customers
  /twitter/1.1/followers/list.json[?cursor=C]   a Twitter v1.1 cursored list: users, next_cursor (0 at the end)
  /github/repos/octocat/hello-world   one object (a repository), not a list
  /api/{starships,vehicles}/ the Star Wars API's transports, their transport fields merged in, pilots as URLs
  /pokeapi/api/v2/pokemon?offset=O&limit=L   PokeAPI's list: {count, next, previous, results: [{name, url}]}
  /pokeapi/api/v2/pokemon/N/ one pokemon (a detail page: one object)
  /reddit/r/swift/overview.json[?after=NAME]   a Reddit listing mixing kinds: t3 links, t1 comments, one t5
  /github/repos/octocat/hello-world/issues?per_page=N&page=P   GitHub's issues, Link headers (next, last)
  /github/repos/octocat/hello-world/issues/N/comments?per_page=N&page=P   an issue's comments ([] when none), Link headers
  /export/events.jsonl?page=N   JSON Lines, 5 events a page, 3 pages, then an empty page
  /slack/api/conversations.list   channels C1 and C9 (whose history answers channel_not_found)
  /slack/api/conversations.history?channel=C&limit=L[&cursor=X]   Slack's Web API: {ok, messages, has_more,
                             response_metadata: {next_cursor}}, 5 messages; errors answered HTTP 200 as {ok: false, error}:
                             channel C1's second page says "ratelimited" the first time it is asked, C2's always
                             "channel_not_found"; any other channel: {ok: false, error: "channel_not_found"}
  /people/loop               a page whose next URL is itself; /people/stuck?cursor=C a cursor that never changes;
  /people/cycle?cursor=C     cursors A, B, C, A, … (a cycle of three)
  /control/pokeapi-drop?n=N  from now on, PokeAPI's list leaves pokemon N out (as if it were deleted)
  /control/pokeapi-gone?n=N  from now on, pokemon N's detail page answers 404 (the list still names it)
  /control/fail?n=N          the request counters start again from 0, and the Nth request to the APIs (the
                             one --faults 401:N and --api-fail N would fail) is answered 401; 0: none is
  /hn/, /npm/, /meteo/, /zendesk/, /wp/   pages that are not one array of records (cookbook_apis.py)
  POST /github/graphql, POST /es/products/_search   a JSON body asks, a cursor goes back in it (cookbook_apis.py)
  /requests                  how many requests were served, and the most /people/* requests in flight at once
  /seen                      every request so far: path, query, and the credentials it carried
  /verbatim/{next,link,cursor,page,parents,detail/…}   pages that check the request target byte for byte
                             (VERBATIM below: GitHub, Shopify, Zendesk, Stripe and JSON:API URLs with escapes, brackets
                             and "+"); a target not in the script is answered 400 naming it
  /hostile/next?to=URL       a page of one item whose "next" is URL (any scheme, any host)
  /hostile/link?to=URL       the same, URL in a Link header
  /hostile/redirect?to=URL   302 to URL
  /hostile/items?page=N      page 1: one item; later pages: a 200 HTML body (not JSON)
  /t/TENANT/PATH             PATH, for any TENANT (a secret in a base URL's path)
  /hostile/echo-encoded[-lower]   the same, the echo URL-encoded (upper- or lower-case hex)
  /hostile/echo              400 whose body echoes the request's Authorization header and query
  /hostile/big?size=N        a page of one item padded to N bytes
  /hostile/total?value=V&page=N   page N: one item (id N) with meta.total_pages and meta.total = V, as given (any JSON number)

Faults (--faults), each at the Nth request to /people/* (1-based), once:
  500:N  429:N (Retry-After: 1)  429long:N (Retry-After: 3600)  drop:N (connection closed mid-body)  truncate:N (body cut short)
  slow:N (sleeps --slow seconds before answering)  401:N
--delay S holds every /people/* answer S seconds (the latency bench); --gate N holds them until N are in flight.
--bind ADDR listens on ADDR (default 127.0.0.1; 0.0.0.0 in a container network).
--token T requires "Authorization: Bearer T" (401 otherwise) on /people/*.
--tls CERT KEY serves HTTPS (the tests use a self-signed certificate, which Ingot must refuse).
Prints "PORT <n>" on its first line once listening.

--zygote ADDR: imports everything once, listens on the Unix socket ADDR (a leading "@" names an abstract one),
and for each connection forks a server of its own: the connection sends the server's arguments as one line of
JSON (a list of strings), gets "PORT <n>" back, and the server stops when the connection closes. The zygote stops
when its stdin closes. (The tests start some hundreds of servers: a fork costs milliseconds where starting Python
and importing these modules cost about 0.09 CPU-seconds a server.)
"""
import argparse, email.utils, hashlib, json, os, select, signal, socket, sys, threading, time
import cookbook_apis  # beside this file
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

ROOT = os.path.dirname(os.path.abspath(__file__))
SWAPI = os.path.join(ROOT, "swapi")  # vendored (BSD, see swapi/LICENCE)


class State:
    lock = threading.Lock()
    requests = 0
    people_requests = 0
    api_requests = 0
    api_slow = 0  # --api-slow N: the Nth request to /api/* sleeps --slow seconds
    api_fail = 0  # --api-fail N: the Nth request to /api/* is answered 401
    seen = []
    seen_once = set()  # faults of the API shapes that happen the first time only
    faults = {}
    pokeapi_dropped = set()
    pokeapi_gone = set()
    people = []        # page bodies (parsed JSON), in order
    page_size = 0
    swapi = {}
    token = None
    slow = 3.0
    delay = 0.0
    rendered = {}      # (style, page, host) -> body bytes
    gate = threading.Condition()
    gate_size = 0      # --gate N
    gate_open = False  # once N were in flight together, later requests pass at once
    in_flight = 0
    peak = 0
    validators = ""    # --validators etag|last-modified|both: 200 answers carry them, and a match answers 304
    not_modified = 0   # 304s answered
    people_dir = None  # --people, read again by /control/reload-people


# The /verbatim/ script: per route, (the target a request must have, byte for byte, its body,
# the next URL of its Link header). "HOST" becomes this server's origin. The URLs are the real
# APIs' shapes: Zendesk's and JSON:API's page[after] with an escaped base64 cursor beside raw
# brackets, a relative next link, GitHub's and Shopify's Link headers with page_info, Stripe's
# expand[] and starting_after taken from a record, a configured query holding %2B.
VERBATIM = {
    "next": [
        ("/verbatim/next?page[size]=1&filter[tags]=c%2B%2B", {"data": [{"id": "1"}], "links": {"next": "HOST/verbatim/next?page[size]=1&page[after]=abc%2B%2Fd%3D%3D"}}, None),
        ("/verbatim/next?page[size]=1&page[after]=abc%2B%2Fd%3D%3D", {"data": [{"id": "2"}], "links": {"next": "next?cursor=a%2Bb%2Fc&q=c%2B%2B&sort=-created_at"}}, None),
        ("/verbatim/next?cursor=a%2Bb%2Fc&q=c%2B%2B&sort=-created_at", {"data": [{"id": "3"}], "links": {"next": None}}, None),
    ],
    "link": [
        ("/verbatim/link?limit=1&fields=id,title", {"data": [{"id": "1"}]}, "HOST/verbatim/link?limit=1&page_info=eyJsYXN0X2lkIjo%2BfQ%3D%3D"),
        ("/verbatim/link?limit=1&page_info=eyJsYXN0X2lkIjo%2BfQ%3D%3D", {"data": [{"id": "2"}]}, "HOST/verbatim/link?page_info=a%2Fb%2Bc&limit=1&fields=id,title"),
        ("/verbatim/link?page_info=a%2Fb%2Bc&limit=1&fields=id,title", {"data": [{"id": "3"}]}, None),
    ],
    "cursor": [
        ("/verbatim/cursor?limit=1&expand[]=data.customer", {"data": [{"id": "cus_a+b/c=="}], "has_more": True}, None),
        ("/verbatim/cursor?limit=1&expand[]=data.customer&starting_after=cus_a%2Bb%2Fc%3D%3D", {"data": [{"id": "p%2B q"}], "has_more": True}, None),
        ("/verbatim/cursor?limit=1&expand[]=data.customer&starting_after=p%252B%20q", {"data": [{"id": "last"}], "has_more": False}, None),
    ],
    "page": [
        ("/verbatim/page?q=c%2B%2B&filter[state]=open&page=1", {"data": [{"id": "1"}]}, None),
        ("/verbatim/page?q=c%2B%2B&filter[state]=open&page=2", {"data": [{"id": "2"}]}, None),
        ("/verbatim/page?q=c%2B%2B&filter[state]=open&page=3", {"data": []}, None),
        ("/verbatim/page?q=c%2B%2B&filter[state]=open&page=1&updated_since=2024-03-31T02%3A30%3A00%2B01%3A00", {"data": []}, None),
    ],
    "for_each": [
        ("/verbatim/parents", {"data": [
            {"id": "a+b/c", "tag": "x+y=z", "url": "HOST/verbatim/detail/x%2Fy?q=c%2B%2B&page[after]=abc%3D%3D"},
            {"id": "\u00fc ~", "tag": "100%", "url": "HOST/verbatim/detail/%E2%9C%93?tag=%2B"}]}, None),
        ("/verbatim/detail/a+b%2Fc?tag=x%2By%3Dz", {"id": "a+b/c"}, None),
        ("/verbatim/detail/%C3%BC%20~?tag=100%25", {"id": "\u00fc ~"}, None),
        ("/verbatim/detail/x%2Fy?q=c%2B%2B&page[after]=abc%3D%3D", {"id": "a+b/c"}, None),
        ("/verbatim/detail/%E2%9C%93?tag=%2B", {"id": "\u00fc ~"}, None),
    ],
}


def load_swapi(host):
    data = {}
    for name in ("films", "people", "planets", "species", "starships", "vehicles"):
        path = os.path.join(SWAPI, name + ".json")
        data[name] = {row["pk"]: dict(row["fields"]) for row in json.load(open(path))}
    # Starships and vehicles are served with their transport's fields merged in, as the API does.
    transport = {row["pk"]: row["fields"] for row in json.load(open(os.path.join(SWAPI, "transport.json")))}
    for kind in ("starships", "vehicles"):
        for pk, row in data[kind].items():
            merged = dict(transport.get(pk, {}))
            merged.update(row)
            data[kind][pk] = merged
    def url(kind, pk):
        return "%s/api/%s/%d/" % (host, kind, pk)
    films_of, species_of = {}, {}
    for pk, f in data["films"].items():
        for c in f.get("characters", []):
            films_of.setdefault(c, []).append(url("films", pk))
    for pk, s in data["species"].items():
        for p in s.get("people", []):
            species_of.setdefault(p, []).append(url("species", pk))
    rendered = {}
    for kind, rows in data.items():
        out = []
        for pk in sorted(rows):
            r = dict(rows[pk])
            for key, target in (("characters", "people"), ("planets", "planets"), ("people", "people"),
                                ("species", "species"), ("pilots", "people")):
                if isinstance(r.get(key), list):
                    r[key] = [url(target, x) for x in r[key]]
            if kind == "films":
                for key in ("starships", "vehicles"):
                    r[key] = [url(key, x) for x in r.get(key, [])]
            else:
                for key in ("starships", "vehicles"):
                    r.pop(key, None)
            if kind in ("people", "species") and r.get("homeworld") is not None:
                r["homeworld"] = url("planets", r["homeworld"])
            if kind == "people":
                r["films"] = films_of.get(pk, [])
                r["species"] = species_of.get(pk, [])
            r["url"] = url(kind, pk)
            out.append(r)
        rendered[kind] = out
    return rendered


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def host(self):
        # URLs in pages name the server as the client reached it (a compose service name, say).
        named = self.headers.get("Host")
        if named and all(c.isalnum() or c in ".-:[]" for c in named):
            return "http://" + named
        return "http://%s:%d" % self.server.server_address[:2]

    def send_json(self, body, status=200, headers=()):
        return self.send_raw(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(), status, headers)

    def land(self):
        """Counts this request out of flight, before any byte of its answer goes out: a client
        that starts its next request once an answer came cannot find this one still counted, so
        "peak_in_flight" never exceeds the requests the client had open at once."""
        if getattr(self, "flying", False):
            self.flying = False
            with State.gate:
                State.in_flight -= 1

    def send_raw(self, raw, status=200, headers=()):
        self.land()
        if status == 200 and State.validators:
            # Validators derived from the body: an ETag of its digest, a Last-Modified date it
            # decides too (the same body, the same date). A request naming them gets a 304.
            digest = hashlib.sha256(raw).hexdigest()
            etag = '"%s"' % digest[:20]
            modified = email.utils.formatdate(1_600_000_000 + int(digest[:7], 16), usegmt=True)
            own = []
            if State.validators in ("etag", "both"):
                own.append(("ETag", etag))
            if State.validators in ("last-modified", "both"):
                own.append(("Last-Modified", modified))
            asked_etag = self.headers.get("If-None-Match")
            asked_date = self.headers.get("If-Modified-Since")
            if (asked_etag is not None and ("ETag", asked_etag) in own) or \
                    (asked_etag is None and asked_date is not None and ("Last-Modified", asked_date) in own):
                with State.lock:
                    State.not_modified += 1
                self.send_response(304)
                for k, v in own:
                    self.send_header(k, v)
                self.end_headers()
                return b""
            headers = list(headers) + own
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)
        return raw

    def do_POST(self):
        """POST with a JSON body: the APIs of cookbook_apis.py that take one (GraphQL, search)."""
        with State.lock:
            State.requests += 1
        u = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if 0 < length <= 1 << 20 else b""
        with State.lock:
            State.seen.append({"path": u.path, "query": u.query, "target": self.path, "method": "POST",
                               "body": raw.decode("utf-8", "replace"), "content_type": self.headers.get("Content-Type"),
                               "authorization": self.headers.get("Authorization")})
            State.people_requests += 1
            fault = State.faults.pop(State.people_requests, None)
        if fault == "slow":
            time.sleep(State.slow)
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            return self.send_json({"message": "Problems parsing JSON"}, 400)
        answered = cookbook_apis.answer_post(u.path, body, self.host())
        if answered is None:
            return self.send_json({"message": "Not Found"}, 404)
        status, out, headers = answered
        return self.send_json(out, status, headers)

    def do_GET(self):
        with State.lock:
            State.requests += 1
        u = urlparse(self.path)
        if u.path.startswith("/t/") and u.path.count("/") >= 3:
            # /t/TENANT/…: a tenant's prefix (a secret of the pipeline's base URL), served as /….
            u = u._replace(path="/" + u.path.split("/", 3)[3])
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        if u.path == "/seen":
            with State.lock:
                seen = list(State.seen)
            return self.send_json(seen)
        with State.lock:
            State.seen.append({"path": u.path, "query": u.query, "target": self.path, "authorization": self.headers.get("Authorization"),
                               "if_none_match": self.headers.get("If-None-Match"),
                               "if_modified_since": self.headers.get("If-Modified-Since"),
                               "x_api_key": self.headers.get("X-Api-Key"), "x_custom": self.headers.get("X-Custom")})
        if u.path == "/control/reload-people":
            load_people(State.people_dir)
            return self.send_json({"pages": len(State.people)})
        if u.path == "/control/pokeapi-gone":
            with State.lock:
                State.pokeapi_gone.add(int(q.get("n", "0")))
            return self.send_json({"gone": sorted(State.pokeapi_gone)})
        if u.path == "/control/fail":
            n = int(q.get("n", "0"))
            with State.lock:
                State.people_requests = 0
                State.api_requests = 0
                State.faults = {n: "401"} if n > 0 else {}
                State.api_fail = n
            return self.send_json({"fail": n})
        if u.path == "/control/pokeapi-drop":
            with State.lock:
                State.pokeapi_dropped.add(int(q.get("n", "0")))
            return self.send_json({"dropped": sorted(State.pokeapi_dropped)})
        if u.path.startswith("/hostile/"):
            return self.hostile(u.path[len("/hostile/"):], q)
        if u.path.startswith("/verbatim/"):
            return self.verbatim()
        if u.path == "/requests":
            return self.send_json({"requests": State.requests, "people_requests": State.people_requests,
                                   "api_requests": State.api_requests,
                                   "not_modified": State.not_modified,
                                   "in_flight": State.in_flight, "peak_in_flight": State.peak})
        if u.path == "/control/cookbook-edit":
            return self.send_json(cookbook_apis.edit())
        if u.path.startswith("/api/"):
            with State.lock:
                State.api_requests += 1
                slow = State.api_requests == State.api_slow
                fail = State.api_requests == State.api_fail
            if slow:
                time.sleep(State.slow)
            if fail:
                return self.send_json({"detail": "Authentication credentials were not provided."}, 401)
            return self.swapi(u.path, q)
        if u.path.startswith("/stripe/") or u.path.startswith("/twitter/") or u.path.startswith("/github/") \
                or u.path.startswith("/pokeapi/") or u.path.startswith("/reddit/") or u.path.startswith("/export/") \
                or u.path.startswith("/slack/") or u.path.startswith("/jira/") or u.path.startswith("/shopify/") \
                or u.path.startswith("/notion/") or cookbook_apis.serves(u.path):
            with State.lock:
                State.people_requests += 1
                fault = State.faults.pop(State.people_requests, None)
            if fault == "404":
                return self.send_json({"detail": "Not found."}, 404)
            if fault == "401":
                return self.send_json({"detail": "unauthorized"}, 401)
            if fault == "slow":
                time.sleep(State.slow)
            return self.api(u.path, q)
        if u.path.startswith("/people/"):
            with State.lock:
                State.people_requests += 1
                n = State.people_requests
                fault = State.faults.pop(n, None)
            if State.token and self.headers.get("Authorization") != "Bearer " + State.token:
                return self.send_json({"detail": "unauthorized"}, 401)
            if fault == "500":
                return self.send_json({"detail": "boom"}, 500)
            if fault == "401":
                return self.send_json({"detail": "unauthorized"}, 401)
            if fault == "429":
                return self.send_json({"detail": "slow down"}, 429, [("Retry-After", "1")])
            if fault == "429long":
                return self.send_json({"detail": "come back in an hour"}, 429, [("Retry-After", "3600")])
            if fault == "slow":
                time.sleep(State.slow)
            with State.gate:
                State.in_flight += 1
                self.flying = True
                State.peak = max(State.peak, State.in_flight)
                State.gate.notify_all()
                if State.gate_size:
                    # Hold the answer until gate_size requests are in flight at once (10 s at most):
                    # a client that fetches fewer at a time shows it in "peak" without any timing.
                    State.gate.wait_for(lambda: State.in_flight >= State.gate_size or State.gate_open, timeout=10)
                    State.gate_open = True
            try:
                if State.delay:
                    time.sleep(State.delay)
                return self.people(u.path[len("/people/"):], q, fault)
            finally:
                self.land()
        self.send_json({"detail": "not found"}, 404)

    def verbatim(self):
        """Answers a request whose target (path and query, as sent) is in VERBATIM's script with
        that page; anything else with a 400 naming the target it got."""
        for route, pages in VERBATIM.items():
            for target, body, link in pages:
                if self.path == target:
                    h = self.host()
                    text = json.dumps(body).replace("HOST", h)
                    headers = [("Link", "<%s>; rel=\"next\"" % link.replace("HOST", h))] if link else []
                    return self.send_raw(text.encode(), 200, headers)
        return self.send_json({"error": "unexpected target", "target": self.path}, 400)

    def hostile(self, kind, q):
        to = q.get("to", "")
        if kind == "next":
            return self.send_json({"next": to, "results": [{"id": 1, "name": "one"}]})
        if kind == "link":
            return self.send_json({"results": [{"id": 1, "name": "one"}]}, 200, [("Link", '<%s>; rel="next"' % to)])
        if kind == "redirect":
            self.send_response(302)
            self.send_header("Location", to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if kind == "items":
            n = int(q.get("page", "1"))
            if n == 1:
                return self.send_json({"results": [{"id": 1, "name": "one"}]})
            raw = b"<html><body>Please log in</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            return
        if kind in ("echo-encoded", "echo-encoded-lower"):
            # The credentials echoed URL-encoded, as some servers put them in an error's link.
            from urllib.parse import quote
            raw = "%s %s" % (self.headers.get("Authorization"), urlparse(self.path).query)
            shown = quote(raw, safe="")
            if kind.endswith("lower"):
                shown = "".join(c.lower() if i > 0 and shown[i - 1] == "%" or (i > 1 and shown[i - 2] == "%") else c for i, c in enumerate(shown))
            return self.send_json({"detail": "bad credentials, see https://errors.test/?given=" + shown}, 400)
        if kind == "echo":
            return self.send_json({"detail": "bad credentials: %s %s" % (self.headers.get("Authorization"), urlparse(self.path).query)}, 400)
        if kind == "big":
            size = int(q.get("size", "1000"))
            head = b'{"results":[{"id":1,"name":"'
            tail = b'"}]}'
            return self.send_raw(head + b"x" * max(0, size - len(head) - len(tail)) + tail)
        if kind == "total":
            n = int(q.get("page", q.get("offset", "1")))
            value = q.get("value", "1").encode()
            return self.send_raw(b'{"meta":{"total_pages":' + value + b',"total":' + value + b'},"results":[{"id":' + str(n).encode() + b',"name":"one"}]}')
        self.send_json({"detail": "not found"}, 404)

    def api(self, path, q):
        """Shapes of real APIs, after their public documentation."""
        answered = cookbook_apis.answer(path, q, self.host())
        if answered is not None:
            status, body, headers = answered
            return self.send_json(body, status, headers)
        if path == "/slack/api/conversations.list":
            # Two channels: C1's history is there, C9's answers channel_not_found (HTTP 200).
            return self.send_json({"ok": True, "channels": [{"id": "C1", "name": "general"}, {"id": "C9", "name": "gone"}],
                                   "response_metadata": {"next_cursor": ""}})
        if path == "/slack/api/conversations.history":
            # https://api.slack.com/methods/conversations.history and /docs/pagination: cursors in
            # response_metadata.next_cursor ("" at the end), errors as HTTP 200 {"ok": false, "error": …}.
            messages = [{"type": "message", "user": "U%03d" % k, "text": "message %d" % k,
                         "ts": "1512085950.%06d" % (216 + k)} for k in range(5)]
            channel, limit, cursor = q.get("channel"), int(q.get("limit", "2")), q.get("cursor", "")
            start = int(cursor[len("next_ts:"):]) if cursor.startswith("next_ts:") else 0
            if channel not in ("C1", "C2") or (channel == "C2" and start > 0):
                return self.send_json({"ok": False, "error": "channel_not_found"})
            if channel == "C1" and start > 0:
                with State.lock:
                    first = "slack-ratelimited" not in State.seen_once
                    State.seen_once.add("slack-ratelimited")
                if first:
                    return self.send_json({"ok": False, "error": "ratelimited"}, 200, [("Retry-After", "0")])
            chunk = messages[start:start + limit]
            more = start + limit < len(messages)
            return self.send_json({"ok": True, "messages": chunk, "has_more": more,
                                   "response_metadata": {"next_cursor": "next_ts:%d" % (start + limit) if more else ""}})
        if path == "/jira/rest/api/3/search":
            # https://developer.atlassian.com/cloud/jira/platform/rest/v3/api-group-issue-search/:
            # startAt/maxResults/total; a sub-task nests a partial copy of its parent.
            issues = []
            for k in range(1, 8):
                fields = {"summary": "Issue %d" % k, "status": {"name": "Done" if k % 2 else "To Do"},
                          "created": "2024-01-0%dT09:00:00.000+0000" % k, "labels": ["l%d" % (k % 3)],
                          "assignee": {"accountId": "acc-%d" % (k % 2), "displayName": "User %d" % (k % 2)}}
                if k > 4:
                    fields["parent"] = {"id": "100%d" % (k - 4), "key": "PROJ-%d" % (k - 4),
                                        "fields": {"summary": "Issue %d" % (k - 4), "status": {"name": "Done"}}}
                issues.append({"id": "100%d" % k, "key": "PROJ-%d" % k, "fields": fields})
            start, size = int(q.get("startAt", "0")), int(q.get("maxResults", "50"))
            return self.send_json({"startAt": start, "maxResults": size, "total": len(issues), "issues": issues[start:start + size]})
        if path == "/shopify/admin/api/2024-01/products.json":
            # https://shopify.dev/docs/api/admin-rest/2024-01/resources/product: Link headers with
            # page_info, prices as strings, variants and options with their position.
            products = []
            for k in range(1, 6):
                variants = [{"id": k * 100 + v, "title": "Size %d" % v, "price": "%d.%02d" % (10 * k + v, 99 if v == 1 else 0),
                             "compare_at_price": None if v == 2 else "%d.00" % (20 * k), "sku": "SKU-%d-%d" % (k, v), "position": v}
                            for v in (1, 2)]
                options = [{"id": k * 10 + 1, "name": "Size", "position": 1, "values": ["Size 1", "Size 2"]}]
                products.append({"id": k, "title": "Product %d" % k, "vendor": "Acme",
                                 "updated_at": "2024-02-0%dT10:00:00-05:00" % k, "variants": variants, "options": options})
            limit = int(q.get("limit", "50"))
            start = int(q.get("page_info", "0"))
            headers = []
            if start + limit < len(products):
                headers.append(("Link", '<%s/shopify/admin/api/2024-01/products.json?limit=%d&page_info=%d>; rel="next"'
                                % (self.host(), limit, start + limit)))
            return self.send_json({"products": products[start:start + limit]}, 200, headers)
        if path == "/notion/v1/users":
            # https://developers.notion.com/reference/get-users: start_cursor, next_cursor, has_more.
            users = [{"object": "user", "id": "u-%d" % k, "type": "person" if k % 3 else "bot", "name": "Name %d" % k,
                      "avatar_url": None, **({"person": {"email": "n%d@example.com" % k}} if k % 3 else {"bot": {}})}
                     for k in range(1, 8)]
            size = int(q.get("page_size", "100"))
            start = int(q.get("start_cursor", "0"))
            more = start + size < len(users)
            return self.send_json({"object": "list", "results": users[start:start + size],
                                   "next_cursor": str(start + size) if more else None, "has_more": more})
        if path == "/stripe/v1/customers":
            # https://stripe.com/docs/api/pagination: `starting_after` is the last object's id,
            # `has_more` says whether another page follows.
            customers = [{"id": "cus_%04d" % k, "object": "customer", "email": "c%d@example.com" % k, "created": 1700000000 + k,
                          "metadata": {"tier": "gold" if k % 3 == 0 else "basic"}} for k in range(1, 26)]
            limit = int(q.get("limit", "10"))
            after = q.get("starting_after")
            start = 0
            if after is not None:
                ids = [c["id"] for c in customers]
                if after not in ids:
                    return self.send_json({"error": {"type": "invalid_request_error", "message": "No such customer: %s" % after}}, 400)
                start = ids.index(after) + 1
            chunk = customers[start:start + limit]
            return self.send_json({"object": "list", "url": "/v1/customers", "has_more": start + limit < len(customers), "data": chunk})
        if path == "/twitter/1.1/followers/list.json":
            # https://developer.twitter.com/en/docs/pagination: cursors, next_cursor 0 at the end.
            users = [{"id": 1000 + k, "id_str": str(1000 + k), "screen_name": "user%d" % k, "followers_count": k * 7}
                     for k in range(1, 31)]
            cursor = int(q.get("cursor", "-1"))
            index = 0 if cursor == -1 else (cursor - 1700000000000) // 1000
            if cursor != -1 and not (0 < index < 3):
                return self.send_json({"errors": [{"code": 44, "message": "cursor parameter is invalid"}]}, 400)
            chunk = users[index * 10:(index + 1) * 10]
            nxt = 1700000000000 + (index + 1) * 1000 if index < 2 else 0
            prev = 0 if index == 0 else 1700000000000 + (index - 1) * 1000
            return self.send_json({"users": chunk, "next_cursor": nxt, "next_cursor_str": str(nxt),
                                   "previous_cursor": prev, "previous_cursor_str": str(prev)})
        if path.startswith("/pokeapi/api/v2/pokemon"):
            # https://pokeapi.co/docs/v2#resource-listspagination-section: a named list, then a
            # detail page per entry, at the entry's url.
            names = ["bulbasaur", "ivysaur", "venusaur", "charmander", "charmeleon", "charizard", "squirtle", "wartortle",
                     "blastoise", "caterpie", "metapod", "butterfree", "weedle", "kakuna", "beedrill", "pidgey", "pidgeotto",
                     "pidgeot", "rattata", "raticate", "spearow", "fearow", "ekans", "arbok", "pikachu"]
            types = ["grass", "poison", "fire", "flying", "water", "bug", "normal", "electric"]
            base = self.host() + "/pokeapi/api/v2/pokemon/"
            rest = path[len("/pokeapi/api/v2/pokemon"):].strip("/")
            if rest:
                if not rest.isdigit() or not 1 <= int(rest) <= len(names) or int(rest) in State.pokeapi_gone:
                    return self.send_json({"detail": "Not found."}, 404)
                n = int(rest)
                return self.send_json({"id": n, "name": names[n - 1], "height": 3 + n, "weight": 40 + 7 * n, "base_experience": 60 + n,
                                       "types": [{"slot": 1, "type": {"name": types[n % len(types)],
                                                                        "url": self.host() + "/pokeapi/api/v2/type/%d/" % (n % len(types) + 1)}}]})
            offset, limit = int(q.get("offset", "0")), int(q.get("limit", "20"))
            listed = [k for k in range(len(names)) if k + 1 not in State.pokeapi_dropped]
            chunk = [{"name": names[k], "url": base + "%d/" % (k + 1)} for k in listed[offset:offset + limit]]
            nxt = base + "?offset=%d&limit=%d" % (offset + limit, limit) if offset + limit < len(listed) else None
            return self.send_json({"count": len(listed), "next": nxt, "previous": None, "results": chunk})
        if path == "/reddit/r/swift/overview.json":
            # https://www.reddit.com/dev/api: {kind: Listing, data: {after, children: [{kind, data}]}},
            # things of several kinds (t1 comment, t3 link, t5 subreddit) in one listing.
            things = []
            for k in range(1, 13):
                if k % 3 == 0:
                    things.append({"kind": "t1", "data": {"name": "t1_c%d" % k, "id": "c%d" % k, "body": "comment %d" % k,
                                                          "link_id": "t3_l%d" % (k - 1), "score": k}})
                else:
                    things.append({"kind": "t3", "data": {"name": "t3_l%d" % k, "id": "l%d" % k, "title": "link %d" % k,
                                                          "score": 10 * k, "subreddit_id": "t5_2qh0u", "subreddit": "swift"}})
            things.insert(5, {"kind": "t5", "data": {"name": "t5_2qh0u", "display_name": "swift"}})
            after = q.get("after")
            names = [t["data"]["name"] for t in things]
            start = names.index(after) + 1 if after in names else 0
            chunk = things[start:start + 7]
            nxt = chunk[-1]["data"]["name"] if start + 7 < len(things) else None
            return self.send_json({"kind": "Listing", "data": {"after": nxt, "dist": len(chunk), "children": chunk, "before": None}})
        if path == "/export/events.jsonl":
            page = int(q.get("page", "1"))
            lines = ['{"id": "e%d", "type": "%s", "n": %d}' % (k, "push" if k % 2 else "watch", k)
                     for k in range((page - 1) * 5 + 1, page * 5 + 1)] if page <= 3 else []
            body = ("\n".join(lines) + ("\n" if lines else "")).encode()
            return self.send_raw(body, 200, [("Content-Type", "application/x-ndjson")])
        if path.startswith("/github/repos/octocat/hello-world/issues"):
            # https://docs.github.com/rest/issues: arrays, paginated with Link headers.
            def paged(items, base):
                per_page, page = int(q.get("per_page", "30")), int(q.get("page", "1"))
                last = max(1, (len(items) + per_page - 1) // per_page)
                links = []
                if page < last:
                    links.append('<%s?per_page=%d&page=%d>; rel="next"' % (base, per_page, page + 1))
                    links.append('<%s?per_page=%d&page=%d>; rel="last"' % (base, per_page, last))
                chunk = items[(page - 1) * per_page: page * per_page]
                return self.send_json(chunk, 200, [("Link", ", ".join(links))] if links else [])
            users = [{"login": "octocat", "id": 1, "type": "User"}, {"login": "hubot", "id": 2, "type": "Bot"}]
            comments_of = {n: (n * 7) % 4 for n in range(1, 8)}   # 0 to 3 comments each
            rest = path[len("/github/repos/octocat/hello-world/issues"):]
            base = self.host() + path
            if rest == "":
                issues = [{"id": 1000 + n, "number": n, "title": "issue %d" % n, "state": "open" if n % 2 else "closed",
                           "created_at": "2024-01-%02dT10:00:00Z" % n, "user": users[n % 2]} for n in range(7, 0, -1)]
                return paged(issues, base)
            parts = rest.strip("/").split("/")
            if len(parts) == 2 and parts[0].isdigit() and parts[1] == "comments" and int(parts[0]) in comments_of:
                n = int(parts[0])
                comments = [{"id": 5000 + 10 * n + k, "body": "comment %d on %d" % (k, n), "user": users[k % 2],
                             "created_at": "2024-02-01T00:00:0%dZ" % k} for k in range(comments_of[n])]
                return paged(comments, base)
            return self.send_json({"message": "Not Found"}, 404)
        if path == "/github/users":
            # https://docs.github.com/rest/users/users#list-users: by id, `since` the last id seen,
            # the next page in a Link header only.
            users = [{"login": "user%d" % k, "id": 100 + k, "avatar_url": "https://avatars.example/%d" % k,
                      "type": "Organization" if k % 4 == 0 else "User", "site_admin": k == 1} for k in range(1, 9)]
            per_page, since = int(q.get("per_page", "30")), int(q.get("since", "0"))
            chunk = [u for u in users if u["id"] > since][:per_page]
            headers = []
            if chunk and chunk[-1]["id"] < users[-1]["id"]:
                headers.append(("Link", '<%s/github/users?per_page=%d&since=%d>; rel="next"' % (self.host(), per_page, chunk[-1]["id"])))
            return self.send_json(chunk, 200, headers)
        if path == "/github/repos/octocat/hello-world":
            return self.send_json({"id": 1296269, "name": "Hello-World", "full_name": "octocat/Hello-World",
                                   "owner": {"login": "octocat", "id": 1, "type": "User"}, "private": False,
                                   "stargazers_count": 80, "topics": ["octocat", "api"]})
        self.send_json({"message": "Not Found"}, 404)

    def swapi(self, path, q):
        parts = [p for p in path.split("/") if p]
        if len(parts) < 2 or parts[1] not in State.swapi:
            return self.send_json({"detail": "not found"}, 404)
        rows = State.swapi[parts[1]]
        if len(parts) == 3:
            match = [r for r in rows if r["url"].endswith("/%s/%s/" % (parts[1], parts[2]))]
            return self.send_json(match[0]) if match else self.send_json({"detail": "not found"}, 404)
        page = int(q.get("page", "1"))
        chunk = rows[(page - 1) * 10: page * 10]
        if not chunk:
            return self.send_json({"detail": "not found"}, 404)
        base = "%s/api/%s/" % (self.host(), parts[1])
        nxt = base + "?page=%d" % (page + 1) if page * 10 < len(rows) else None
        prev = base + "?page=%d" % (page - 1) if page > 1 else None
        self.send_json({"count": len(rows), "next": nxt, "previous": prev, "results": chunk})

    def people(self, style, q, fault):
        pages = State.people
        host = self.host()
        if style.startswith("detail/"):
            # One person's detail page, for a for_each fan-out over the people pages.
            ident = style[len("detail/"):]
            if not ident.isdigit():
                return self.send_json({"detail": "not found"}, 404)
            return self.send_json({"id": int(ident), "note": "detail of %s" % ident})
        if style.startswith("notes/"):
            ident = style[len("notes/"):]
            if not ident.isdigit():
                return self.send_json({"detail": "not found"}, 404)
            n, last = int(q.get("page", "1")), 1 + int(ident) % 3
            if not 1 <= n <= last:
                return self.send_json({"detail": "no such page"}, 404)
            nxt = "%s/people/notes/%s?page=%d" % (host, ident, n + 1) if n < last else None
            return self.send_json({"results": [{"id": int(ident), "note": "note %d of %s" % (n, ident)}], "next": nxt})
        if style in ("next", "link", "page", "paged"):
            n = int(q.get("page", "1"))
            if style == "paged" and not 1 <= n <= len(pages):
                return self.send_json({"detail": "no such page"}, 404)
        elif style in ("offset", "offset404"):
            limit = int(q.get("limit", "0"))
            if limit != State.page_size:
                return self.send_json({"detail": "limit must be %d" % State.page_size}, 400)
            n = int(q.get("offset", "0")) // limit + 1
            if style == "offset404" and n > len(pages):
                return self.send_json({"detail": "offset past the end"}, 404)
        elif style == "cursor":
            n = int(q.get("cursor", "c1")[1:])
        elif style == "loop":
            return self.send_json({"next": host + "/people/loop", "results": [{"id": 1}]})
        elif style == "stuck":
            return self.send_json({"meta": {"next_cursor": "same"}, "results": [{"id": 1}]})
        elif style == "cycle":
            # A, B, C, A, B, C…: a cursor cycle of three.
            following = {"": "A", "A": "B", "B": "C", "C": "A"}[q.get("cursor", "")]
            return self.send_json({"meta": {"next_cursor": following}, "results": [{"id": len(following)}]})
        else:
            return self.send_json({"detail": "not found"}, 404)
        if 1 <= n <= len(pages) and isinstance(pages[n - 1], str):
            return self.send_raw(pages[n - 1].encode())
        body = dict(pages[n - 1]) if 1 <= n <= len(pages) else {"count": State.total, "next": None, "results": []}
        headers = []
        has_next = n < len(pages)
        if style == "next":
            body["next"] = "%s/people/next?page=%d" % (host, n + 1) if has_next else None
        else:
            body.pop("next", None)
        if style == "link" and has_next:
            headers.append(("Link", '<%s/people/link?page=%d>; rel="next"' % (host, n + 1)))
        if style == "cursor":
            body["meta"] = {"next_cursor": "c%d" % (n + 1) if has_next else None}
        if style in ("offset", "offset404"):
            body["count"] = State.total
        if style == "paged":
            body["meta"] = {"total_pages": len(pages)}
        key = (style, n, host)
        raw = State.rendered.get(key)
        if raw is None:
            # Rendered once per page and host: the latency bench measures the client, not json.dumps.
            raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
            with State.lock:
                State.rendered[key] = raw
        if fault in ("drop", "truncate"):
            self.land()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw[: len(raw) // 2])
            self.wfile.flush()
            if fault == "drop":
                self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.send_raw(raw, 200, headers)


def load_people(directory):
    """The people pages of a Benchmarks/people.py directory, in order (read again on
    /control/reload-people, after a test changed a page)."""
    names = sorted(f for f in os.listdir(directory) if f.startswith("page-"))
    people = []
    for f in names:
        text = open(os.path.join(directory, f), encoding="utf-8").read()
        try:
            people.append(json.loads(text))
        except ValueError:
            people.append(text)  # an invalid page is served as it is
    with State.lock:
        State.people_dir = directory
        State.people = people
        State.rendered = {}
        State.page_size = max((len(p.get("results", [])) for p in people if isinstance(p, dict)), default=0)
        State.total = sum(len(p.get("results", [])) for p in people if isinstance(p, dict))


def main(argv=None, control=None):
    """Serves as the arguments `argv` say; with `control` (a connected socket), says PORT to it and
    stops when it closes, instead of printing PORT and watching stdin."""
    a = argparse.ArgumentParser()
    a.add_argument("--port", type=int, default=0)
    a.add_argument("--bind", default="127.0.0.1", help="the address to listen on (a container network needs 0.0.0.0)")
    a.add_argument("--gate", type=int, default=0, help="hold /people/* answers until N are in flight at once (then open)")
    a.add_argument("--delay", type=float, default=0.0, help="seconds every /people/* answer waits (a latency bench)")
    a.add_argument("--people", help="a Benchmarks/people.py output directory")
    a.add_argument("--faults", default="", help="comma-separated KIND:N")
    a.add_argument("--token")
    a.add_argument("--slow", type=float, default=3.0)
    a.add_argument("--api-slow", type=int, default=0, help="the Nth request to /api/* sleeps --slow seconds")
    a.add_argument("--api-fail", type=int, default=0, help="the Nth request to /api/* is answered 401")
    a.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"), help="serve HTTPS with this certificate")
    a.add_argument("--validators", default="", choices=["", "etag", "last-modified", "both"],
                   help="answers carry an ETag and/or Last-Modified, and a conditional request that matches gets a 304")
    a.add_argument("--exit-on-eof", action="store_true", help="stop when standard input closes (tests hold a pipe)")
    a.add_argument("--zygote", metavar="ADDR", help="fork a server for each connection to the Unix socket ADDR")
    args = a.parse_args(argv)
    if args.zygote:
        return zygote(args.zygote)
    if args.people:
        load_people(args.people)
    State.validators = args.validators
    for spec in filter(None, args.faults.split(",")):
        kind, n = spec.split(":")
        State.faults[int(n)] = kind
    State.token = args.token
    State.slow = args.slow
    State.api_slow = args.api_slow
    State.api_fail = args.api_fail
    State.delay = args.delay
    State.gate_size = args.gate
    # socketserver listens with a backlog of 5: an eighth simultaneous connect overflows it and
    # the kernel drops the SYN, which the client resends a second later (a 1 s stall that looked
    # like the client's). A real server's backlog is larger.
    ThreadingHTTPServer.request_queue_size = 128
    server = ThreadingHTTPServer((args.bind, args.port), Handler)
    server.daemon_threads = True
    scheme = "http"
    if args.tls:
        import ssl
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*args.tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    server.handle_error = lambda request, address: None  # clients killed mid-transfer are expected here
    State.swapi = load_swapi("%s://127.0.0.1:%d" % (scheme, server.server_address[1]))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    if control is not None:
        control.sendall(b"PORT %d\n" % server.server_address[1])
        threading.Thread(target=lambda: (control.recv(1), os._exit(0)), daemon=True).start()
    else:
        print("PORT %d" % server.server_address[1], flush=True)
        if args.exit_on_eof:
            threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    server.serve_forever()


def zygote(address):
    """--zygote: one process that has imported everything forks each server (the module's docstring)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + address[1:] if address.startswith("@") else address)
    listener.listen(128)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the servers
    print("READY", flush=True)
    stdin = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([listener, stdin], [], [])
        if stdin in ready and not os.read(stdin, 4096):
            os._exit(0)
        if listener not in ready:
            continue
        control, _ = listener.accept()
        if os.fork() != 0:
            control.close()
            continue
        # The server: single-threaded until here, as fork needs.
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        try:
            line = b""
            while not line.endswith(b"\n"):
                chunk = control.recv(4096)
                if not chunk:
                    os._exit(0)
                line += chunk
            main(json.loads(line), control)
        except BaseException as error:
            sys.stderr.write("fixture server: %r\n" % (error,))
            os._exit(1)
        os._exit(0)


if __name__ == "__main__":
    main()
