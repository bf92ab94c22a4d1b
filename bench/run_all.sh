#!/usr/bin/env bash
# Run every scenario in sequence (short defaults). Usage: bench/run_all.sh [--long]
set -u
cd "$(dirname "$0")/.."
. .venv/bin/activate
LONG=${1:-}
run() { echo "### $*"; python -m "$@" 2>&1 | grep -v '^\s*$'; }
run bench.b1_overhead
run bench.b1e_e2e
run bench.b5_wake
run bench.b4_recovery --n "${B4_N:-10}"
run bench.c9_control
run bench.b6_streams
run bench.b10_dbos
if [ "$LONG" = "--long" ]; then run bench.b3_soak --minutes 10 --hold; else run bench.b3_soak --minutes 2 --hold; fi
