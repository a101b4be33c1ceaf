"""APIs whose pages are not one array of records, shaped after their public documentation, for
server.py (docs/cookbook.md's recipes for them; CookbookTests).

  /hn/v0/topstories.json                 Hacker News: a list of bare ids
  /hn/v0/item/ID.json                    one item (story or comment), `null` for an id it does not know
  /npm/PACKAGE                           the npm registry's packument: versions as a dictionary by version
  /meteo/v1/forecast?…                   Open-Meteo: hourly values as parallel arrays (columns)
  /zendesk/api/v2/tickets.json?per_page=N[&page=P]   Zendesk tickets, custom fields as [{id, value}], next_page URLs
  /wp/wp-json/wp/v2/posts?per_page=N&page=P          WordPress posts, the totals in X-WP-Total(Pages) headers,
                                                     a page past the last answered 400
  POST /github/graphql                   GitHub's GraphQL API: issues, 2 a page, `after: $cursor` from variables.cursor,
                                         pageInfo {hasNextPage endCursor}; a query without `issues` answers {"errors": […]}, HTTP 200
  /notion/v1/blocks/ID/children?page_size=N[&start_cursor=C]
                                         Notion's block children: {results, next_cursor, has_more}, blocks
                                         nested four levels (`has_children`), 404 for an unknown block
  /gitlab/api/v4/projects/278964/issues?per_page=N&page=P
                                         GitLab's issues: Link, X-Next-Page, X-Total-Pages headers on every page
  POST /notion/v1/search                 Notion's search: {query, filter, page_size, start_cursor} → {results, next_cursor, has_more}
  POST /es/products/_search              Elasticsearch: hits sorted by [updated, id], `search_after` the last hit's `sort`
  /contentful/spaces/cfexample/environments/master/sync?initial=true | ?sync_token=T
                                         Contentful's sync: entries in pages (nextPageUrl), the last page's nextSyncUrl
                                         starts the next sync, which answers what changed since: entries and
                                         DeletedEntry tombstones
  /control/cookbook-edit                 from now on every API above answers its edited data set
                                         (values changed, records added and removed), for a refresh
Their requests are counted and take server.py's --faults as the other APIs' do.
"""

import base64

EDITED = {"on": False}


def edit():
    EDITED["on"] = True
    return {"edited": True}


def hn(path, host):
    """https://github.com/HackerNews/API: ids, then each item alone."""
    top = [8863, 8870, 8881] + ([8890] if EDITED["on"] else [])
    items = {
        8863: {"by": "dhouston", "descendants": 2, "id": 8863, "kids": [8952, 9224], "score": 150 if EDITED["on"] else 111,
               "time": 1175714200, "title": "My YC app: Dropbox - Throw away your USB drive", "type": "story",
               "url": "http://www.getdropbox.com/u/2/screencast.html"},
        8870: {"by": "pg", "descendants": 0, "id": 8870, "kids": [], "score": 12, "time": 1175720000,
               "title": "Ask HN: \u00e9t\u00e9", "type": "story", "text": "<p>Plain text</p>"},
        8890: {"by": "sama", "id": 8890, "score": 3, "time": 1175730000, "title": "New", "type": "story"},
        8952: {"by": "nickb", "id": 8952, "kids": [9153], "parent": 8863, "time": 1175816820, "type": "comment",
               "text": "The only problem is that it will be hard to explain" + (" (edited)" if EDITED["on"] else "")},
        9224: {"by": "BrandonM", "id": 9224, "kids": [], "parent": 8863, "time": 1175906570, "type": "comment",
               "text": "For a Linux user, you can already build such a system yourself"},
        # A thread three replies deep; 9153 also lists 9224, which a story listed already (a
        # fan-out across levels requests it once).
        9153: {"by": "dhouston", "id": 9153, "kids": [9180, 9224], "parent": 8952, "time": 1175826820, "type": "comment",
               "text": "Explaining it is the hard part"},
        9180: {"by": "pg", "id": 9180, "kids": [9190], "parent": 9153, "time": 1175836820, "type": "comment",
               "text": "Show, do not tell"},
        9190: {"by": "nickb", "id": 9190, "kids": [], "parent": 9180, "time": 1175846820, "type": "comment",
               "text": "Four levels down"},
    }
    if path == "/hn/v0/topstories.json":
        return 200, top, []
    if path.startswith("/hn/v0/item/") and path.endswith(".json"):
        ident = path[len("/hn/v0/item/"):-len(".json")]
        # An id the API does not know is answered `null`, HTTP 200.
        return 200, items.get(int(ident)) if ident.isdigit() else None, []
    return None


