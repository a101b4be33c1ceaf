#!/usr/bin/env bash
# make fuzz: libFuzzer (with AddressSanitizer) on each of Ingot's harnesses for FUZZ_SECONDS.
#   page        the JSON parser and the record mapper (one page of bytes in)
#   archive     the archive reader (one archive file in)
#   pipeline    the pipeline loader and model validation (one YAML file in)
#   pagination  next-URL extraction and the origin policy (Link, Retry-After and a body in)
#   draft       `ingot init`'s drafter: a page (or JSON Lines) in, a pipeline and Swift types out, read back
# Corpora grow in .fuzz/corpus/TARGET (seeded from the repository's test data); a crash is copied
# to Tests/Fixtures/fuzz/TARGET/, which `make test` replays. Prints a line per harness:
# executions, crashes.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${FUZZ_SECONDS:-600}"
TARGETS="${FUZZ_TARGETS:-page archive pipeline pagination draft}"
SCRATCH=.build-fuzz
FLAGS=(-Xswiftc -sanitize=fuzzer,address)

swift build --scratch-path "$SCRATCH" --target Ingot "${FLAGS[@]}"
BIN="$SCRATCH/debug"
# Every object of Ingot and its dependencies (not the CLI's), linked with libFuzzer's main. A
# Swift module's objects are those its output file map names (a source renamed since an earlier
# build leaves a stale object beside them); a C module's are its .o files.
mapfile -t OBJECTS < <(
  for dir in $(find "$BIN"/ -maxdepth 1 -name '*.build' -type d | sort); do
    case "$dir" in *IngotCLI.build|*ArgumentParser*|*IngotTests.build|*Manifest*|*plugin*|*PackageTests*) continue ;; esac
    if [ -f "$dir/output-file-map.json" ]; then
      python3 -c 'import json,os,sys; m=json.load(open(sys.argv[1])); print("\n".join(sorted(v["object"] for v in m.values() if "object" in v and os.path.exists(v["object"]))))' "$dir/output-file-map.json"
    else
      find "$dir" -name '*.o' | sort
    fi
  done)
# The C modules Ingot's interface imports (system libraries, GRDB's SQLite, the SQLite shim).
MAPS=()
for map in Sources/CZstd/module.modulemap Sources/CZlib/module.modulemap Sources/CCurl/module.modulemap Sources/CLibPQ/module.modulemap \
  Sources/CCrypto/module.modulemap "$BIN/CCRC32C.build/module.modulemap" \
  "$BIN/CSQLiteTuning.build/module.modulemap" "$SCRATCH/checkouts/GRDB.swift/Sources/GRDBSQLite/module.modulemap" \
  "$SCRATCH/checkouts/Yams/Sources/CYaml/include/module.modulemap" \
  "$SCRATCH/checkouts/swift-atomics/Sources/_AtomicsShims/include/module.modulemap"; do
  MAPS+=(-Xcc "-fmodule-map-file=$map")
done
# FuzzTargets is `package`: the entry joins the package under SwiftPM's name for it (the
# checkout's folder name, as the build used it).
PACKAGE_NAME=$(grep -o '"-module-name","Ingot",.*' "$SCRATCH/debug.yaml" | grep -o '"-package-name","[^"]*"' | head -1 | cut -d'"' -f4)
swiftc -sanitize=fuzzer,address -parse-as-library -g scripts/fuzz/entry.swift -I "$BIN/Modules" -module-name IngotFuzzEntry \
  -package-name "$PACKAGE_NAME" "${MAPS[@]}" \
  -I Sources/CSQLiteTuning/include -I Sources/CCRC32C/include -Xcc -I/usr/include/postgresql \
  "${OBJECTS[@]}" -L/usr/lib/x86_64-linux-gnu -lcurl -lzstd -lz -lsqlite3 -lpq -lcrypto -o "$BIN/ingot-fuzz"

mkdir -p .fuzz
for target in $TARGETS; do
  corpus=".fuzz/corpus/$target"; crashes=".fuzz/crashes/$target"; regressions="Tests/Fixtures/fuzz/$target"
  mkdir -p "$corpus" "$crashes" "$regressions"
  case "$target" in
    page) cp -n pipelines/samples/people/*.json Tests/Fixtures/fuzz-seeds/page/* "$corpus"/ 2>/dev/null || true ;;
    archive) cp -n pipelines/samples/*.ingot Tests/Fixtures/fuzz-seeds/archive/* "$corpus"/ 2>/dev/null || true ;;
    pipeline) cp -n pipelines/*.yml Tests/Fixtures/fuzz-seeds/pipeline/* "$corpus"/ 2>/dev/null || true ;;
    pagination) cp -n Tests/Fixtures/fuzz-seeds/pagination/* "$corpus"/ 2>/dev/null || true ;;
    draft) cp -n Tests/Fixtures/fuzz-seeds/draft/* "$corpus"/ 2>/dev/null || true ;;
  esac
  log=".fuzz/$target.log"
  before=$(find "$crashes" -type f | wc -l)
  INGOT_FUZZ_TARGET="$target" ASAN_OPTIONS=detect_leaks=0 "$BIN/ingot-fuzz" "$corpus" \
    -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -max_len=1048576 -timeout=20 \
    -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1 || true
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  found=$(( $(find "$crashes" -type f | wc -l) - before ))
  for crash in "$crashes"/*; do [ -f "$crash" ] && cp -n "$crash" "$regressions"/; done
  echo "$target: $execs executions in ${SECONDS_EACH}s, $found new crashes (log: $log)"
done
