#!/usr/bin/env bash
# Runs kernels/finish/rerank.cu and finish/exact.cu's exact_keys on the CPU simulator of run.sh against a
# plain C++ finish: proof verdicts, candidate cut, (key, index) order and the k answers, on lists
# with many equal keys around the k-th, whole-base lists and lists that do not prove.
# usage: VOISIN_ABI_DIR=<dir holding common/abi.cuh> crates/voisin-cuda/kernel-sim/rerank.sh   (needs g++ with C++20)
# The kernels include their headers by name (kernels/common/*.cuh); common/abi.cuh is generated
# by src/runtime/abi.rs: the crate's test `kernel_simulation` writes it to $VOISIN_ABI_DIR and runs this
# script (cargo test -p voisin-cuda kernel_simulation).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d)
{ echo "#include \"$here/simshim.h\""; echo "#include \"$here/doubleshim.h\""; echo "#include \"$here/warpshim.h\""; for u in finish/exact finish/rerank; do echo "#include \"$u.cu\""; done; } > "$tmp/kern.h"
g++ -std=c++20 -O1 -ffp-contract=off -pthread -w -I"$tmp" -I"$here/../kernels" -I"${VOISIN_ABI_DIR:?run through cargo test -p voisin-cuda kernel_simulation}" "$here/rerank.cpp" -o "$tmp/sim"
"$tmp/sim"