def npm(path, host):
    """https://github.com/npm/registry/blob/main/docs/REGISTRY-API.md: a packument."""
    if path != "/npm/left-pad":
        return 404, {"error": "Not found"}, []
    numbers = ["0.0.3", "1.0.0", "1.1.0", "1.3.0"] + (["1.3.1"] if EDITED["on"] else [])
    if EDITED["on"]:
        numbers.remove("1.1.0")  # unpublished
    versions = {}
    for n in numbers:
        versions[n] = {"name": "left-pad", "version": n, "_id": "left-pad@" + n,
                       "description": "String left pad", "license": "WTFPL" if n < "1.3.0" else "MIT",
                       "dist": {"shasum": (n.replace(".", "") * 14)[:40],
                                "tarball": "https://registry.npmjs.org/left-pad/-/left-pad-%s.tgz" % n}}
    if "1.3.0" in versions:
        versions["1.3.0"]["deprecated"] = "use String.prototype.padStart()"
    time_ = {"created": "2014-03-14T07:35:00.000Z", "modified": "2018-04-09T23:19:58.000Z"}
    for k, n in enumerate(numbers):
        time_[n] = "201%d-0%d-14T07:35:00.000Z" % (4 + k, 3 + k)
    return 200, {"_id": "left-pad", "name": "left-pad", "dist-tags": {"latest": numbers[-1]},
                 "versions": versions, "time": time_, "license": "WTFPL"}, []


def meteo(path, host):
    """https://open-meteo.com/en/docs: `hourly` holds one array per variable, `time` among them."""
    if path != "/meteo/v1/forecast":
        return None
    hours = ["2026-12-06T%02d:00" % h for h in range(6)]
    temperature = [1.5, 1.25, 0.8, -0.5, -1.0, -1.25]
    precipitation = [0.0, 0.0, 0.3, None, 0.1, 0.0]
    if EDITED["on"]:
        temperature[2], precipitation[3] = 0.9, 0.2
    return 200, {"latitude": 52.52, "longitude": 13.419998, "generationtime_ms": 0.03, "utc_offset_seconds": 0,
                 "timezone": "GMT", "timezone_abbreviation": "GMT", "elevation": 38.0,
                 "hourly_units": {"time": "iso8601", "temperature_2m": "\u00b0C", "precipitation": "mm"},
                 "hourly": {"time": hours, "temperature_2m": temperature, "precipitation": precipitation}}, []


