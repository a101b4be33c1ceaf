#!/usr/bin/env bash
# make container-test: build Ingot's image from docker/Dockerfile and run it for real under podman.
#
# No container registry is reachable here and no Docker engine runs, so:
#   - the base image is Debian bookworm made with `debootstrap --variant=minbase` (with the runtime
#     libraries included) and `podman import`ed as localhost/ingot-bookworm (cached across runs);
#   - the Swift build stage cannot run, so the binary is built on the host with
#     --static-swift-stdlib and the Dockerfile's `prebuilt` target copies it in — the same
#     Dockerfile and `base` stage as the default `runtime` target;
#   - podman runs with runc and explicit ulimits (CONTAINERS_CONF), which this kernel needs.
#
# Checks: the default command replays the bundled archive into the /data volume (exact state,
# files owned by the non-root user); a run against the fixture server on the host network with a
# bearer token that appears nowhere in the logs, database or archive; SIGTERM to the container
# while a request hangs exits 143 within 3 s with the summary logged. Prints the image size.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

IMAGE=localhost/ingot:test
# The base is cached under a tag naming what it includes: a changed list makes a new one.
INCLUDE=libsqlite3-0,libcurl4,libzstd1,libpq5,libstdc++6,ca-certificates,tzdata
BASE=localhost/ingot-bookworm:$(printf '%s' "$INCLUDE" | md5sum | cut -c1-12)
WORK=$(mktemp -d /tmp/ingot-container-test.XXXXXX)
VOLUME=ingot-test-$$
SERVER_PID=
CONTAINERS=()

