#!/usr/bin/env python3
"""Metric-index benchmark: voisin's List of Clusters, SSS and cover tree against voisin's brute
force and rapidfuzz, levenshtein range search over a word list, same run.

Usage:  python3 bench/index_bench.py [--words FILE] [--radii 0,1,2] [--runs 3] [--build-runs N]
        [--queries 2000] [--cluster-size 128] [--alpha 0.5] [--max-pivots 16] [--base 2]
        [--kinds lc,sss]
Needs:  pip install rapidfuzz numpy   and   cargo build --release -p voisin-cli
        (VOISIN=path/to/voisin runs another build, e.g. an older one for a before/after)

Data: data/words.txt (94,577 words, see data/README.md) unless --words names another list, one
word per line, UTF-8. Other languages' lists (not committed, for their licences) come from
Debian's packages, e.g.:
    mkdir -p /tmp/dicts && cd /tmp/dicts && apt-get download wfrench wngerman &&
    for f in *.deb; do dpkg -x $f x; done      # x/usr/share/dict/french (346,205 words),
                                               # x/usr/share/dict/ngerman (356,010 words)
Queries: 2,000 words drawn from the list with random.Random(42), each
changed by one random edit (insert, delete or substitute a letter at a random position), written
to bench/data/<list>.queries.txt; so most queries have answers at radius 1 and few at radius 0.
The inserted or substituted letter is a-z for data/words.txt (as in the figures recorded before
--words existed) and otherwise one of the chars the list itself uses.

Unit: every tool counts edits of Unicode code points. voisin reads a string list as chars
(Unicode scalar values) and rapidfuzz compares Python str, which are code points too, so a
letter with an accent is one char for both (the lists are in NFC: no combining marks).

What is timed (all cores, data in memory, medians over --runs with the tools alternating):
  index build   `voisin index build --stats`, its time_s.build (construction only)
  index query   `voisin index query --radius R --stats`, its time_s.compute (the search, not the
                reading of the index file nor the writing of results)
  brute force   `voisin range --radius R --engine brute --device cpu --stats`, its
                time_s.compute
  rapidfuzz     rapidfuzz.process.cdist(queries, words, scorer=Levenshtein.distance,
                score_cutoff=R, workers=-1, dtype=uint8): the full matrix, capped at R + 1
Every tool's number of (query, word) pairs within R is checked to be the same, and voisin's
answers are checked pair by pair against its brute force.

Distance evaluations per query are what voisin counts (--stats); brute force makes one per word.
"""
import argparse
import json
import os
import random
import statistics
import string
import subprocess
import sys
import time

import numpy as np
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "bench", "data")
WORDS = os.path.join(ROOT, "data", "words.txt")
VOISIN = os.environ.get("VOISIN", os.path.join(ROOT, "target", "release", "voisin"))
KINDS = ["lc", "sss", "cover"]


def perturb(rng, word, alphabet):
    """One random edit: insert, delete or substitute a letter of `alphabet`."""
    pos = rng.randrange(len(word) + 1)
    op = rng.choice(["insert", "delete", "substitute"]) if word else "insert"
    letter = rng.choice(alphabet)
    if op == "insert":
        return word[:pos] + letter + word[pos:]
    pos = min(pos, len(word) - 1)
    if op == "delete":
        return word[:pos] + word[pos + 1:]
    return word[:pos] + letter + word[pos + 1:]