def zendesk(path, q, host):
    """https://developer.zendesk.com/api-reference/ticketing/tickets/tickets/: offset pages with
    next_page URLs; custom fields as an array of {id, value}."""
    if path != "/zendesk/api/v2/tickets.json":
        return None
    tickets = []
    for k in range(1, 6):
        tickets.append({
            "id": 100 + k, "subject": "Ticket %d" % k, "status": "open" if k % 2 else "solved",
            "requester_id": 900 + k % 2, "created_at": "2024-03-0%dT10:00:00Z" % k,
            "custom_fields": [{"id": 360001234, "value": "gold" if k % 2 else "basic"},
                              {"id": 360005678, "value": k % 3 == 0},
                              {"id": 360009999, "value": None}],
            "tags": ["t%d" % k]})
    if EDITED["on"]:
        tickets[1]["custom_fields"][0]["value"] = "platinum"
        tickets[1]["status"] = "closed"
    for t in tickets:
        t["group_id"] = 70 + t["id"] % 2
    size = int(q.get("per_page", "100"))
    page = int(q.get("page", "1"))
    start = (page - 1) * size
    include = [part for part in q.get("include", "").split(",") if part]
    extra = ("&include=" + ",".join(include)) if include else ""
    following = "%s/zendesk/api/v2/tickets.json?page=%d&per_page=%d%s" % (host, page + 1, size, extra) if start + size < len(tickets) else None
    shown = tickets[start:start + size]
    out = {"tickets": shown, "next_page": following, "previous_page": None, "count": len(tickets)}
    # Sideloads (https://developer.zendesk.com/documentation/ticketing/using-the-zendesk-api/side_loading/):
    # the users and groups the page's tickets name, beside them.
    if "users" in include:
        names = {900: "Ada", 901: "Grace Hopper" if EDITED["on"] else "Grace"}
        out["users"] = [{"id": i, "name": names[i], "email": "u%d@example.com" % i, "role": "end-user"}
                        for i in sorted({t["requester_id"] for t in shown})]
    if "groups" in include:
        out["groups"] = [{"id": g, "name": "Tier %d" % (g - 69)} for g in sorted({t["group_id"] for t in shown})]
    return 200, out, []


def wordpress(path, q, host):
    """https://developer.wordpress.org/rest-api/using-the-rest-api/pagination/: the totals in
    headers; a page past the last is an error, HTTP 400."""
    if path != "/wp/wp-json/wp/v2/posts":
        return None
    ids = [1, 2, 3, 5, 8] if not EDITED["on"] else [1, 2, 5, 8, 13]  # post 3 trashed, 13 published
    posts = [{"id": i, "date": "2024-01-%02dT09:30:00" % i, "date_gmt": "2024-01-%02dT08:30:00" % i,
              "modified_gmt": "2024-02-%02dT08:30:00" % i, "slug": "post-%d" % i, "status": "publish",
              "title": {"rendered": "Post %d" % i + (" (edited)" if EDITED["on"] and i == 2 else "")},
              "author": 1 + i % 2, "categories": [1] if i % 2 else [1, 4]} for i in ids]
    size = int(q.get("per_page", "10"))
    page = int(q.get("page", "1"))
    pages = (len(posts) + size - 1) // size
    if page > pages or page < 1:
        return 400, {"code": "rest_post_invalid_page_number",
                     "message": "The page number requested is larger than the number of pages available.",
                     "data": {"status": 400}}, []
    return 200, posts[(page - 1) * size:page * size], [("X-WP-Total", str(len(posts))), ("X-WP-TotalPages", str(pages))]


def github_graphql(body, host):
    """https://docs.github.com/en/graphql/guides/using-pagination-in-the-graphql-api"""
    query = body.get("query") if isinstance(body, dict) else None
    if not isinstance(query, str) or "issues" not in query:
        return 200, {"errors": [{"type": "INVALID", "message": "Field 'isues' doesn't exist on type 'Repository'"}]}, []
    variables = body.get("variables") or {}
    numbers = [1, 2, 3, 4, 5] + ([6] if EDITED["on"] else [])
    issues = [{"number": n, "title": "Report %d" % n, "state": "CLOSED" if (n == 2 and EDITED["on"]) or n == 4 else "OPEN",
               "createdAt": "2024-05-0%dT12:00:00Z" % n, "author": {"login": "user%d" % (n % 2)}} for n in numbers]
    cursor = variables.get("cursor")
    start = int(base64.b64decode(cursor).decode().split(":")[1]) if isinstance(cursor, str) else 0
    page = issues[start:start + 2]
    end = start + len(page)
    return 200, {"data": {"repository": {"issues": {
        "totalCount": len(issues),
        "pageInfo": {"hasNextPage": end < len(issues),
                     "endCursor": base64.b64encode(("cursor:%d" % end).encode()).decode() if page else None},
        "nodes": page}}}}, []


