#!/usr/bin/env bash
# Builds and runs the tile-pair microbenchmark on the device machine (nvcc, cuBLAS, ncu there).
# usage: bench/gpu/micro/run.sh [kinds...]   (0 tf32, 1 f16, 3 s8); NCU=1 also profiles.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-/tmp}
# common/abi.cuh as src/runtime/abi.rs generates it (no Rust toolchain on the device machine).
abi=/tmp/pf-abi; mkdir -p $abi/common
python3 - > $abi/common/abi.cuh <<'PY'
import re
s = open("crates/voisin-cuda/src/runtime/abi.rs").read()
body = s[s.index("abi_table! {"):]
body = body[:body.index("\n}\n")]
print("#pragma once")
for m in re.finditer(r"^\s*([A-Z_0-9]+):\s*(i32|u32|usize)\s*=\s*([^;]+);", body, re.M):
    name, ty, v = m.groups()
    v = v.strip().replace("_", "") if not v.strip().startswith("u32::MAX") else "0xffffffff"
    print(f"#define {name} {hex(int(v, 0)) + 'u' if ty == 'u32' else int(v, 0)}")
PY
nvcc -O3 -lineinfo -std=c++17 -arch=sm_90 -Xcompiler -fopenmp -Xptxas -v -I crates/voisin-cuda/kernels \
    -I $abi bench/gpu/micro/pair_filter.cu -lcublas -o /tmp/pf 2> "$out/ptxas.txt" \
    || { grep -v -i warning "$out/ptxas.txt" | head -40; exit 1; }
grep -A1 "pair_filter\|tile_filter" "$out/ptxas.txt" | grep -i "registers\|spill" | head -12 || true
/tmp/pf "${@:-0 1 3}"
if [ "${NCU:-0}" = 1 ]; then
    secs="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
    ncu --clock-control none -k regex:pair_filter --launch-skip 23 --launch-count 1 $secs /tmp/pf 0 > "$out/ncu_pf.txt" 2>&1 || true
    ncu --clock-control none -k regex:tile_filter --launch-skip 2 --launch-count 1 $secs /tmp/pf 0 > "$out/ncu_tf.txt" 2>&1 || true
    sed -n '/Warp State Statistics/,/Section: Occupancy/p' "$out/ncu_pf.txt" | grep -i "stall\|spends\|cycles" | cut -c1-160 | head -12
    for f in "$out"/ncu_pf.txt "$out"/ncu_tf.txt; do
        echo "== $f"; grep -E -i "duration|throughput|occupancy|stall|issued|eligible|block limit|registers|bank|spends|cycles per" "$f" | cut -c1-300 | head -45
    done
fi
