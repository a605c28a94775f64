#!/usr/bin/env python3
"""Disk in proportion: what a `parley run` leaves on disk, against the rollouts it wrote.

Runs `parley run --no-raw-calls --num-tasks N --concurrency C` (generated multi-step tasks, the
built-in stub) once per binary given, one after another in the same sitting, and samples the
size of the database's write-ahead log (`<db>-wal`) every `--interval` seconds through the run.
Prints, ratios first: the database's bytes per rollout over the rollout's JSONL row, and the
peak WAL; then the absolute figures (final database, peak WAL, JSONL, rollouts/s over the
process's wall time) and where the database's bytes go, table by table (when Python's SQLite
has the `dbstat` table).

    bench/disk.py                                   # 100,000 rollouts, target/release/parley
    bench/disk.py --quick                           # a smoke run of a few seconds (CI)
    bench/disk.py --bin before=/tmp/parley-old --bin after=target/release/parley --tasks 300000

Standard library only.
"""

import argparse
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class Sampler(threading.Thread):
    """The WAL's size every `interval` seconds, until stopped."""

    def __init__(self, wal, interval):
        super().__init__(daemon=True)
        self.wal, self.interval = wal, interval
        self.samples = []
        self.done = threading.Event()

    def run(self):
        start = time.monotonic()
        while not self.done.is_set():
            self.samples.append((time.monotonic() - start, size(self.wal)))
            self.done.wait(self.interval)

    def stop(self):
        self.done.set()
        self.join()
        self.samples.append((None, size(self.wal)))
        return max(s for _, s in self.samples)


def tables(db):
    """Bytes of each table and index, largest first, or None without `dbstat`."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    except sqlite3.Error:
        return None
    return dict(rows)


def measure(label, parley, tasks, concurrency, interval, work):
    db, out = work / f"{label}.db", work / f"{label}.jsonl"
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), out):
        p.unlink(missing_ok=True)
    cmd = [parley, "run", "--no-raw-calls", "--num-tasks", str(tasks), "--concurrency", str(concurrency),
           "--db", str(db), "--out", str(out)]
    sampler = Sampler(f"{db}-wal", interval)
    sampler.start()
    started = time.monotonic()
    run = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - started
    peak_wal = sampler.stop()
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stderr[-2000:]}")
    with open(out, "rb") as f:
        rollouts = sum(1 for _ in f)
    row = {
        "label": label,
        "binary": str(parley),
        "tasks": tasks,
        "concurrency": concurrency,
        "rollouts": rollouts,
        "wall_s": round(wall, 2),
        "rollouts_per_s": round(rollouts / wall, 1),
        "peak_wal_bytes": peak_wal,
        "final_wal_bytes": size(f"{db}-wal"),
        "db_bytes": size(db),
        "jsonl_bytes": size(out),
        "tables": tables(db),
        "wal_samples": [[round(t, 2), s] for t, s in sampler.samples if t is not None],
    }
    row["db_per_rollout"] = row["db_bytes"] / max(rollouts, 1)
    row["jsonl_per_rollout"] = row["jsonl_bytes"] / max(rollouts, 1)
    row["db_over_jsonl"] = row["db_per_rollout"] / max(row["jsonl_per_rollout"], 1)
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), out):
        p.unlink(missing_ok=True)
    return row


def mb(n):
    return f"{n / 1e6:,.1f}"


def show(rows):
    print("\n| binary | rollouts | db / JSONL per rollout | peak WAL MB | db B/rollout | JSONL B/rollout "
          "| final db MB | final WAL MB | rollouts/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['label']} | {r['rollouts']:,} | **{r['db_over_jsonl']:.2f}** | **{mb(r['peak_wal_bytes'])}** "
              f"| {r['db_per_rollout']:,.0f} | {r['jsonl_per_rollout']:,.0f} | {mb(r['db_bytes'])} "
              f"| {mb(r['final_wal_bytes'])} | {r['rollouts_per_s']:,.0f} |")
    for r in rows:
        if r["tables"]:
            parts = ", ".join(f"{name} {b / max(r['rollouts'], 1):,.0f}" for name, b in list(r["tables"].items())[:6])
            print(f"\n{r['label']}: bytes per rollout by table and index: {parts}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", action="append", default=[], metavar="LABEL=PATH",
                    help="a parley binary to measure (repeatable; default: target/release/parley, or $PARLEY_BIN)")
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between two samples of the WAL's size")
    ap.add_argument("--quick", action="store_true", help="2,000 rollouts, sampled every 0.1 s: a smoke run")
    ap.add_argument("--work", type=Path, help="where the databases go (default: a temporary folder)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args()
    if a.quick:
        a.tasks, a.interval = 2_000, 0.1
    default = os.environ.get("PARLEY_BIN", str(ROOT / "target/release/parley"))
    bins = [b.split("=", 1) if "=" in b else (Path(b).name, b) for b in a.bin] or [("parley", default)]
    with tempfile.TemporaryDirectory(dir=a.work) as work:
        rows = []
        for label, parley in bins:
            rows.append(measure(label, parley, a.tasks, a.concurrency, a.interval, Path(work)))
            print(f"{label}: {rows[-1]['rollouts']:,} rollouts, peak WAL {mb(rows[-1]['peak_wal_bytes'])} MB",
                  file=sys.stderr)
    show(rows)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
