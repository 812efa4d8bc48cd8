#!/usr/bin/env bash
# Runs kernels/rerank.cu (with exact.cu's exact_key) on the CPU simulator of run.sh against a
# plain C++ finish: proof verdicts, candidate cut, (key, index) order and the k answers, on lists
# with many equal keys around the k-th, whole-base lists and lists that do not prove.
# usage: crates/voisin-cuda/kernel-sim/rerank.sh   (needs g++ with C++20)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d)
{ echo "#include \"$here/simshim.h\""; echo "#include \"$here/doubleshim.h\""
  cat "$here"/../kernels/{keys,exact,rerank}.cu \
    | sed 's/extern __shared__ unsigned long long rr_key\[\];/unsigned long long* rr_key = (unsigned long long*)smem;/'; } > "$tmp/kern.h"
g++ -std=c++20 -O1 -ffp-contract=off -pthread -w -I"$tmp" "$here/rerank.cpp" -o "$tmp/sim"
"$tmp/sim"
