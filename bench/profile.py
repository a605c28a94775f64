#!/usr/bin/env python3
"""Where a persisted multi-step rollout's CPU goes in Parley: `bench/profile.py` (docs/performance.md).

One `parley stub --threads 1` plays the model; `parley run --env multi-step` drives 200 task
rows x TRIALS at c = 256 against it, every turn and raw body persisted, under `perf record
--call-graph dwarf`. Each sample is charged to the most specific part of Parley on its stack
(read from the leaf up, allocator, libc and kernel frames passed over), and, apart, to what its
leaf is (Parley's code, SQLite, the allocator, the kernel). The whole run's CPU (user + system)
is read with the stub's, so the table's figures are CPU-milliseconds per rollout. The same run
is measured again without raw bodies and without per-turn persistence, to say what persisting
costs of it.

Needs `perf` and the profiling build (the release build with line tables):
    cargo build --profile profiling -p parley-cli
    python3 bench/profile.py [--parley target/profiling/parley] [--trials 50]
Standard library only.
"""

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")

# The parts of Parley a sample is charged to: the first frame, from the leaf up, that names one.
PARTS = [
    ("store: request deltas", ("parley_store::delta",)),
    ("store: writer (batches, binding, fences, acks)", ("parley_store::",)),
    ("SQL clients (sqlx, rusqlite: statements, rows, channels)", ("sqlx_core::", "sqlx_sqlite::", "flume::", "rusqlite::")),
    # Parley's own writer of request bodies, rows and columns, byte for byte serde_json's.
    ("JSON (serde_json, parley_core::json)", ("serde_json::", "parley_core::json::")),
    ("HTTP client (parley_http::plain; hyper for https)", ("parley_http::plain", "httparse::", "hyper::", "hyper_util::", "hyper_rustls::", "reqwest::", "http::", "h2::")),
    ("HTTP stack (tower, retries, bodies)", ("parley_http::", "tower::")),
    ("model client (requests, replies)", ("parley_llm::",)),
    ("environment (tools)", ("environment_multi_step::",)),
    ("scoring", ("parley_scoring::", "parley_rewards::")),
    ("rollout rows and summary", ("parley_export::", "parley_runtime::rows", "parley::summary", "parley::commands")),
    ("engine and agent (sessions, turns, scheduler)", ("parley_engine::", "agent_tool_calling::", "parley_core::")),
    ("runtime (run set-up, tasks)", ("parley_runtime::",)),
    ("tracing", ("tracing::", "tracing_core::", "tracing_subscriber::")),
    ("tokio (scheduling, timers, I/O driver)", ("tokio::", "mio::")),
]
# Frames passed over when looking for the part: they work for whoever called them.
SHARED = re.compile(r"^(_?mi_|mi_|__?libc|__memmove|__memcpy|__memset|__memcmp|malloc|free|realloc|_int_|core::|alloc::|std::|<alloc::|<core::|<std::|\[unknown\])")
SQLITE = re.compile(r"^(sqlite3|wal|btree|pager|pcache|vdbe|balance_|unixWrite|unixRead|unixSync|memjrnl|sqlite)", re.I)
ALLOCATOR = re.compile(r"^(_?mi_|mi_|malloc|free|realloc|_int_malloc|_int_free|__libc_malloc|__libc_free|unlink_chunk|malloc_consolidate)")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def leaf_kind(frames):
    leaf_addr, leaf = frames[0]
    if leaf_addr.startswith("ffffffff"):
        return "kernel (syscalls, wakeups, page faults)"
    if SQLITE.match(leaf):
        return "SQLite's own code"
    if ALLOCATOR.match(leaf):
        return "allocator (mimalloc, libc)"
    if leaf.startswith(("__mem", "__GI_", "pthread_", "syscall", "__lll", "__futex")):
        return "libc (copies, locks)"
    return "Parley and its crates"


def part_of(comm, frames):
    if comm.startswith(("parley-store-co", "sqlx-sqlite")):
        return "SQLite statements (the committing thread, sqlx's connection threads)"
    for _, symbol in frames:
        if symbol.startswith("ffffffff") or SHARED.match(symbol):
            continue
        for part, prefixes in PARTS:
            if any(p in symbol for p in prefixes):
                return part
    return "other (process start, clap, untraced)"


def samples(script):
    """(comm, [(address, symbol), ...] leaf first) for each sample of `perf script`'s output."""
    comm, frames = None, []
    for line in script.splitlines():
        if line.startswith("\t"):
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                frames.append((parts[0], re.sub(r"\s+\(inlined\)$", "", parts[1])))
        elif not line.strip():
            if comm is not None and frames:
                yield comm, frames
            comm, frames = None, []
        else:
            comm = line.split()[0]
    if comm is not None and frames:
        yield comm, frames


