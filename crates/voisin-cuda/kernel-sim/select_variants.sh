#!/usr/bin/env bash
# Runs the heap and quick-select kernels (and block select, for reference) on the CPU simulator of
# run.sh, against plain sorts, with random and duplicate-heavy tiles over several tiles per pass.
# usage: VOISIN_ABI_DIR=<dir holding common/abi.cuh> crates/voisin-cuda/kernel-sim/select_variants.sh   (needs g++ with C++20)
# The kernels include their headers by name (kernels/common/*.cuh); common/abi.cuh is generated
# by src/runtime/abi.rs: the crate's test `kernel_simulation` writes it to $VOISIN_ABI_DIR and runs this
# script (cargo test -p voisin-cuda kernel_simulation).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d)
{ echo "#include \"$here/simshim.h\""; echo "#include \"$here/warpshim.h\""; for u in select/block select/heap select/quick; do echo "#include \"$u.cu\""; done; } > "$tmp/kern.h"
g++ -std=c++20 -O1 -pthread -w -I"$tmp" -I"$here/../kernels" -I"${VOISIN_ABI_DIR:?run through cargo test -p voisin-cuda kernel_simulation}" "$here/select_variants.cpp" -o "$tmp/sim"
"$tmp/sim"
