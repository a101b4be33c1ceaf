#!/usr/bin/env bash
# Counts the instructions of a whole `ingot run` over people-20k under callgrind: deterministic
# to about 1 %, unlike wall time on a shared machine, so a change to a hot path can be judged by
# one run. Prints the total and the functions with the most instructions of their own.
#
#   scripts/instructions.sh [INGOT_BINARY]      (default .build/release/ingot)
set -euo pipefail
cd "$(dirname "$0")/.."
binary="${1:-.build/release/ingot}"
work=".build-bench/instructions"
data=".build-bench/people-20k"
mkdir -p "$work"
if [ ! -f "$data/expected.json" ]; then
  python3 Benchmarks/people.py --out "$data" --persons 20000 --page-size 1000 >/dev/null
fi
# valgrind 3.19 cannot read Swift 6.3's DWARF 5: keep the symbols, drop the debug info.
strip --strip-debug -o "$work/ingot" "$binary"
rm -f "$work/run.db" "$work/run.db-wal" "$work/run.db-shm"
valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" \
  "$work/ingot" run pipelines/people.yml --pages "$data" --db "$work/run.db" --no-archive --progress-interval 0 \
  2>&1 | grep -E "Collected" | sed 's/.*Collected : /instructions: /'
python3 Benchmarks/people.py --check "$work/run.db" --expected "$data/expected.json" \
  | python3 -c 'import json, sys; print("check ok:", json.load(sys.stdin)["ok"])'
callgrind_annotate "$work/callgrind.out" 2>/dev/null | sed -n '/file:function/,$p' | sed -n '3,25p' \
  | { command -v swift >/dev/null && swift demangle --simplified --compact || cat; } | cut -c1-140
