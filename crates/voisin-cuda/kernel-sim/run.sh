#!/usr/bin/env bash
# Runs the kernels of ../kernels on the CPU: one std::thread per CUDA thread, __syncthreads as a
# std::barrier, blocks one after another. It checks the block-level logic (selection networks,
# radix passes, atomics, bounds of loops) against plain C++ answers without a GPU, so device time
# goes to what only a GPU can show. It cannot show warp-level or memory-model races.
# usage: crates/voisin-cuda/kernel-sim/run.sh   (needs g++ with C++20)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d)
{ echo "#include \"$here/simshim.h\""
  cat "$here"/../kernels/{keys,select_block,select_cols,select_radix,range,transpose,vector_tile}.cu \
    | sed 's/extern __shared__ float smem\[\];//'; } > "$tmp/kern.h"
g++ -std=c++20 -O1 -pthread -w -I"$tmp" "$here/sim.cpp" -o "$tmp/sim"
"$tmp/sim"
