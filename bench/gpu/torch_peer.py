#!/usr/bin/env python3
"""PyTorch peer for the GPU benchmark (bench/RESULTS.md): matmul + topk in strict fp32, chunked, on the
.fbin data that crates/voisin-bench/src/bin/gpu_bench.rs wrote, in the same run.

Times are end to end like voisin's: host arrays in (upload included), host indices out.
Also measures the sgemm ceiling (8192^3 fp32, TF32 off) and the device copy bandwidth, then
prints the table: voisin time, torch time, ratio, and the fraction of the floor
(flops / measured sgemm rate) each reaches.

usage: torch_peer.py DIR   (DIR holds base.fbin, queries.fbin, voisin_bench.jsonl)
"""
import json
import os
import sys
import time

import numpy as np
import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda")


def read_fbin(path):
    with open(path, "rb") as f:
        n, d = np.fromfile(f, dtype=np.uint32, count=2)
        return np.fromfile(f, dtype=np.float32, count=int(n) * int(d)).reshape(n, d)


def sync_time(fn, reps):
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2], out


def sgemm_rate():
    a = torch.randn(8192, 8192, device=dev)
    b = torch.randn(8192, 8192, device=dev)
    for _ in range(3):
        a @ b
    s, _ = sync_time(lambda: a @ b, 10)
    return 2 * 8192**3 / s


def copy_bandwidth():
    x = torch.randn(1 << 30, device=dev)  # 4 GiB
    y = torch.empty_like(x)
    y.copy_(x)
    s, _ = sync_time(lambda: y.copy_(x), 10)
    return 2 * x.numel() * 4 / s


def knn(base_np, q_np, k, chunk=1024, exclude_self=False):
    base = torch.from_numpy(base_np).to(dev)
    q_all = torch.from_numpy(q_np).to(dev) if q_np is not base_np else base
    bn = (base * base).sum(1)
    out = []
    for s in range(0, q_all.shape[0], chunk):
        q = q_all[s : s + chunk]
        d = torch.addmm(bn.unsqueeze(0), q, base.T, beta=1, alpha=-2)
        d += (q * q).sum(1, keepdim=True)
        if exclude_self:
            r = torch.arange(q.shape[0], device=dev)
            d[r, r + s] = float("inf")
        _, idx = torch.topk(d, k, dim=1, largest=False, sorted=True)
        out.append(idx.to(torch.int32).cpu())
    return torch.cat(out).numpy()


def agreement(path, ids, k):
    try:
        v = np.fromfile(path, dtype=np.uint32).reshape(-1, k)
    except (OSError, ValueError):
        return float("nan")
    n = v.shape[0]
    same = sum(len(set(v[i]) & set(ids[i].tolist())) for i in range(n))
    return same / (n * k)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "/tmp/vbench"
    base = read_fbin(f"{d}/base.fbin")
    queries = read_fbin(f"{d}/queries.fbin")
    name = torch.cuda.get_device_name()
    rate = sgemm_rate()
    bw = copy_bandwidth()
    print(f"device {name}: sgemm (fp32, TF32 off) {rate / 1e12:.1f} TFLOP/s, "
          f"copy {bw / 1e12:.2f} TB/s", flush=True)
    knn(queries[:2000], queries[:64], 10)  # warm-up
    torch_times = {}
    for k in (10, 1000):
        s, ids = sync_time(lambda: knn(base, queries, k), 3)
        torch_times[f"knn k={k}"] = s
        if k == 10:
            a = agreement(f"{d}/voisin_knn10_ids.bin", ids, 10)
            print(f"knn k=10 id agreement voisin vs torch (first 1000 queries): {a:.5f}")
        print(f"torch knn k={k}: {s:.3f}s", flush=True)
    vo = {}
    with open(f"{d}/voisin_bench.jsonl") as f:
        for line in f:
            r = json.loads(line)
            vo[r["case"]] = r
    # The graph's cases carry the data kind ("graph k=10 clustered") unless it is normal.
    if any(c.split()[:2] == ["graph", "k=10"] for c in vo):
        gdata = read_fbin(f"{d}/graph.fbin") if os.path.exists(f"{d}/graph.fbin") else base
        n = gdata.shape[0]
        s, ids = sync_time(lambda: knn(gdata, gdata, 10, chunk=2048, exclude_self=True), 1)
        torch_times["graph k=10"] = s
        a = agreement(f"{d}/voisin_graph10_ids.bin", ids, 10)
        print(f"graph k=10 id agreement voisin vs torch (first 1000 items): {a:.5f}")
        print(f"torch graph k=10 ({n} items, full matrix): {s:.3f}s", flush=True)
    print()
    print(f"| case | voisin s | torch s | torch/voisin | voisin floor frac | torch floor frac |")
    print(f"|---|---|---|---|---|---|")
    nb, nq, dim = base.shape[0], queries.shape[0], base.shape[1]
    # Every voisin case, variants ("knn k=10 tf32") included, against torch's time for its base
    # case (the first two words).
    for case in vo:
        base_case = " ".join(case.split()[:2])
        if base_case not in torch_times:
            continue
        ts = torch_times[base_case]
        v = vo[case]["seconds"]
        # Floor: the flops each side must do at the measured sgemm rate. voisin's graph does
        # half the matrix (symmetry); torch's does all of it; both are counted against the
        # same full-matrix floor so the fractions compare like for like.
        full = 2.0 * (nb * nq if case.startswith("knn") else n * n) * dim
        floor = full / rate
        print(f"| {case} | {v:.3f} | {ts:.3f} | {ts / v:.2f} | {floor / v:.2f} | {floor / ts:.2f} |")
    print(f"(device {name}; floor = full-matrix flops / {rate / 1e12:.1f} TFLOP/s measured sgemm)")


if __name__ == "__main__":
    main()