def cpu_per_rollout(parley, work, run, rollouts, env=None):
    """(Parley's, the stub's) CPU-ms per rollout of `run`, on a fresh database and stub."""
    for old in work.glob("run.db*"):
        old.unlink()
    stub, url = start_stub(parley, work)
    run = list(map(str, run))
    run[run.index("--base-url") + 1] = url
    try:
        stub_before = cpu_ticks(stub.pid)
        proc = subprocess.Popen(run, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})})
        _, status, usage = os.wait4(proc.pid, 0)
        if status != 0:
            raise SystemExit(f"profile: the run failed ({status}): {' '.join(run)}")
        stub_ms = (cpu_ticks(stub.pid) - stub_before) * 1e3 / TICK / rollouts
    finally:
        stub.kill()
        stub.wait()
    return (usage.ru_utime + usage.ru_stime) * 1e3 / rollouts, stub_ms


def start_stub(parley, work):
    """`parley stub --threads 1` on a free port: the process and its URL."""
    log = open(work / "stub.log", "w")
    stub = subprocess.Popen([parley, "stub", "--port", "0", "--threads", "1"], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        found = re.search(r"http://[0-9.:]+/v1", (work / "stub.log").read_text())
        if found:
            return stub, found.group(0)
        time.sleep(0.05)
    stub.kill()
    raise SystemExit("profile: the stub did not say where it listens")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parley", default=str(ROOT / "target/profiling/parley"))
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--frequency", type=int, default=700, help="samples per second per CPU")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each configuration measured without perf")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="parley-profile-"))
    parley = args.parley
    subprocess.run([parley, "tasks", "multi-step", "--count", "200", "--out", work / "tasks.jsonl"], check=True,
                   capture_output=True)
    stub, url = start_stub(parley, work)
    try:
        rollouts = 200 * args.trials
        run = [parley, "run", "--env", "multi-step", "--tasks", work / "tasks.jsonl", "--trials", str(args.trials),
               "--base-url", url, "-c", str(args.concurrency), "--db", work / "run.db", "--out", work / "out.jsonl"]
        started = time.monotonic()
        perf = subprocess.run(["perf", "record", "-q", "-F", str(args.frequency), "--call-graph", "dwarf,16384",
                               "-o", work / "perf.data", "--", *map(str, run)], capture_output=True, text=True)
        wall = time.monotonic() - started
        if perf.returncode != 0:
            raise SystemExit(f"profile: the run failed: {perf.stderr[-2000:]}")
    finally:
        stub.kill()
        stub.wait()
    # The run's own CPU, measured again without perf (perf's unwinding adds its own), then with
    # less persisted, to say what persistence costs of it. A single run moves by 10%: each is run
    # `--repeat` times, the three in turn, and the median of each is taken.
    configs = {
        "every turn and raw body persisted": (run, None),
        "raw bodies not kept (--no-raw-calls)": (run + ["--no-raw-calls"], None),
        "turns not persisted (PARLEY_BENCH_NO_TURNS=1)": (run, {"PARLEY_BENCH_NO_TURNS": "1"}),
    }
    measured = {what: [] for what in configs}
    for _ in range(args.repeat):
        for what, (command, env) in configs.items():
            measured[what].append(cpu_per_rollout(parley, work, command, rollouts, env))
    medians = {what: (statistics.median(p for p, _ in runs), statistics.median(s for _, s in runs))
               for what, runs in measured.items()}
    parley_ms, stub_ms = medians.pop("every turn and raw body persisted")
    without = medians

    script = subprocess.run(["perf", "script", "-i", work / "perf.data", "-F", "comm,ip,sym"], capture_output=True,
                            text=True).stdout
    by_part, by_leaf, total = collections.Counter(), collections.Counter(), 0
    for comm, frames in samples(script):
        by_part[part_of(comm, frames)] += 1
        by_leaf[leaf_kind(frames)] += 1
        total += 1
    figures = {
        "rollouts": rollouts, "concurrency": args.concurrency, "wall_s_under_perf": wall, "samples": total,
        "parley_cpu_ms_per_rollout": parley_ms, "stub_cpu_ms_per_rollout": stub_ms,
        "persisting_less": {k: {"parley_cpu_ms_per_rollout": p, "stub_cpu_ms_per_rollout": st}
                            for k, (p, st) in without.items()},
        "parts": {k: v / total for k, v in by_part.most_common()},
        "leaves": {k: v / total for k, v in by_leaf.most_common()},
    }
    print(f"{rollouts} multi-step rollouts at c = {args.concurrency}, every turn and raw body persisted")
    print(f"Parley {parley_ms:.3f} CPU-ms per rollout, the stub {stub_ms:.3f}: "
          f"Parley / stub = {parley_ms / stub_ms:.2f}\n")
    print("| part of Parley | share | CPU-ms per rollout |\n|---|---:|---:|")
    for part, share in figures["parts"].items():
        print(f"| {part} | {share:.1%} | {share * parley_ms:.3f} |")
    print("\n| the same run | Parley CPU-ms per rollout | the stub's | Parley / stub |\n|---|---:|---:|---:|")
    for what, (p, st) in [("every turn and raw body persisted", (parley_ms, stub_ms)), *without.items()]:
        print(f"| {what} | {p:.3f} | {st:.3f} | {p / st:.2f} |")
    print("\n| what the CPU runs | share |\n|---|---:|")
    for leaf, share in figures["leaves"].items():
        print(f"| {leaf} | {share:.1%} |")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
