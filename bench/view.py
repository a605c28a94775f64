"""Times `parley view`'s pages over HTTP on a run of many sessions (see bench/view)."""

import argparse
import datetime
import http.client
import json
import os
import shutil
import pathlib
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def banner(proc):
    """The address a `parley stub` or `parley view` prints on its first line."""
    line = proc.stdout.readline().decode().strip()
    if not line.startswith("http://"):
        sys.exit(f"unexpected banner: {line!r}")
    return line


def create(parley, db, sessions, concurrency, work):
    """A run of `sessions` generated multi-step tasks against the stub, stored in `db`."""
    stub = subprocess.Popen([parley, "stub", "--port", "0", "--threads", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        url = banner(stub)
        start = time.monotonic()
        subprocess.run(
            [parley, "run", "--env", "multi-step", "--num-tasks", str(sessions), "--concurrency", str(concurrency),
             "--base-url", url, "--model", "stub-model", "--db", db, "--out", os.path.join(work, "rollouts.jsonl")],
            check=True, stdout=subprocess.DEVNULL, cwd=work,
        )
        return time.monotonic() - start
    finally:
        stub.kill()
        stub.wait()


def fetch(host, port, path):
    """One GET on a new connection: (milliseconds to the whole body, status, body length)."""
    start = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=60)
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return (time.perf_counter() - start) * 1e3, response.status, len(body)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--parley", default=str(ROOT / "target/release/parley"))
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=1024)
    parser.add_argument("--db", help="database to create, or reuse when it already holds the run")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--results", default=str(ROOT / "bench/results"))
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2,000 sessions, nothing written")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.concurrency, args.repeats = 2_000, 64, 3

    work = tempfile.mkdtemp(prefix="parley-view-bench-")
    db = os.path.abspath(args.db or os.path.join(work, "parley.db"))
    have = 0
    if os.path.exists(db):
        with sqlite3.connect(db) as conn:
            have = conn.execute("SELECT COUNT(*) FROM sessions WHERE run_id = 1").fetchone()[0]
    created_s = None
    if have != args.sessions:
        if have:
            sys.exit(f"{db} holds {have} sessions in run 1, not {args.sessions}; pass another --db")
        print(f"== creating {args.sessions:,} sessions (c = {args.concurrency}) in {db}", file=sys.stderr)
        created_s = create(args.parley, db, args.sessions, args.concurrency, work)
        print(f"   {created_s:.1f} s", file=sys.stderr)
    with sqlite3.connect(db) as conn:
        (last,) = conn.execute("SELECT MAX(id) FROM sessions WHERE run_id = 1").fetchone()
    size_mib = os.path.getsize(db) / 2**20

    view = subprocess.Popen([args.parley, "view", "--db", db, "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        base = banner(view)
        host, port = base.removeprefix("http://").rstrip("/").split(":")
        pages = [
            ("sessions, first page (50)", "/runs/1/sessions", args.repeats),
            ("sessions, first page, filtered", "/runs/1/sessions?termination=agent_stop&reward_max=0.5", args.repeats),
            ("sessions, a filter nothing matches (reads all)", "/runs/1/sessions?termination=agent_stop&reward_min=1",
             args.repeats),
            ("sessions, a page at the end", f"/runs/1/sessions?after={last - 60}", args.repeats),
            ("sessions, one task", "/runs/1/sessions?task=77777", args.repeats),
            ("runs", "/", args.repeats),
            ("a session", f"/sessions/{last // 2}", args.repeats),
            ("the run: summary and plots over every session", "/runs/1", max(3, args.repeats // 10)),
        ]
        rows = []
        for name, path, repeats in pages:
            # The first view apart: the run's page computes its figures then, and keeps them.
            first_ms, status, _ = fetch(host, int(port), path)
            if status != 200:
                sys.exit(f"{path}: HTTP {status}")
            times = sorted(fetch(host, int(port), path)[0] for _ in range(repeats))
            rows.append({"page": name, "path": path, "repeats": repeats, "first_ms": first_ms,
                         "p50_ms": statistics.median(times),
                         "p95_ms": times[min(len(times) - 1, int(0.95 * len(times)))], "max_ms": times[-1],
                         "bytes": fetch(host, int(port), path)[2]})
    finally:
        view.terminate()
        view.wait()
        if not args.db:
            shutil.rmtree(work, ignore_errors=True)

    print(f"\nparley view on {args.sessions:,} sessions ({size_mib:.0f} MiB database), {os.cpu_count()} CPUs")
    print(f"{'page':<48} {'first ms':>9} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'KiB':>7}")
    for r in rows:
        print(f"{r['page']:<48} {r['first_ms']:>9.1f} {r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f} {r['max_ms']:>8.1f} "
              f"{r['bytes'] / 1024:>7.1f}")
    first = rows[0]
    verdict = "holds" if max(first["max_ms"], first["first_ms"]) < 200 else "MISSED"
    print(f"\ntarget: the first page of sessions in under 200 ms: {verdict} (p50 {first['p50_ms']:.1f} ms, "
          f"max {first['max_ms']:.1f} ms of {first['repeats']}, first view {first['first_ms']:.1f} ms)")

    if args.quick:
        return
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    result = {"date": stamp, "sessions": args.sessions, "concurrency": args.concurrency, "db_mib": size_mib,
              "created_s": created_s, "cpus": os.cpu_count(), "pages": rows, "target_200ms": verdict}
    out = pathlib.Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    for name in (f"view-{stamp}.json", "view-latest.json"):
        (out / name).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
