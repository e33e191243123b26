#!/usr/bin/env python3
"""Strata against Open MPI on the same ranks and sizes, interleaved, several times.

Runs each perf tool under mpirun twice per repetition, once through Strata and once with
--backend mpi (Open MPI's collectives, under --mca btl vader,self and MPI_ENV below), for 2 and 4
local ranks, and prints per size the median busbw of each, their ratio, the lowest and highest
ratio of one repetition's pair of runs, and a memory-bandwidth bound from perf/membw_probe
measured in the same run on buffers of that size (docs/perf.md derives it). Strata's buffers
are private host memory, as MPI's are (--strata-memory ncclmemalloc: ncclMemAlloc's shared
segments instead).

usage: perf/compare.py [--build build] [--reps 5] [--ranks 2,4] [--colls all_reduce,...] [-b 8] [-e 128M] [-f 8]
"""
import argparse
import os
import statistics
import subprocess
import sys

# Open MPI allocates scratch memory per call; without this glibc returns it to the OS each
# time and every large call pays page faults again (docs/perf.md).
MPI_ENV = {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"}


def mpirun(n, args, env_extra):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n),
           "--mca", "btl", "vader,self"]
    for k, v in env_extra.items():
        cmd += ["-x", f"{k}={v}"]
    out = subprocess.run(cmd + args, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {' '.join(cmd + args)}\n{out.stdout}\n{out.stderr}")
    rows = {}
    for line in out.stdout.splitlines():
        f = line.split()
        if len(f) >= 13 and not line.startswith("#") and f[0].isdigit():
            rows[int(f[0])] = (float(f[5]), float(f[7]))  # out-of-place time (us), busbw (GB/s)
    return rows


def probe(build, mib, threads):
    out = subprocess.run([os.path.join(build, "bin", "membw_probe"), str(mib), str(threads)], capture_output=True,
                         text=True, check=True)
    vals = dict(l.split() for l in out.stdout.splitlines() if l.endswith(tuple("0123456789")) and " " in l
                and not l.startswith("membw"))
    return float(vals["copy_gbps"]), float(vals["add_gbps"]), float(vals["cma_gbps"])


def bound(coll, n, cores, copy, add):
    """busbw (GB/s) at which the memory system alone would limit the collective (docs/perf.md).

    The least bytes the n ranks must write, out of place, spread over w = min(n, cores)
    cores that each write at `copy` (memcpy) or `add` (c = a + b) bytes per second, the
    per-core rates measured with w cores working at once.
    """
    w = min(n, cores)
    if coll == "all_reduce":      # per rank: n-1 adds of S/n (its share), (n-1)S/n of the result copied in
        return 2 * w / (n * (1 / add + 1 / copy))
    if coll == "reduce_scatter":  # per rank: n-1 adds of S/n
        return add * w / n
    if coll in ("all_gather", "alltoall"):  # per rank: the whole S output, its own S/n included
        return copy * w * (n - 1) / (n * n)
    if coll == "broadcast":       # every rank writes S (the root its own output too)
        return copy * w / n
    if coll == "reduce":          # n-1 adds of S in all, shared by every core
        return add * w / (n - 1)
    if coll in ("gather", "scatter"):  # S written in all (each piece once), by every core in parallel
        return copy * w * (n - 1) / n
    return float("nan")


def cma_bound(coll, n, cores, copy, cma):
    """The bound above with the bytes from peers' private memory moved at `cma`
    (process_vm_readv's rate, the one single copy out of another process's private
    memory) and only each rank's own piece at `copy`; None where the collective's
    bytes need not cross by CMA (the reductions) or CMA is refused (cma == 0)."""
    w = min(n, cores)
    if cma <= 0:
        return None
    if coll in ("all_gather", "alltoall"):  # per rank: (n-1)S/n read from peers, its own S/n copied
        return (n - 1) * w / (n * ((n - 1) / cma + 1 / copy))
    if coll == "broadcast":  # n-1 ranks read S, the root copies S
        return w / ((n - 1) / cma + 1 / copy)
    if coll in ("gather", "scatter"):  # (n-1)S/n across processes, the root's own S/n copied
        return (n - 1) * w / ((n - 1) / cma + 1 / copy)
    return None


def bare_us(build, size, iters):
    """perf/bare_exchange's time (us) for a 2-process all-gather of `size` bytes on
    private memory: the copies every design must make, by CMA or through slots,
    whichever was faster, with no library around them. A 2-rank all-to-all makes the
    same copies."""
    out = subprocess.run([os.path.join(build, "bin", "bare_exchange"), str(size / (1 << 20)), str(iters)],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode:
        sys.exit(f"bare_exchange failed ({out.returncode}) at {size} bytes:\n{out.stdout}\n{out.stderr}")
    got = [float(line.split()[1]) for line in out.stdout.splitlines() if line.split()[:1] in (["cma_us"], ["slots_us"])]
    return min(got)  # no cma_us where the kernel refuses process_vm_readv


BARE = ("all_gather", "alltoall")  # with 2 ranks: the collectives whose copies bare_exchange makes


def parse_size(text):
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * scale[text[-1].upper()]) if text[-1].upper() in scale else int(float(text))


SMALL = 1 << 20  # below this, a run of 10 iterations is too short to time


def sizes_between(lo, hi, f):
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= f
    return out


def sweeps(args):
    """Splits -b..-e (same grid) into a small-size run with many iterations and a large-size run."""
    lo, hi, f = parse_size(args.b), parse_size(args.e), int(args.f)
    sizes = []
    s = lo
    while s <= hi:
        sizes.append(s)
        s *= f
    small = [x for x in sizes if x < SMALL]
    large = [x for x in sizes if x >= SMALL]
    out = []
    if small:
        out.append((small[0], small[-1], 1000, 100))
    if large:
        # 6 warm-up calls: on the test VM the first process_vm_readv/writev that
        # reaches a page costs ~1.5 ms per MiB (0.1 after), and a read that both ends
        # share (scatter, broadcast) reaches new pages over its first few calls, as
        # the split between them settles (docs/perf.md, "Warm-up on new memory").
        out.append((large[0], large[-1], 10, 6))
    return out


def rep_range(s_runs, m_runs):
    """The lowest and highest ratio of one repetition's pair of runs (one after the other in
    that repetition): how far a cell's median moves with the machine (docs/perf.md). "-"
    unless both sides have a positive time in every repetition, so no pair is mismatched."""
    if not s_runs or len(s_runs) != len(m_runs) or any(x[0] <= 0 for x in s_runs + m_runs):
        return "-"
    r = [m[0] / s[0] for s, m in zip(s_runs, m_runs)]
    return f"{min(r):.2f}-{max(r):.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--colls", default="all_reduce,all_gather,reduce_scatter,broadcast,reduce,alltoall,gather,scatter")
    ap.add_argument("--strata-memory", default="private", choices=["private", "ncclmemalloc"])
    ap.add_argument("-b", default="8")
    ap.add_argument("-e", default="128M")
    ap.add_argument("-f", default="8")
    args = ap.parse_args()
    ranks = [int(x) for x in args.ranks.split(",")]
    colls = args.colls.split(",")
    cores = os.cpu_count()
    res = {}  # (n, coll, side) -> size -> [busbw...], plus times
    rates = {}  # size (>= 1 MiB) -> [(copy, add)...], each probed on buffers of that size
    large = [size for lo, hi, _, _ in sweeps(args) if lo >= SMALL for size in sizes_between(lo, hi, int(args.f))]
    strata_env = {"STRATA_PERF_PRIVATE_MEMORY": "1"} if args.strata_memory == "private" else {}
    bares = {}  # size (>= 1 MiB) -> [us...], where a 2-rank all-gather or all-to-all runs
    want_bare = 2 in ranks and any(c in BARE for c in colls)
    for rep in range(args.reps):
        for size in large:
            rates.setdefault(size, []).append(probe(args.build, size / (1 << 20), cores))
            if want_bare:
                bares.setdefault(size, []).append(bare_us(args.build, size, 10))
        for n in ranks:
            for coll in colls:
                # Which runs first alternates: on the 2-core VM the first of two runs in a
                # row was up to 12% faster (perf/ab.py).
                sides = (("strata", [], strata_env), ("mpi", ["--backend", "mpi"], MPI_ENV))
                for side, extra, env in sides[::-1] if rep % 2 else sides:
                    for lo, hi, iters, warm in sweeps(args):
                        tool = [os.path.join(args.build, "bin", f"{coll}_perf"), "-b", str(lo), "-e", str(hi),
                                "-f", args.f, "-n", str(iters), "-w", str(warm), "-c", "0"]
                        rows = mpirun(n, tool + extra, env)
                        for size, (us, bw) in rows.items():
                            res.setdefault((n, coll, side), {}).setdefault(size, []).append((us, bw))
        print(f"# repetition {rep + 1}/{args.reps} done", file=sys.stderr)
    med = {size: tuple(statistics.median(r[i] for r in v) for i in range(3)) for size, v in rates.items()}
    for size, (copy, add, cma) in sorted(med.items()):
        print(f"# membw_probe on {size >> 20} MiB buffers, {cores} cores at once, medians: copy {copy:.2f} GB/s, "
              f"c=a+b {add:.2f} GB/s, copy by process_vm_readv {cma:.2f} GB/s per core")
    print(f"# medians of {args.reps} interleaved runs; busbw in GB/s; out-of-place; float sum; Strata on "
          f"{args.strata_memory} memory")
    for n in ranks:
        for coll in colls:
            bare = n == 2 and coll in BARE and bares
            print(f"\n## {coll}, {n} ranks (bound from 1 MiB: the memory system alone, docs/perf.md; %cma: of "
                  f"the bound with peers' bytes moved at process_vm_readv's rate"
                  + ("; bare: perf/bare_exchange's time for the same copies with no library, and each side's "
                     "time over it" if bare else "") + ")")
            print(f"{'size':>12} {'strata':>9} {'openmpi':>9} {'ratio':>7} {'bound':>7} {'%bound':>7} {'%cma':>6} "
                  f"{'strata us':>10} {'mpi us':>10} {'per-rep ratio':>13}"
                  + (f" {'bare us':>9} {'s/bare':>7} {'m/bare':>7}" if bare else ""))
            s_rows, m_rows = res[(n, coll, "strata")], res[(n, coll, "mpi")]
            for size in sorted(s_rows):
                if size == 0:
                    continue
                s_bw = statistics.median(x[1] for x in s_rows[size])
                m_bw = statistics.median(x[1] for x in m_rows.get(size, [(0, 0)]))
                s_us = statistics.median(x[0] for x in s_rows[size])
                m_us = statistics.median(x[0] for x in m_rows.get(size, [(0, 0)]))
                # Same bytes on both sides, so the busbw ratio is the time ratio (unrounded).
                ratio = m_us / s_us if s_us > 0 else float("nan")
                b = bound(coll, n, cores, *med[size][:2]) if size in med else float("nan")
                share = f"{100 * s_bw / b:>6.0f}%" if size in med else f"{'-':>7}"
                c = cma_bound(coll, n, cores, med[size][0], med[size][2]) if size in med else None
                cshare = f"{100 * s_bw / c:>5.0f}%" if c else f"{'-':>6}"
                tail = ""
                if bare:
                    ref = statistics.median(bares[size]) if size in bares else None
                    tail = f" {ref:>9.1f} {s_us / ref:>7.2f} {m_us / ref:>7.2f}" if ref else f" {'-':>9} {'-':>7} {'-':>7}"
                print(f"{size:>12} {s_bw:>9.2f} {m_bw:>9.2f} {ratio:>7.2f} {b:>7.2f} {share} {cshare} {s_us:>10.2f} "
                      f"{m_us:>10.2f} {rep_range(s_rows[size], m_rows.get(size, [])):>13}{tail}")


if __name__ == "__main__":
    main()
