#!/usr/bin/env bash
# Runs kernels/index/lc_build.cu on the CPU simulator of run.sh: the List of Clusters build's steps
# (scan with its key histogram, collection with the members and the next center, compaction)
# driven as src/index/build.rs drives them, with at most 8 pairs ranked at once so that small sets
# also take the radix-select path, against a plain C++ build written as voisin-index's; and the
# distances to reference rows.
# usage: VOISIN_ABI_DIR=<dir holding common/abi.cuh> crates/voisin-cuda/kernel-sim/lc_build.sh   (needs g++ with C++20)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d)
{ echo "#include \"$here/simshim.h\""; echo "#include \"$here/doubleshim.h\""; echo "#define __launch_bounds__(x)"; echo "#define LCB_FAST 8"; echo "#include \"index/lc_build.cu\""; } > "$tmp/kern.h"
g++ -std=c++20 -O1 -ffp-contract=off -pthread -w -I"$tmp" -I"$here/../kernels" -I"${VOISIN_ABI_DIR:?run through cargo test -p voisin-cuda kernel_simulation}" "$here/lc_build.cpp" -o "$tmp/sim"
"$tmp/sim"
