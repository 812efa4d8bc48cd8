#!/usr/bin/env bash
# Runs the kernels of ../kernels on the CPU: each CUDA thread of a block a fiber on one OS thread
# (simshim.h), switched where it waits at a barrier, blocks one after another. It checks the
# block-level logic (selection networks, radix passes, atomics, bounds of loops) against plain C++
# answers without a GPU, so device time goes to what only a GPU can show; a barrier some threads
# never reach fails the run. It cannot show warp-level or memory-model races.
# usage: VOISIN_ABI_DIR=<dir holding common/abi.cuh> crates/voisin-cuda/kernel-sim/run.sh   (needs g++ with C++20)
# The kernels include their headers by name (kernels/common/*.cuh); common/abi.cuh is generated
# by src/runtime/abi.rs: the crate's test `kernel_simulation` writes it to $VOISIN_ABI_DIR and runs this
# script (cargo test -p voisin-cuda kernel_simulation).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d)
{ echo "#include \"$here/simshim.h\""; echo "#include \"$here/warpshim.h\""; for u in select/block select/cols select/radix select/survivors select/pair_filter select/locality finish/range distance/transpose distance/vector_tile distance/scaled_half; do echo "#include \"$u.cu\""; done; } > "$tmp/kern.h"
g++ -std=c++20 -O1 -pthread -w -I"$tmp" -I"$here/shim" -I"$here/../kernels" -I"${VOISIN_ABI_DIR:?run through cargo test -p voisin-cuda kernel_simulation}" "$here/sim.cpp" -o "$tmp/sim"
"$tmp/sim"