def elasticsearch(body, host):
    """https://www.elastic.co/guide/en/elasticsearch/reference/current/paginate-search-results.html#search-after"""
    products = [{"id": "p%d" % k, "name": "Product %d" % k, "price": 10 * k + (0.5 if k % 2 else 0),
                 "updated": 1700000000 + (k % 3) * 100} for k in range(1, 8)]
    if EDITED["on"]:
        products = [p for p in products if p["id"] != "p3"]
        products[0]["price"] = 99.0
    products.sort(key=lambda p: (p["updated"], p["id"]))
    after = body.get("search_after") if isinstance(body, dict) else None
    if after is not None:
        products = [p for p in products if (p["updated"], p["id"]) > tuple(after)]
    size = body.get("size", 10) if isinstance(body, dict) else 10
    hits = [{"_index": "products", "_id": p["id"], "_score": None, "_source": p, "sort": [p["updated"], p["id"]]}
            for p in products[:size]]
    return 200, {"took": 1, "timed_out": False, "hits": {"total": {"value": 7, "relation": "eq"}, "hits": hits}}, []


def contentful(path, q, host):
    """https://www.contentful.com/developers/docs/concepts/sync/: an initial sync in pages, then
    deltas from the token the last page gave."""
    if path != "/contentful/spaces/cfexample/environments/master/sync":
        return None

    def entry(n, revision=1, title=None):
        return {"sys": {"type": "Entry", "id": "e%d" % n, "revision": revision,
                        "contentType": {"sys": {"type": "Link", "linkType": "ContentType", "id": "product"}},
                        "createdAt": "2024-06-0%dT10:00:00.000Z" % n, "updatedAt": "2024-06-0%dT1%d:00:00.000Z" % (n, revision)},
                "fields": {"title": {"en-US": title or "Product %d" % n}}}

    edited = EDITED["on"]
    current = [entry(1), entry(3, 2, "Product 3 (renamed)") if edited else entry(3), entry(4)] + ([entry(5)] if edited else [])
    if not edited:
        current.insert(1, entry(2))
    base = "%s/contentful/spaces/cfexample/environments/master/sync" % host
    token = q.get("sync_token")
    if q.get("initial") == "true" or token in ("p1",):
        # The initial sync: every entry as it is now, two a page.
        page = 0 if token is None else 1
        items = current[2 * page:2 * page + 2]
        done = 2 * page + 2 >= len(current)
        tail = {"nextSyncUrl": base + "?sync_token=" + ("t2" if edited else "t1")} if done else {"nextPageUrl": base + "?sync_token=p1"}
        return 200, {"sys": {"type": "Array"}, "items": items, **tail}, []
    if token == "t1":
        # What changed since t1: nothing, or (edited) e2 deleted, e3 renamed, e5 created.
        items = [] if not edited else [
            {"sys": {"type": "DeletedEntry", "id": "e2", "deletedAt": "2024-07-01T00:00:00.000Z"}},
            entry(3, 2, "Product 3 (renamed)"), entry(5)]
        return 200, {"sys": {"type": "Array"}, "items": items, "nextSyncUrl": base + "?sync_token=" + ("t2" if edited else "t1")}, []
    if token == "t2":
        return 200, {"sys": {"type": "Array"}, "items": [], "nextSyncUrl": base + "?sync_token=t2"}, []
    return 400, {"sys": {"type": "Error", "id": "BadRequest"}, "message": "unknown sync token"}, []