def make_queries(words, n, alphabet, name):
    rng = random.Random(42)
    queries = [perturb(rng, w, alphabet) for w in rng.sample(words, n)]
    path = os.path.join(DATA, f"{name}.queries.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(q + "\n" for q in queries))
    return queries, path


def voisin(args):
    """Runs the CLI with --stats and returns its stats line as a dict."""
    proc = subprocess.run([VOISIN, *args, "--stats"], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"voisin {' '.join(args)} failed: {proc.stderr.strip()}")
    return json.loads(proc.stderr.strip().splitlines()[-1])


def tsv_pairs(path):
    with open(path, encoding="utf-8") as f:
        return [tuple(line.split("\t")[:2]) for line in f]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--radii", default="0,1,2", help="comma-separated radii (r <= 1 and r = 2 in the issue)")
    ap.add_argument("--words", default=WORDS, help="word list, one per line (UTF-8)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--build-runs", type=int, default=None,
                    help="builds per index (default --runs; the List of Clusters over 350k "
                         "words takes a minute or more per build on 2 cores); 0 queries the "
                         "index files an earlier run left in bench/data")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--cluster-size", default="128")
    ap.add_argument("--alpha", default="0.5")
    ap.add_argument("--max-pivots", default="16")
    ap.add_argument("--base", default="2")
    ap.add_argument("--kinds", default="lc,sss",
                    help="indexes to build and query, of lc,sss,cover (the fully separated cover "
                         "tree takes minutes and about 8 GB to build on the word list)")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if not kinds or any(k not in KINDS for k in kinds):
        sys.exit(f"--kinds takes some of {','.join(KINDS)}")
    if not os.path.exists(VOISIN):
        sys.exit("build the CLI first: cargo build --release -p voisin-cli")
    os.makedirs(DATA, exist_ok=True)
    wpath = os.path.abspath(args.words)
    with open(wpath, encoding="utf-8") as f:
        words = f.read().split("\n")
    if words and words[-1] == "":
        words.pop()
    name = os.path.splitext(os.path.basename(wpath))[0]
    if wpath == WORDS:
        alphabet = string.ascii_lowercase
    else:
        alphabet = "".join(sorted(set("".join(words))))
    queries, qpath = make_queries(words, args.queries, alphabet, name)
    n, m = len(words), len(queries)
    print(f"{wpath}: {n} words, {m} queries (one random edit each over {len(alphabet)} letters, "
          f"seed 42), {os.cpu_count()} cores")

    builds = {k: [] for k in kinds}
    build_evals = {}
    extra = {
        "lc": ["--cluster-size", args.cluster_size],
        "sss": ["--alpha", args.alpha, "--max-pivots", args.max_pivots],
        "cover": ["--base", args.base],
    }
    idx = {k: os.path.join(DATA, f"{name}.{k}.vidx") for k in kinds}
    build_runs = args.runs if args.build_runs is None else args.build_runs
    if build_runs == 0:
        missing = [idx[k] for k in kinds if not os.path.exists(idx[k])]
        if missing:
            sys.exit(f"--build-runs 0: no index file {missing[0]} (run once with builds)")
    for _ in range(build_runs):
        for k in kinds:
            st = voisin(["index", "build", "--input", wpath, "--kind", k, "--out", idx[k], *extra[k]])
            builds[k].append(st["time_s"]["build"])
            build_evals[k] = st["build_distance_evals"]

    for r in [float(x) for x in args.radii.split(",")]:
        times = {t: [] for t in kinds + ["brute", "rapidfuzz"]}
        evals, counts = {}, {}
        for run in range(args.runs):
            out = os.path.join(DATA, "brute.tsv")
            st = voisin(["range", "--base", wpath, "--query", qpath, "--radius", str(r),
                         "--device", "cpu", "--engine", "brute", "--out", out])
            times["brute"].append(st["time_s"]["compute"])
            evals["brute"] = st["distance_evals"] / m
            counts["brute"] = st["results"]
            brute = tsv_pairs(out)
            for k in kinds:
                out = os.path.join(DATA, f"{k}.tsv")
                st = voisin(["index", "query", "--index", idx[k], "--query", qpath,
                             "--radius", str(r), "--out", out])
                times[k].append(st["time_s"]["compute"])
                evals[k] = st["evals_per_query"]
                counts[k] = st["results"]
                if run == 0 and tsv_pairs(out) != brute:
                    sys.exit(f"{k}: answers differ from brute force at radius {r}")
            t = time.perf_counter()
            mat = process.cdist(queries, words, scorer=Levenshtein.distance,
                                score_cutoff=int(r), workers=-1, dtype=np.uint8)
            times["rapidfuzz"].append(time.perf_counter() - t)
            counts["rapidfuzz"] = int(np.count_nonzero(mat <= r))
            del mat
        if len(set(counts.values())) != 1:
            sys.exit(f"pair counts differ at radius {r}: {counts}")

        med = {t: statistics.median(v) for t, v in times.items()}
        print(f"\nlevenshtein range, radius {r:g}: {counts['brute']} pairs found by every tool "
              f"(medians of {args.runs} runs)")
        print(f"{'tool':<12}{'build s':>10}{'query s':>10}{'rapidfuzz/tool':>16}"
              f"{'brute/tool':>12}{'evals/query':>13}{'of brute':>10}")
        for t in kinds + ["brute", "rapidfuzz"]:
            b = f"{statistics.median(builds[t]):.2f}" if builds.get(t) else "-"
            e = f"{evals[t]:.0f}" if t in evals else "-"
            frac = f"{100 * evals[t] / n:.2f}%" if t in evals else "-"
            print(f"{t:<12}{b:>10}{med[t]:>10.3f}{med['rapidfuzz'] / med[t]:>16.2f}"
                  f"{med['brute'] / med[t]:>12.2f}{e:>13}{frac:>10}")
        best = min(kinds, key=lambda k: med[k])
        print(f"best index: {best}, {med['rapidfuzz'] / med[best]:.2f}x rapidfuzz (target >= 2.5), "
              f"{100 * evals[best] / n:.2f}% of brute force's evaluations (target <= 20%)")
    if build_evals:
        print("\nbuild distance evaluations: "
              + ", ".join(f"{k} {build_evals[k]}" for k in kinds))


if __name__ == "__main__":
    main()
