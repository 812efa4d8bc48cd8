#!/usr/bin/env bash
# Runs every voisin-io fuzz target one after another (never in parallel: the machine is shared),
# each for SECONDS (default 180), seeded from fuzz/seeds/<target>. Needs a nightly toolchain and
# cargo-fuzz (`cargo install cargo-fuzz`). Logs go to fuzz/logs/<target>.log; crashes to
# fuzz/artifacts/<target>/.
set -u
cd "$(dirname "$0")/.."
seconds="${SECONDS_PER_TARGET:-180}"
targets="${*:-texmex bin npy npz hdf5 txt csv parquet}"
mkdir -p fuzz/logs
for t in $targets; do
    mkdir -p "fuzz/corpus/$t"
    echo "== $t (${seconds}s)"
    cargo +nightly fuzz run -O "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=2048 \
        -print_final_stats=1 >"fuzz/logs/$t.log" 2>&1
    echo "exit $?"
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^Done|SUMMARY|panicked|ERROR" \
        "fuzz/logs/$t.log" | head -8
done
