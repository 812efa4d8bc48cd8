#!/usr/bin/env bash
# Runs kernels/index/cover_net.cu (the GPU cover tree build's greedy passes) on the CPU simulator
# of run.sh against a plain C++ pass: random slots of vectors (four metrics, ties on an integer
# grid) and of words (with strings over 64 chars), some slots through the one-block kernel with
# two warps and several chunks, the others through the round kernel over two blocks; owners,
# distances and the evaluation count must be the plain pass's, and the slots the device cannot
# decide flagged.
# usage: VOISIN_ABI_DIR=<dir holding common/abi.cuh> crates/voisin-cuda/kernel-sim/cover_net.sh   (needs g++ with C++20)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d)
{ echo "#include \"$here/simshim.h\""; echo "#include \"$here/doubleshim.h\""; echo "#include \"$here/warpshim.h\""; echo "#define __launch_bounds__(x)"; echo "#include \"index/cover_net.cu\""; } > "$tmp/kern.h"
g++ -std=c++20 -O1 -ffp-contract=off -pthread -w -I"$tmp" -I"$here/../kernels" -I"${VOISIN_ABI_DIR:?run through cargo test -p voisin-cuda kernel_simulation}" "$here/cover_net.cpp" -o "$tmp/sim"
"$tmp/sim"
