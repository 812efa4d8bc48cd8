#!/usr/bin/env bash
# Runs the heap and quick-select kernels (and block select, for reference) on the CPU simulator of
# run.sh, against plain sorts, with random and duplicate-heavy tiles over several tiles per pass.
# usage: crates/voisin-cuda/kernel-sim/select_variants.sh   (needs g++ with C++20)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d)
{ echo "#include \"$here/simshim.h\""; echo "#include \"$here/warpshim.h\""
  cat "$here"/../kernels/{keys,select_block,select_heap,select_quick}.cu \
    | sed 's/extern __shared__ float smem\[\];//'; } > "$tmp/kern.h"
g++ -std=c++20 -O1 -pthread -w -I"$tmp" "$here/select_variants.cpp" -o "$tmp/sim"
"$tmp/sim"