def notion_search(body, host):
    """https://developers.notion.com/reference/post-search: the cursor goes back as start_cursor."""
    pages = [{"object": "page", "id": "pg-%d" % k, "created_time": "2024-0%d-01T10:00:00.000Z" % k,
              "last_edited_time": "2024-0%d-02T10:00:00.000Z" % k, "archived": False, "url": "https://www.notion.so/pg-%d" % k,
              "properties": {"title": {"id": "title", "type": "title", "title": [{"plain_text": "Page %d" % k}]}}}
             for k in range(1, 6)]
    if EDITED["on"]:
        pages[0]["properties"]["title"]["title"][0]["plain_text"] = "Page 1 (renamed)"
        pages[0]["last_edited_time"] = "2024-07-01T10:00:00.000Z"
    if not isinstance(body, dict) or body.get("filter", {}).get("value") != "page":
        return 400, {"object": "error", "status": 400, "code": "validation_error", "message": "filter.value should be page"}, []
    size = int(body.get("page_size", 100))
    start = int(body.get("start_cursor") or 0)
    more = start + size < len(pages)
    return 200, {"object": "list", "results": pages[start:start + size], "next_cursor": str(start + size) if more else None,
                 "has_more": more, "type": "page_or_database"}, []


def notion_blocks(path, q, host):
    """https://developers.notion.com/reference/get-block-children: a block's children, `page_size`
    a page, `start_cursor` → {results, next_cursor, has_more}; a block with children says
    `has_children: true`, and its children are its own request. A page of five blocks, nested four
    levels down under the toggle; an id that is no block is answered 404 (object_not_found)."""
    tree = {
        "pg-root": [("b1", "heading_1", "Plan"), ("b2", "toggle", "Details"), ("b3", "paragraph", "Intro"),
                    ("b4", "bulleted_list_item", "Steps"), ("b5", "paragraph", "End")],
        "b2": [("b21", "paragraph", "First detail"), ("b22", "toggle", "Deeper"), ("b23", "paragraph", "Last detail")],
        "b22": [("b221", "paragraph", "Deep text"), ("b222", "to_do", "Check it")],
        "b222": [("b2221", "paragraph", "Four levels down")],
        "b4": [("b41", "bulleted_list_item", "Step one"), ("b42", "bulleted_list_item", "Step two")],
        "b42": [("b421", "paragraph", "A note on step two")],
    }
    if EDITED["on"]:
        tree["b2"][0] = ("b21", "paragraph", "First detail (edited)")
        tree["b2"].append(("b24", "paragraph", "Added"))
    parts = path.split("/")  # /notion/v1/blocks/ID/children
    if len(parts) != 6 or parts[5] != "children" or parts[4] not in tree and not any(
            parts[4] == b for kids in tree.values() for b, _, _ in kids):
        return 404, {"object": "error", "status": 404, "code": "object_not_found",
                     "message": "Could not find block with ID: %s." % (parts[4] if len(parts) > 4 else "")}, []
    parent = parts[4]
    kids = tree.get(parent, [])

    def block(bid, kind, text):
        edited = EDITED["on"] and bid in ("b21", "b24")
        content = {"rich_text": [{"type": "text", "text": {"content": text, "link": None}, "plain_text": text, "href": None}],
                   "color": "default"}
        if kind == "to_do":
            content["checked"] = False
        return {"object": "block", "id": bid,
                "parent": {"type": "page_id", "page_id": parent} if parent == "pg-root" else {"type": "block_id", "block_id": parent},
                "created_time": "2024-03-01T10:00:00.000Z",
                "last_edited_time": "2024-05-01T10:00:00.000Z" if edited else "2024-03-02T10:00:00.000Z",
                "created_by": {"object": "user", "id": "u-1"}, "has_children": bid in tree, "archived": False,
                "in_trash": False, "type": kind, kind: content}
    size = int(q.get("page_size", "100"))
    start = int(q.get("start_cursor") or 0)
    more = start + size < len(kids)
    return 200, {"object": "list", "results": [block(*k) for k in kids[start:start + size]],
                 "next_cursor": str(start + size) if more else None, "has_more": more, "type": "block", "block": {}}, []