log() { printf '== %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

cleanup() {
    for c in "${CONTAINERS[@]}"; do podman rm -f "$c" >/dev/null 2>&1 || true; done
    podman volume rm -f "$VOLUME" >/dev/null 2>&1 || true
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# podman as this kernel needs it (FACTS of the machine: crun cannot set rlimits here).
cat > "$WORK/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$WORK/containers.conf"

log "binary: swift build -c release --static-swift-stdlib"
swift build -c release --static-swift-stdlib --scratch-path .build-static --product ingot
install -m 0755 -s .build-static/release/ingot docker/ingot  # stripped: 95 → 65 MB

if ! podman image exists "$BASE"; then
    log "base image: debootstrap --variant=minbase bookworm (once; cached as $BASE)"
    rootfs="$WORK/rootfs"
    debootstrap --variant=minbase \
        --include="$INCLUDE" \
        bookworm "$rootfs" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 \
        || { tail -20 "$WORK/debootstrap.log"; fail "debootstrap"; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
    tar -C "$rootfs" -c . | podman import - "$BASE" >/dev/null
    rm -rf "$rootfs"
fi

log "image: podman build --target prebuilt"
podman build -q -f docker/Dockerfile --target prebuilt --build-arg RUNTIME_IMAGE="$BASE" -t "$IMAGE" . >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
base_size=$(podman image inspect --format '{{.Size}}' "$BASE")
binary_size=$(stat -c %s docker/ingot)
printf 'image size: %d MB (base %d MB, ingot binary %d MB)\n' $((size / 1000000)) $((base_size / 1000000)) $((binary_size / 1000000))

podman volume create "$VOLUME" >/dev/null
DATA=$(podman volume inspect --format '{{.Mountpoint}}' "$VOLUME")

log "1. docker run IMAGE: replays the bundled archive into /data"
CONTAINERS+=(ingot-test-replay-$$)
podman run --name ingot-test-replay-$$ -v "$VOLUME:/data" "$IMAGE" >"$WORK/replay.out" 2>"$WORK/replay.err" \
    || { cat "$WORK/replay.err"; fail "the default command exited $?"; }
grep -q 'msg=run.summary' "$WORK/replay.err" || fail "no run.summary in the replay's log"
python3 Benchmarks/people.py --check "$DATA/people.db" --expected pipelines/samples/people/expected.json >/dev/null \
    || fail "the replayed database is not the expected state"
[ "$(stat -c %u "$DATA/people.db")" = 10001 ] || fail "people.db is not owned by the image's user (uid 10001)"
[ "$(podman run --rm --entrypoint /usr/bin/id "$IMAGE" -u)" = 10001 ] || fail "the image does not run as uid 10001"
echo "ok: exact state, written by uid 10001"

log "2. a run against the fixture server on the host network, token from the environment"
TOKEN="ct-secret-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
python3 Benchmarks/people.py --out "$WORK/pages" --persons 3000 --page-size 100 >/dev/null
start_server() {  # start_server ARGS...: the fixture server on 127.0.0.1, its port in $PORT
    python3 Tests/Fixtures/server.py --people "$WORK/pages" --token "$TOKEN" "$@" >"$WORK/server.out" 2>"$WORK/server.err" &
    SERVER_PID=$!
    for _ in $(seq 100); do grep -q '^PORT ' "$WORK/server.out" 2>/dev/null && break; sleep 0.1; done
    PORT=$(awk '/^PORT /{print $2; exit}' "$WORK/server.out")
    [ -n "$PORT" ] || fail "the fixture server did not start"
}
stop_server() { kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=; }
start_server
CONTAINERS+=(ingot-test-http-$$)
podman run --name ingot-test-http-$$ --network host -v "$VOLUME:/data" \
    -e PEOPLE_API="http://127.0.0.1:$PORT" -e PEOPLE_TOKEN="$TOKEN" -e INGOT_DB=/data/http.db -e INGOT_LOG_FORMAT=json \
    "$IMAGE" run /usr/share/ingot/pipelines/people-http.yml >"$WORK/http.out" 2>"$WORK/http.err" \
    || { cat "$WORK/http.err"; fail "the HTTP run exited $?"; }
stop_server
python3 Benchmarks/people.py --check "$DATA/http.db" --expected "$WORK/pages/expected.json" >/dev/null \
    || fail "the HTTP run's database is not the expected state"
ls "$DATA"/archives/*.ingot >/dev/null 2>&1 || fail "no archive in the volume"
[ "$(stat -c %u "$DATA/archives")" = 10001 ] || fail "the archive directory is not owned by uid 10001"
if grep -rl --binary-files=text "$TOKEN" "$WORK/http.out" "$WORK/http.err" "$DATA" >/dev/null; then
    fail "the bearer token appears in the logs, the database or the archive"
fi
python3 - "$WORK/http.err" <<'EOF' || fail "the JSON log does not parse line by line"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert lines and any(l.get("msg") == "run.summary" for l in lines), "no run.summary"
EOF
echo "ok: exact state, archive in the volume, token nowhere"

log "3. SIGTERM to the container while a request hangs"
start_server --faults slow:3 --slow 60
CONTAINERS+=(ingot-test-term-$$)
podman run -d --name ingot-test-term-$$ --network host -v "$VOLUME:/data" \
    -e PEOPLE_API="http://127.0.0.1:$PORT" -e PEOPLE_TOKEN="$TOKEN" -e INGOT_DB=/data/term.db \
    "$IMAGE" run /usr/share/ingot/pipelines/people-http.yml --progress-interval 0 >/dev/null
# The third request hangs for 60 s: wait until the server has received it.
for _ in $(seq 300); do
    n=$(python3 -c 'import json, sys, urllib.request as u; print(json.load(u.urlopen(sys.argv[1]))["people_requests"])' \
        "http://127.0.0.1:$PORT/requests" 2>/dev/null || echo 0)
    [ "${n:-0}" -ge 3 ] && break
    sleep 0.1
done
[ "${n:-0}" -ge 3 ] || fail "the run never reached the hanging request"
t0=$(date +%s.%N)
podman kill --signal TERM ingot-test-term-$$ >/dev/null
code=$(podman wait ingot-test-term-$$)
t1=$(date +%s.%N)
stop_server
podman logs ingot-test-term-$$ >"$WORK/term.log" 2>&1
elapsed=$(python3 -c "print(round($t1 - $t0, 2))")
[ "$code" = 143 ] || { cat "$WORK/term.log"; fail "SIGTERM: exit $code, expected 143"; }
python3 -c "import sys; sys.exit(0 if $elapsed < 3 else 1)" || fail "SIGTERM took ${elapsed} s (limit 3 s)"
grep -q 'msg=run.summary' "$WORK/term.log" || { cat "$WORK/term.log"; fail "SIGTERM: no run.summary logged"; }
echo "ok: exit 143 in ${elapsed} s, summary logged"

log "container-test passed"
