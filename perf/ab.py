#!/usr/bin/env python3
"""Two or more builds of the library (or Open MPI) on the same perf binary, interleaved.

Each repetition runs every variant once, in an order rotated by one each repetition:
on the 2-core VM the first run of a repetition was up to 12% faster than the same
library run again right after it (all_gather_perf, 2 ranks, 1 MiB), so a fixed order
biases the ratios. Prints the median out-of-place time per size and the first
variant's time over each other's (> 1: the other is faster).

usage: perf/ab.py COLL NRANKS REPS VARIANT...
  VARIANT: name:ENV=V,ENV=V (Strata, private memory unless STRATA_PERF_PRIVATE_MEMORY=0;
           LD_LIBRARY_PATH=DIR swaps the library) or mpi (Open MPI's collective)
           or bare (all_gather and alltoall with 2 ranks: perf/bare_exchange's time for
           the copies a 2-rank exchange makes on private memory, by cma or through slots,
           with no library around them: a reference, not a bound)
  environment: B, E, F (sizes, as the perf tools' -b -e -f), ITERS, WARM, BUILD (default build)
example: B=16K E=1M F=4 ITERS=300 WARM=30 perf/ab.py all_gather 2 6 \\
             before:LD_LIBRARY_PATH=/tmp/base/lib after: mpi
"""
import os
import statistics
import subprocess
import sys

import compare  # perf/compare.py, beside this file

MPI_ENV = {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"}  # as compare.py


def bare(build, coll, n):
    """bare_exchange's time per size (perf/compare.py's bare_us), from 256 KiB (its
    smallest), with at most 20 calls per sample (it times some 20 ways and settings)."""
    if coll not in compare.BARE or n != 2:
        sys.exit("the bare variant is measured for all_gather and alltoall with 2 ranks only")
    g = os.environ.get
    sizes = compare.sizes_between(compare.parse_size(g("B", "16K")), compare.parse_size(g("E", "1M")), int(g("F", "4")))
    iters = min(int(g("ITERS", "300")), 20)
    # The perf tools round a size down to whole elements per rank: 8 bytes for 2 ranks of floats.
    rounded = [s - s % 8 for s in sizes if s >= 256 << 10]
    return {s: compare.bare_us(build, s, iters) for s in rounded}


def run(build, coll, n, name, envs):
    if name == "bare":
        return bare(build, coll, n)
    env, extra = (dict(MPI_ENV), ["--backend", "mpi"]) if name == "mpi" else ({"STRATA_PERF_PRIVATE_MEMORY": "1"}, [])
    for kv in filter(None, envs.split(",")):
        k, _, v = kv.partition("=")
        env[k] = v
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), "--mca", "btl", "vader,self"]
    for k, v in env.items():
        cmd += ["-x", f"{k}={v}"]
    g = os.environ.get
    cmd += [os.path.join(build, "bin", f"{coll}_perf"), "-b", g("B", "16K"), "-e", g("E", "1M"), "-f", g("F", "4"),
            "-n", g("ITERS", "300"), "-w", g("WARM", "30"), "-c", "0"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode:
        sys.exit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    rows = {}
    for line in out.stdout.splitlines():
        f = line.split()
        if len(f) >= 13 and f[0].isdigit():
            rows[int(f[0])] = float(f[5])
    return rows


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    coll, n, reps, variants = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    build = os.environ.get("BUILD", "build")
    times = {}
    for r in range(reps):
        for v in variants[r % len(variants):] + variants[:r % len(variants)]:
            name, _, envs = v.partition(":")
            for size, us in run(build, coll, n, name, envs).items():
                times.setdefault(name, {}).setdefault(size, []).append(us)
    names = [v.partition(":")[0] for v in variants]
    print(f"# {coll}, {n} ranks, medians of {reps} rotated runs, out-of-place us; ratio: {names[0]} time / other's")
    print(f"{'size':>10} " + " ".join(f"{x:>10}" for x in names) + " " + " ".join(f"{'/' + x:>9}" for x in names[1:]))
    for size in sorted(set().union(*(times.get(x, {}) for x in names))):  # "-": a variant that has no such size
        med = [statistics.median(times[x][size]) if size in times.get(x, {}) else None for x in names]
        cell = lambda m: f"{m:>10.2f}" if m else f"{'-':>10}"
        ratio = lambda m: f"{med[0] / m:>9.2f}" if m and med[0] else f"{'-':>9}"
        print(f"{size:>10} " + " ".join(cell(m) for m in med) + " " + " ".join(ratio(m) for m in med[1:]))


if __name__ == "__main__":
    main()