def gitlab(path, q, host):
    """https://docs.gitlab.com/ee/api/issues.html and rest/#pagination: a project's issues by
    `page` and `per_page`, each page's headers saying where it is — Link (next, prev, first,
    last), X-Page, X-Next-Page (empty on the last page), X-Total, X-Total-Pages."""
    if path != "/gitlab/api/v4/projects/278964/issues":
        return 404, {"message": "404 Project Not Found"}, []
    users = {1: {"id": 1, "username": "ada", "name": "Ada Lovelace", "state": "active", "web_url": "https://gitlab.com/ada"},
             2: {"id": 2, "username": "grace", "name": "Grace Hopper", "state": "active", "web_url": "https://gitlab.com/grace"}}
    milestone = {"id": 31, "iid": 3, "project_id": 278964, "title": "v1.0", "state": "active", "due_date": "2024-03-01"}
    issues = []
    for k in range(1, 8 + (1 if EDITED["on"] else 0)):
        closed = EDITED["on"] and k == 2
        issues.append({
            "id": 5000 + k, "iid": k, "project_id": 278964, "title": "Issue %d" % k, "description": None if k % 3 else "Steps",
            "state": "closed" if closed else "opened", "created_at": "2024-01-%02dT09:00:00.000Z" % k,
            "updated_at": "2024-02-10T12:00:00.000Z" if closed else "2024-01-%02dT10:00:00.000Z" % k,
            "closed_at": "2024-02-10T12:00:00.000Z" if closed else None,
            "labels": ["bug"] if k % 2 else ["feature", "P2"], "author": users[1 + k % 2],
            "assignees": [users[1]] if k % 3 == 0 else [], "milestone": milestone if k <= 4 else None,
            "web_url": "https://gitlab.com/gitlab-org/gitlab-test/-/issues/%d" % k})
    per = int(q.get("per_page", "20"))
    page = int(q.get("page", "1"))
    pages = max(1, (len(issues) + per - 1) // per)
    # The request's own parameters kept, the page's replaced (as GitLab's links do).
    kept = "".join("%s=%s&" % (k, v) for k, v in q.items() if k != "page")
    base = host + "/gitlab/api/v4/projects/278964/issues?" + kept + "page="
    links = ['<%s%d>; rel="first"' % (base, 1), '<%s%d>; rel="last"' % (base, pages)]
    if page < pages:
        links.insert(0, '<%s%d>; rel="next"' % (base, page + 1))
    if page > 1:
        links.insert(0, '<%s%d>; rel="prev"' % (base, page - 1))
    headers = [("Link", ", ".join(links)), ("X-Page", str(page)), ("X-Per-Page", str(per)),
               ("X-Next-Page", str(page + 1) if page < pages else ""), ("X-Prev-Page", str(page - 1) if page > 1 else ""),
               ("X-Total", str(len(issues))), ("X-Total-Pages", str(pages))]
    return 200, issues[(page - 1) * per:page * per], headers


def answer_post(path, body, host):
    """(status, body, headers) for a POST to these APIs, or None."""
    if path == "/github/graphql":
        return github_graphql(body, host)
    if path == "/es/products/_search":
        return elasticsearch(body, host)
    if path == "/notion/v1/search":
        return notion_search(body, host)
    return None


PREFIXES = ("/hn/", "/npm/", "/meteo/", "/zendesk/", "/wp/", "/contentful/", "/gitlab/")


def serves(path):
    """Whether a path is one of these APIs' (its requests count, and take faults, as /people/*'s)."""
    return path.startswith(PREFIXES)


def answer(path, q, host):
    """(status, body, headers) for a path of these APIs, or None."""
    if path.startswith("/hn/"):
        return hn(path, host)
    if path.startswith("/npm/"):
        return npm(path, host)
    if path.startswith("/meteo/"):
        return meteo(path, host)
    if path.startswith("/zendesk/"):
        return zendesk(path, q, host)
    if path.startswith("/wp/"):
        return wordpress(path, q, host)
    if path.startswith("/contentful/"):
        return contentful(path, q, host)
    if path.startswith("/notion/v1/blocks/"):
        return notion_blocks(path, q, host)
    if path.startswith("/gitlab/"):
        return gitlab(path, q, host)
    return None
