#!/usr/bin/env python3
"""All-reduce across "nodes" of the netns test bed: Strata (its own choice and each
algorithm forced with NCCL_ALGO) against Open MPI over TCP, interleaved, several times.

Builds the test bed (scripts/netns-testbed.sh up NODES RATE), runs every configuration
once per repetition in turn, prints per size the median time and algbw/busbw of each,
and tears the bed down. Each node runs PER_NODE processes (one rank each), for Strata
and for Open MPI alike. Run as root.

usage: perf/netns_bench.py --nodes 2 --per-node 2 --rate 1gbit [--reps 3]
         [--configs default,Ring,Hierarchical,Tree,OneShot,mpi] [-b 8] [-e 256M] [-f 4] [-n 20] [-w 2]
         [--tcp-baseline] [--show-choice]
"""
import argparse
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BED = os.path.join(ROOT, "scripts", "netns-testbed.sh")
# As in compare.py: keep Open MPI's scratch memory mapped between calls.
MPI_ENV = {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"}
NET = "192.0.2.0/24"


def node_ip(k):
    return f"192.0.2.{101 + k}"


def launch(nodes, per_node, tool_args, env):
    """mpirun started inside node 0, each rank entering its node's namespace."""
    cmd = ["ip", "netns", "exec", "strata-node0", "env", "PMIX_MCA_ptl_tcp_remote_connections=1",
           f"PMIX_MCA_ptl_tcp_if_include={NET}", "mpirun", "--allow-run-as-root", "--oversubscribe",
           "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", NET, "--mca", "oob_tcp_if_include", NET]
    for k in range(nodes):
        if k:
            cmd.append(":")
        node_env = [f"{a}={b}" for a, b in env.items()] + [f"NCCL_HOSTID=strata-node{k}", "NCCL_SOCKET_IFNAME=eth0"]
        cmd += ["-np", str(per_node), "ip", "netns", "exec", f"strata-node{k}", "env"] + node_env + tool_args
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out.stdout + out.stderr


def parse(text):
    rows, choices = {}, {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 13 and not line.startswith("#") and f[0].isdigit():
            size, t = int(f[0]), float(f[5])  # out-of-place time (us); algbw from it, unrounded
            rows[size] = (t, size / t / 1e3 if t > 0 else 0.0)
        if "-> " in line and "AllReduce" in line:  # the tuner's log line: "... N bytes ... -> Algo/Proto"
            words = line.split()
            size = int(words[words.index("bytes") - 1])
            choices[size] = words[words.index("->") + 1].rstrip(",")
    return rows, choices


def run_config(name, args, a):
    tool = [os.path.join(a.build, "bin", "all_reduce_perf"), "-b", a.b, "-e", a.e, "-f", a.f, "-n", a.n,
            "-w", a.w, "-c", "0"]
    env = {}
    if name == "mpi":
        tool += ["--backend", "mpi"]
        env.update(MPI_ENV)
    elif name not in ("default", "choice"):
        env["NCCL_ALGO"] = f"allreduce:{name}"
    if name == "choice":  # one untimed pass that logs the tuner's picks
        env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING"})
        tool[tool.index("-n") + 1], tool[tool.index("-w") + 1] = "1", "0"
    if a.net_gbps and name != "mpi":
        env["STRATA_NET_GBPS"] = a.net_gbps
    return parse(launch(a.nodes, a.per_node, tool, env))


def tcp_baseline(a):
    """One stream each way between node 0 and node 1, as tcp_pair measures it."""
    exe = os.path.join(a.build, "bin", "tcp_pair")
    res = {}
    for mode in ("one-way", "bidir"):
        extra = ["--bidir"] if mode == "bidir" else []
        srv = subprocess.Popen(["ip", "netns", "exec", "strata-node1", exe, "--listen", "5999", "--bytes",
                                str(a.tcp_bytes)] + extra, stdout=subprocess.PIPE, text=True)
        cli = subprocess.run(["ip", "netns", "exec", "strata-node0", exe, "--connect", f"{node_ip(1)}:5999",
                              "--bytes", str(a.tcp_bytes)] + extra, capture_output=True, text=True, timeout=600)
        s_out, _ = srv.communicate(timeout=600)
        recv = [float(l.split()[4]) for l in (s_out + cli.stdout).splitlines() if l.startswith("tcp_pair")]
        res[mode] = min(x for x in recv if x > 0)  # per direction: the slower receiver
    return res


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--per-node", type=int, default=2)
    p.add_argument("--rate", default="1gbit", help="htb rate per node link, or none")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--configs", default="default,Ring,Hierarchical,Tree,mpi")
    p.add_argument("-b", default="8")
    p.add_argument("-e", default="256M")
    p.add_argument("-f", default="4")
    p.add_argument("-n", default="20")
    p.add_argument("-w", default="2")
    p.add_argument("--net-gbps", default="", help="STRATA_NET_GBPS for the Strata runs")
    p.add_argument("--show-choice", action="store_true", help="print the tuner's choice per size")
    p.add_argument("--tcp-baseline", action="store_true", help="also measure a plain TCP pair, node 0 <-> 1")
    p.add_argument("--tcp-bytes", type=int, default=1 << 30)
    p.add_argument("--keep-bed", action="store_true", help="use an existing bed and leave it up")
    a = p.parse_args()
    configs = a.configs.split(",")
    if not a.keep_bed:
        subprocess.run([BED, "up", str(a.nodes), a.rate], check=True)
    try:
        results = {c: [] for c in configs}
        choices = run_config("choice", configs, a)[1] if a.show_choice else {}
        tcp = []
        for rep in range(a.reps):
            for c in configs:
                results[c].append(run_config(c, configs, a)[0])
                print(f"# rep {rep + 1}/{a.reps} {c}: done", file=sys.stderr, flush=True)
            if a.tcp_baseline:
                tcp.append(tcp_baseline(a))
    finally:
        if not a.keep_bed:
            subprocess.run([BED, "down"], check=False)
    report(a, configs, results, choices, tcp)


def report(a, configs, results, choices, tcp):
    n = a.nodes * a.per_node
    print(f"# all-reduce, {a.nodes} nodes x {a.per_node} ranks, links {a.rate}, medians of {a.reps} runs "
          f"(time us / algbw GB/s)")
    forced = [c for c in configs if c not in ("default", "mpi")]
    head = f"{'bytes':>10}" + "".join(f"{c:>22}" for c in configs)
    if choices:
        head += "   choice"
    if forced and "default" in configs:
        head += "   best forced, default/best time"
    print(head)
    sizes = sorted(results[configs[0]][0])
    for s in sizes:
        line = f"{s:>10}"
        for c in configs:
            t = statistics.median(r[s][0] for r in results[c])
            bw = statistics.median(r[s][1] for r in results[c])
            line += f"{t:>13.1f} {bw:>8.4f}"
        if choices:
            line += "   " + choices.get(s, "?")
        if forced and "default" in configs:
            med = {c: statistics.median(r[s][0] for r in results[c]) for c in forced + ["default"]}
            best = min(forced, key=lambda c: med[c])
            line += f"   {best} {med['default'] / med[best]:.2f}"
        print(line)
    if tcp:
        for mode in ("one-way", "bidir"):
            print(f"# plain TCP pair node0<->node1 {mode}: median {statistics.median(t[mode] for t in tcp):.3f} GB/s "
                  f"per direction ({', '.join(f'{t[mode]:.3f}' for t in tcp)})")
    print(f"# busbw = algbw x {2 * (n - 1) / n:.3f}; link bound on algbw for {a.nodes} nodes: "
          f"B x {a.nodes / (2 * (a.nodes - 1)):.3f}")


if __name__ == "__main__":
    main()
