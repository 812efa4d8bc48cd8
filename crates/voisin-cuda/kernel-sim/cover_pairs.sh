#!/usr/bin/env bash
# Runs kernels/index/cover_pairs.cu (the device pair oracle's kernel) on the CPU simulator of
# run.sh against plain C++: levenshtein by dynamic programming, NaN beyond the radius, -1 for two
# strings over 64 chars; batches launched in two chunks with few threads (grid-stride loops and
# the query search by pair index).
# usage: VOISIN_ABI_DIR=<dir holding common/abi.cuh> crates/voisin-cuda/kernel-sim/cover_pairs.sh   (needs g++ with C++20)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d)
{ echo "#include \"$here/simshim.h\""; echo "#include \"$here/doubleshim.h\""; echo "#include \"index/cover_pairs.cu\""; } > "$tmp/kern.h"
g++ -std=c++20 -O1 -ffp-contract=off -pthread -w -I"$tmp" -I"$here/../kernels" -I"${VOISIN_ABI_DIR:?run through cargo test -p voisin-cuda kernel_simulation}" "$here/cover_pairs.cpp" -o "$tmp/sim"
"$tmp/sim"
