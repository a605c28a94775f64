#!/usr/bin/env python3
"""Parley against NeMo Gym on one machine, in one run: `bench/run` (docs/performance.md).

One `parley stub` serves every system in the comparison, on the same task rows:
  1. NeMo Gym's own pipeline: `gym env start` (its model server pointed at the stub, the
     example_multi_step resources server, simple_agent), then `gym eval run` per concurrency;
  2. Parley driving NeMo Gym's example_multi_step resources server (`--env nemo-gym`);
  3. Parley with its Rust environment (`--env multi-step`), every turn persisted, and again with
     raw bodies left out and with per-turn persistence off.
Then the scale runs, each against a stub of its own with a fixed latency, serving on one thread
(it stands in for a model served elsewhere): 10,000 concurrent multi-turn sessions (`--user llm`,
the stub plays the user), and 4,096 concurrent sessions at 500 ms, 16 waves of them. `--only scale`
runs 100,000 multi-turn sessions at once, apart from the whole run: their calls share 8,192
connections to the stub.

CPU is read from /proc/<pid>/stat (utime + stime) of every process involved, before and after,
and from wait4's rusage for the measured command; peak memory is the process's VmHWM. Standard
library only, so it runs under any Python 3.9+.
"""

import argparse
import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")
GYM_VERSION = "0.7.0"


# ---------------------------------------------------------------- processes


def stat_fields(pid):
    """Fields of /proc/<pid>/stat after the command name (which may hold spaces)."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    return text[text.rindex(")") + 2 :].split()


def cpu_seconds(pid):
    """utime + stime of one process (not its children), or None when it is gone. `pid` may also
    name one thread of a process, as `PID/task/TID`."""
    try:
        fields = stat_fields(pid)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    # After the name: state(0) ppid(1) ... utime(11) stime(12).
    return (int(fields[11]) + int(fields[12])) / TICK


def status_kib(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return None


def descendants(root):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(stat_fields(entry)[1])
            except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def tree_cpu(root):
    return sum(c for c in (cpu_seconds(p) for p in [root] + descendants(root)) if c is not None)


def tree_rss_kib(root):
    return sum(r for r in (status_kib(p, "VmRSS") for p in [root] + descendants(root)) if r is not None)


class Sampler(threading.Thread):
    """Follows a command's process tree while it runs: the last CPU time seen of each
    descendant (so the command's own CPU can be told from its children's), of each of the
    command's own threads, and the command's peak resident memory (VmHWM)."""

    def __init__(self, pid, period=0.1):
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.child_cpu, self.thread_cpu, self.hwm_kib = {}, {}, 0
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            self.sample()
            self.stopped.wait(self.period)

    def sample(self):
        hwm = status_kib(self.pid, "VmHWM")
        if hwm:
            self.hwm_kib = max(self.hwm_kib, hwm)
        for p in descendants(self.pid):
            cpu = cpu_seconds(p)
            if cpu is not None:
                self.child_cpu[p] = cpu
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            tids = []
        for tid in tids:
            thread = f"{self.pid}/task/{tid}"
            try:
                with open(f"/proc/{thread}/comm") as f:
                    name = f.read().strip()
            except OSError:
                continue
            cpu = cpu_seconds(thread)
            if cpu is not None:
                self.thread_cpu[tid] = (name, cpu)

    def threads(self):
        """CPU seconds by thread name (threads of one name summed), as last seen: each thread's
        figure misses at most the last period of its life."""
        by_name = {}
        for name, cpu in self.thread_cpu.values():
            by_name[name] = by_name.get(name, 0.0) + cpu
        return by_name

    def stop(self):
        self.stopped.set()
        self.join()


def measured(cmd, *, cwd, env=None, watch=(), log=None):
    """Runs `cmd` to its end. Returns wall seconds, the command's own CPU seconds, its
    descendants' CPU seconds, the CPU seconds of the `watch` processes (stub, servers) over the
    same time, the command's peak RSS in KiB, and its stdout."""
    before = {p: tree_cpu(p) for p in watch}
    started = time.monotonic()
    out = open(log, "w+") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=out, text=True)
    sampler = Sampler(proc.pid)
    sampler.start()
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    sampler.stop()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = ""
        if log:
            out.seek(0)
            tail = out.read()[-3000:]
        raise SystemExit(f"bench: {' '.join(map(str, cmd))} failed ({proc.returncode}):\n{stdout[-2000:]}\n{tail}")
    children = sum(sampler.child_cpu.values())
    total = usage.ru_utime + usage.ru_stime
    return {
        "wall_s": wall,
        "own_cpu_s": max(total - children, 0.0),
        "children_cpu_s": children,
        "watched_cpu_s": sum(tree_cpu(p) - before[p] for p in watch),
        "watched_each_cpu_s": [tree_cpu(p) - before[p] for p in watch],
        # VmHWM is the command's own peak; rusage's would count its children (a server it starts).
        "peak_rss_kib": sampler.hwm_kib or usage.ru_maxrss,
        "threads_cpu_s": sampler.threads(),
        "stdout": stdout,
    }


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


class Stub:
    """`parley stub` on a free loopback port."""

    def __init__(self, parley, work, name, *args):
        self.port = free_port()
        self.log = open(work / f"{name}.log", "w")
        self.proc = subprocess.Popen(
            [parley, "stub", "--port", str(self.port), *map(str, args)], stdout=self.log, stderr=self.log
        )
        self.url = f"http://127.0.0.1:{self.port}/v1"
        for _ in range(100):
            try:
                self.requests()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit(f"bench: the stub did not start; see {self.log.name}")

    def requests(self):
        return get_json(f"http://127.0.0.1:{self.port}/stub/stats")["requests"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] * (1 - (pos - low)) + sorted_values[high] * (pos - low)


# ---------------------------------------------------------------- the systems


class NemoGym:
    """NeMo Gym's servers (`gym env start`) in front of the stub; `gym eval run` per level."""

    def __init__(self, work, stub):
        self.venv = ROOT / ".venv-nemo-gym"
        self.dir = work / "nemo-gym"
        self.dir.mkdir()
        # One shared venv for every server (shared/notes/nemo-gym.md §5: no `uv` here).
        for d in [
            "responses_api_models/openai_model",
            "resources_servers/example_multi_step",
            "responses_api_agents/simple_agent",
            "environment_servers/legacy_agent",
        ]:
            (self.dir / "venvs" / d).mkdir(parents=True)
            (self.dir / "venvs" / d / ".venv").symlink_to(self.venv)
        (self.dir / "env.yaml").write_text(
            f"policy_base_url: {stub.url}\npolicy_api_key: dummy\npolicy_model_name: stub\n"
        )
        self.env = dict(os.environ, PATH=f"{self.venv / 'bin'}:{os.environ['PATH']}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", 11000)) == 0:
                raise SystemExit("bench: port 11000 (NeMo Gym's head server) is taken; stop whatever holds it")
        self.log = open(self.dir / "env_start.log", "w")
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [
                self.venv / "bin/gym", "env", "start",
                "--config", "resources_servers/example_multi_step/configs/example_multi_step.yaml",
                "--config", "responses_api_models/openai_model/configs/openai_model.yaml",
                f"+uv_venv_dir={self.dir / 'venvs'}", "+skip_venv_if_present=true",
            ],
            cwd=self.dir, env=self.env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        while "servers ready" not in (self.dir / "env_start.log").read_text():
            if self.proc.poll() is not None or time.monotonic() - started > 300:
                self.stop()
                raise SystemExit(f"bench: gym env start failed; see {self.dir / 'env_start.log'}")
            time.sleep(0.5)
        self.start_s = time.monotonic() - started

    def wait_all_ready(self):
        """`servers ready` above also matches the first `0 / N servers ready. Waiting` line, which
        `gym eval run` waits out itself; a client calling a server directly waits for them all."""
        started = time.monotonic()
        while "servers ready!" not in (self.dir / "env_start.log").read_text():
            if self.proc.poll() is not None or time.monotonic() - started > 300:
                raise SystemExit(f"bench: NeMo Gym's servers did not all get ready; see {self.dir / 'env_start.log'}")
            time.sleep(0.5)

    def eval(self, tasks, repeats, concurrency, stub):
        tag = f"c{concurrency}"
        latencies = self.dir / f"{tag}.latencies.json"
        output = self.dir / f"{tag}.jsonl"
        cmd = [
            self.venv / "bin/python", ROOT / "bench/gym_eval.py", "eval", "run", "--no-serve",
            "--agent", "example_multi_step_simple_agent", "--input", tasks, "--output", output,
            "--num-repeats", str(repeats), "--concurrency", str(concurrency),
        ]
        env = dict(self.env, PARLEY_BENCH_LATENCIES=str(latencies))
        m = measured(cmd, cwd=self.dir, env=env, watch=[self.proc.pid, stub.proc.pid], log=self.dir / f"{tag}.log")
        rows = [json.loads(line) for line in output.read_text().splitlines() if line.strip()]
        records = json.loads(latencies.read_text())
        ends = [end for end, _ in records]
        starts = [end - seconds for end, seconds in records]
        durations = sorted(seconds * 1e3 for _, seconds in records)
        n = len(rows)
        return {
            "system": "NeMo Gym: gym eval run",
            "concurrency": concurrency,
            "rollouts": n,
            "scored": sum("reward" in r for r in rows),
            "rollouts_per_s": n / (max(ends) - min(starts)),
            "rollouts_per_s_wall": n / m["wall_s"],
            "orchestrator_cpu_ms": (m["own_cpu_s"] + m["children_cpu_s"]) * 1e3 / n,
            "total_cpu_ms": (m["own_cpu_s"] + m["children_cpu_s"] + m["watched_cpu_s"]) * 1e3 / n,
            "peak_rss_mib": m["peak_rss_kib"] / 1024,
            "servers_rss_mib": tree_rss_kib(self.proc.pid) / 1024,
            "session_p50_ms": percentile(durations, 0.5),
            "session_p99_ms": percentile(durations, 0.99),
        }

    def stop(self):
        # `gym env start` stops its servers (and Ray) on SIGTERM to its process group.
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


RUN_LINE = re.compile(r"(\d+) sessions in ([\d.]+) s")


def parley_run(parley, work, name, args, *, watch, env=None):
    """One `parley run` on a fresh database; its figures from its own summary and metrics."""
    run_dir = work / name
    run_dir.mkdir()
    cmd = [parley, "run", *map(str, args), "--db", run_dir / "parley.db", "--out", run_dir / "rollouts.jsonl"]
    m = measured(cmd, cwd=run_dir, env=dict(os.environ, **(env or {})), watch=watch, log=run_dir / "run.log")
    found = RUN_LINE.search(m["stdout"])
    if not found:
        raise SystemExit(f"bench: no run line in the output of {name}:\n{m['stdout']}")
    sessions, seconds = int(found.group(1)), float(found.group(2))
    metrics = json.loads(
        subprocess.run(
            [parley, "metrics", "1", "--db", run_dir / "parley.db", "--json"], check=True, capture_output=True, text=True
        ).stdout
    )
    failures = run_dir / "rollouts_failures.jsonl"
    return {
        "rollouts": sessions,
        "scored": metrics["reward"]["n"],
        "failures": sum(1 for _ in open(failures)) if failures.exists() else 0,
        "rollouts_per_s": sessions / seconds,
        "rollouts_per_s_wall": sessions / m["wall_s"],
        "orchestrator_cpu_ms": m["own_cpu_s"] * 1e3 / sessions,
        "total_cpu_ms": (m["own_cpu_s"] + m["children_cpu_s"] + m["watched_cpu_s"]) * 1e3 / sessions,
        # The stub's CPU over the same run (the watched processes), and Parley's against it.
        "stub_cpu_ms": m["watched_cpu_s"] * 1e3 / sessions,
        "x_stub": (m["own_cpu_s"] + m["children_cpu_s"]) / m["watched_cpu_s"] if m["watched_cpu_s"] else None,
        "peak_rss_mib": m["peak_rss_kib"] / 1024,
        # Parley's CPU by thread: the sessions' (`parley`), the committing thread's
        # (`parley-store-co`) and sqlx's connections' (`sqlx-sqlite-wor`: claims, checkpoints,
        # the report's reads).
        "threads_cpu_ms": {name: cpu * 1e3 / sessions for name, cpu in sorted(m["threads_cpu_s"].items())},
        "session_p50_ms": metrics["latency_ms"]["session_p50"],
        "session_p99_ms": metrics["latency_ms"]["session_p99"],
        "model_calls": metrics["tokens"]["model_calls"] + metrics["user_tokens"]["model_calls"],
        "elapsed_s": seconds,
        "db_mib": sum(p.stat().st_size for p in run_dir.glob("parley.db*")) / 2**20,
    }


# ---------------------------------------------------------------- the run


def plan(quick):
    if quick:
        return {
            "tasks": 20,
            "gym": [(4, 1)],  # (concurrency, repeats of the task rows)
            "parley_gym": [(4, 1)],
            "parley": [(16, 10)],
            "persistence": (16, 10),
            "scale": {"sessions": 300, "latency_ms": 50, "user_turns": 2},
            "at_once": {"sessions": 1000, "latency_ms": 100, "user_turns": 2, "endpoint_concurrency": 128},
            "fixed": {"concurrency": 256, "latency_ms": 100, "waves": 2},
            "persistence_bound": {"concurrency": 32, "latency_ms": 50, "waves": 2},
            "stream": {"tasks": 2000, "concurrency": 64},
            "service": {
                "gym": [(1, 5), (16, 32)],
                "parley": [(1, 10), (16, 64), (256, 512)],
                "added": {"concurrency": 64, "latency_ms": 50, "spread_ms": 50, "calls": 256, "rollouts": 128},
            },
            "openenv": {"levels": [(1, 3), (16, 2)], "in_process_trials": 1, "think_ms": 50,
                        "paced_levels": [(1, 2), (16, 2)]},
            "workers": {"tasks": 20, "trials": 5, "concurrency": 16, "counts": [1, 2],
                        "takeover": {"sessions": 60, "concurrency": 8, "latency_ms": 50, "lease_s": 2}},
            "ranks": {"ranks": 8, "sessions": 80, "concurrency": 16},
        }
    return {
        "tasks": 200,
        "gym": [(1, 3), (16, 5), (64, 5), (256, 5)],
        "parley_gym": [(1, 3), (16, 10), (64, 10), (256, 10)],
        "parley": [(1, 10), (16, 100), (64, 100), (256, 100), (1024, 100)],
        "persistence": (256, 100),
        "scale": {"sessions": 10_000, "latency_ms": 2000, "user_turns": 2},
        # `--only scale`, apart from the whole run: 100,000 multi-turn sessions in flight at once,
        # more than one process can hold sockets for (its open-files limit), so their model calls
        # share `endpoint_concurrency` connections and wait their turn for one, each session
        # holding its state meanwhile. Every session starts before the first one ends.
        "at_once": {"sessions": 100_000, "latency_ms": 2000, "user_turns": 2, "endpoint_concurrency": 8192},
        # Throughput is what the run keeps up once under way: 16 waves, so the start (4,096
        # sessions opening their connections at once, see `ramp_s`) is a small part of it.
        "fixed": {"concurrency": 4096, "latency_ms": 500, "waves": 16},
        "persistence_bound": {"concurrency": 256, "latency_ms": 100, "waves": 10},
        # A training set's size: tasks are read lazily, so memory stays flat however many there are.
        "stream": {"tasks": 1_000_000, "concurrency": 256},
        # `/run` as a trainer calls it, (concurrency, rollouts) per level.
        "service": {
            "gym": [(1, 100), (16, 800), (256, 2000)],
            "parley": [(1, 1000), (16, 10_000), (256, 20_000)],
            # A policy that takes its time, as one writing a turn does: 1 s a call on average, each
            # call 0.5 to 1.5 s (a fixed latency keeps every session in step with the others, so
            # that all of them wake at the same instant, which no real model does).
            "added": {"concurrency": 256, "latency_ms": 1000, "spread_ms": 1000, "calls": 5120, "rollouts": 3000},
        },
        # OpenEnv over WebSocket on tau2 airline: (sessions at once, episodes each).
        # Flat out (each session steps as soon as it is answered: what the stack can take), then
        # with the trainer thinking a second a step on average, as a policy generating its action.
        "openenv": {"levels": [(1, 50), (64, 4), (1024, 1)], "in_process_trials": 8, "think_ms": 1000,
                    "paced_levels": [(1, 5), (64, 2), (1024, 2)]},
        # Workers on PostgreSQL: a run of tasks x trials, each process at `concurrency`.
        "workers": {"tasks": 200, "trials": 25, "concurrency": 256, "counts": [1, 2, 4],
                    "takeover": {"sessions": 2000, "concurrency": 64, "latency_ms": 50, "lease_s": 5}},
        # A policy on 8 data-parallel ranks (8 stubs) behind `parley serve`: the agent's calls per rank.
        "ranks": {"ranks": 8, "sessions": 1000, "concurrency": 64},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run (seconds): checks the benchmarks work")
    parser.add_argument("--parley", default=str(ROOT / "target/release/parley"), help="the parley binary")
    parser.add_argument(
        "--load", default=str(ROOT / "target/release/parley-bench-load"), help="the /run load generator (bench/load)"
    )
    parser.add_argument("--results", default=str(ROOT / "bench/results"), help="where the JSON results go")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--only",
        choices=["stream", "scale", "serve", "openenv", "workers", "ranks", "users", "curriculum", "several", "tau2",
                 "collect"],
        help="run only this part (its results are not latest.json)"
    )
    args = parser.parse_args()
    if args.only not in ("stream", "scale", "workers", "ranks", "users", "curriculum", "several", "tau2") and not (ROOT / f".venv-nemo-gym/.parley-ready-{GYM_VERSION}").is_file():
        raise SystemExit("bench: NeMo Gym is not installed; run .ci/setup-peers (bench/run does)")
    p = plan(args.quick)
    # Every run starts in a folder of its own: a path given from here must hold from there.
    parley = str(Path(args.parley).resolve())
    args.load = str(Path(args.load).resolve())
    work = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    print(f"bench: work directory {work}", file=sys.stderr)
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": {"cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg()},
        "nemo_gym_version": GYM_VERSION,
        "plan": p,
        "rows": [],
    }
    rows = results["rows"]
    if args.only == "stream":
        results["stream"] = stream(parley, work, p)
        finish(results, args, work, latest=False)
        return
    if args.only == "scale":
        results["at_once"] = at_once(parley, work, p)
        finish(results, args, work, latest=False)
        return
    if args.only == "openenv":
        results["openenv"] = openenv(parley, args.load, work, p)
        finish(results, args, work, latest=False)
        return
    if args.only == "workers":
        results["workers"] = workers(parley, work, p)
        finish(results, args, work, latest=False)
        return
    if args.only == "curriculum":
        # A simulated learner under the uniform and the learnable sampler (bench/curriculum.py).
        import curriculum

        c = curriculum.measure(parley, work, args.quick)
        curriculum.report(c)
        curriculum.check(c)
        results["curriculum"] = c
        finish(results, args, work, latest=False)
        return
    if args.only == "users":
        # The simulated-user review's precision and recall (bench/users.py, which runs alone too).
        import users

        u = users.measure(parley, work, args.quick, 0.3 if args.quick else 0.1)
        users.report(u)
        users.check(u)
        results["users"] = u
        finish(results, args, work, latest=False)
        return
    if args.only == "several":
        # One `parley serve` hosting three environments against one per environment (bench/several.py).
        import several

        s = several.measure(parley, args.load, work, args.quick)
        several.report(s)
        several.check(s)
        results["several"] = s
        finish(results, args, work, latest=False)
        return
    if args.only == "tau2":
        # tau2 airline with a simulated user, Parley against tau2's own `tau2 run` (bench/tau2.py).
        import tau2

        t = tau2.measure(parley, work, args.quick)
        tau2.report(t)
        tau2.check(t)
        results["tau2"] = t
        finish(results, args, work, latest=False)
        return
    if args.only == "ranks":
        results["ranks"] = ranks(parley, args.load, work, p)
        finish(results, args, work, latest=False)
        return
    tasks = write_tasks(parley, work / "tasks.jsonl", p["tasks"])
    stub = Stub(parley, work, "stub")
    gym = None
    try:
        # 1. NeMo Gym's own pipeline.
        gym = NemoGym(work, stub)
        results["nemo_gym_start_s"] = gym.start_s
        if args.only == "serve":
            results["service"] = service(parley, args.load, work, p, stub, gym, tasks)
            finish(results, args, work, latest=False)
            return
        if args.only == "collect":
            results["collect"] = collect(parley, args.load, work, p, stub, gym, tasks)
            finish(results, args, work, latest=False)
            return
        for concurrency, repeats in p["gym"]:
            row = gym.eval(tasks, repeats, concurrency, stub)
            rows.append(row)
            show(row)
        # 1b. A trainer's `/run`: NeMo Gym's simple_agent, then `parley serve`.
        results["service"] = service(parley, args.load, work, p, stub, gym, tasks)
        gym.stop()
        gym = None

        # 2. Parley driving NeMo Gym's resources server (Parley starts it, as NeMo Gym would).
        site = next((ROOT / ".venv-nemo-gym/lib").glob("python3*/site-packages"))
        config = site / "resources_servers/example_multi_step/configs/example_multi_step.yaml"
        for concurrency, trials in p["parley_gym"]:
            row = parley_run(
                parley, work, f"parley-gym-c{concurrency}",
                ["--env", "nemo-gym", "--config", config, "--gym-venv", ROOT / ".venv-nemo-gym",
                 "--tasks", tasks, "--trials", trials, "--base-url", stub.url, "-c", concurrency],
                watch=[stub.proc.pid],
            )
            row.update(system="Parley → NeMo Gym resources server", concurrency=concurrency)
            rows.append(row)
            show(row)

        # 3. Parley with its Rust environment, every turn and raw body persisted.
        for concurrency, trials in p["parley"]:
            row = parley_run(
                parley, work, f"parley-c{concurrency}",
                ["--env", "multi-step", "--tasks", tasks, "--trials", trials, "--base-url", stub.url,
                 "-c", concurrency],
                watch=[stub.proc.pid],
            )
            row.update(system="Parley, Rust environment", concurrency=concurrency)
            rows.append(row)
            show(row)

        # Persistence: every turn with raw bodies / without raw bodies / no per-turn writes.
        concurrency, trials = p["persistence"]
        persistence = []
        for mode, extra, env in [
            ("every turn, raw bodies", [], {}),
            ("every turn, no raw bodies", ["--no-raw-calls"], {}),
            ("off (session ends only)", [], {"PARLEY_BENCH_NO_TURNS": "1"}),
            ("every turn, raw bodies (again)", [], {}),
            ("off (session ends only, again)", [], {"PARLEY_BENCH_NO_TURNS": "1"}),
        ]:
            row = parley_run(
                parley, work, f"persistence-{len(persistence)}",
                ["--env", "multi-step", "--tasks", tasks, "--trials", trials, "--base-url", stub.url,
                 "-c", concurrency, *extra],
                watch=[stub.proc.pid], env=env,
            )
            row.update(system=f"Parley, persistence {mode}", concurrency=concurrency, persistence=mode)
            persistence.append(row)
            show(row)
        results["persistence"] = persistence
    finally:
        if gym:
            gym.stop()
        stub.stop()

    # 3b. Trainers that keep the loop: OpenEnv over WebSocket.
    results["openenv"] = openenv(parley, args.load, work, p)
    # 4. Scale: many concurrent multi-turn sessions, and a fixed latency at 4,096.
    results["scale"] = scale(parley, work, p)
    # 5. A million generated tasks, read lazily.
    results["stream"] = stream(parley, work, p)
    # 6. Many workers on PostgreSQL, beside SQLite.
    results["workers"] = workers(parley, work, p)
    finish(results, args, work, latest=True)


def finish(results, args, work, *, latest):
    """Prints the table and keeps the results (`latest.json` only for a whole run)."""
    if latest:
        results["summary"] = summarize(results)
        report(results)
    elif "stream" in results:
        report_stream(results)
    elif "at_once" in results:
        report_at_once(results["at_once"])
    elif "openenv" in results:
        report_openenv(results["openenv"])
    elif "workers" in results:
        report_workers(results["workers"])
    elif "ranks" in results:
        report_ranks(results["ranks"])
    elif "collect" in results:
        report_collect(results["collect"])
    elif any(k in results for k in ("users", "curriculum", "several", "tau2")):
        pass  # reported as it was measured
    else:
        report_service(results["service"])
    if args.quick:
        check_quick(results)
        out = work / "results.json"
        out.write_text(json.dumps(results, indent=2))
        print(f"bench: quick results in {out} (not kept in bench/results)", file=sys.stderr)
    else:
        out_dir = Path(args.results)
        out_dir.mkdir(parents=True, exist_ok=True)
        stamp = results["date"].replace(":", "").replace("+0000", "Z")
        names = [f"{stamp}.json", "latest.json"] if latest else [f"{stamp}-{args.only}.json"]
        for name in names:
            (out_dir / name).write_text(json.dumps(results, indent=2) + "\n")
        print(f"bench: results in {', '.join(str(out_dir / n) for n in names)}", file=sys.stderr)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def service(parley, load_bin, work, p, stub, gym, tasks):
    """`/run` as a trainer calls it (bench/load, a client in Rust): NeMo Gym's
    simple_agent on example_multi_step, then `parley serve --env multi-step`, against the same
    stub and rows. Per level: rollouts/s and the CPU of the whole stack per rollout (the servers
    and the stub; the client is the trainer's side and is reported apart).

    Then the time Parley adds to each model call, where the model sets the pace: a stub that
    answers after a latency drawn around a mean (`--latency-spread-ms`), called directly by the
    same client at the same concurrency, and through `parley serve`. Added per call, at p50 and
    p99: the session's own time (its duration less its model calls as Parley's client timed
    them) per model call; beside it, a rollout's `/run` latency per model call against a direct
    call, and what `/run` adds around the session. The first wave of rollouts (one per slot, all
    sent at once) is reported apart from the rest."""
    python = ROOT / ".venv-nemo-gym/bin/python"
    gym.wait_all_ready()
    # The head server answers its merged configuration as YAML inside a JSON string.
    text = get_json("http://127.0.0.1:11000/global_config_dict_yaml")
    to_json = "import json, sys, yaml; print(json.dumps(yaml.safe_load(sys.stdin.read())))"
    converted = subprocess.run([python, "-c", to_json], input=text, capture_output=True, text=True, check=True)
    agent = json.loads(converted.stdout)["example_multi_step_simple_agent"]["responses_api_agents"]["simple_agent"]
    gym_url = f"http://{agent['host']}:{agent['port']}/run"
    levels = []

    def load(url, bodies, concurrency, count, watch, name):
        m = measured(
            [load_bin, "run", url, bodies, str(count), str(concurrency)],
            cwd=work, watch=watch, log=work / f"{name}.log",
        )
        out = json.loads(m["stdout"])
        n = out["statuses"].get("200", 0)
        if n != count:
            raise SystemExit(f"bench: {name}: {count} requests sent, statuses {out['statuses']}")
        durations = sorted(r[0] * 1e3 for r in out["rollouts"])
        # The service's own CPU (Parley, or NeMo Gym's servers) against the stub's, the stand-in
        # for the model, which costs what a model server's HTTP side would; a direct call has no
        # service between.
        server_s, stub_s = m["watched_each_cpu_s"] if len(watch) == 2 else (None, m["watched_cpu_s"])
        return out, {
            "concurrency": concurrency,
            "rollouts": n,
            "rollouts_per_s": n / out["wall_s"],
            "stack_cpu_ms": m["watched_cpu_s"] * 1e3 / n,
            "server_cpu_ms": server_s * 1e3 / n if server_s is not None else None,
            "stub_cpu_ms": stub_s * 1e3 / n,
            "x_stub": server_s / stub_s if server_s is not None and stub_s else None,
            "client_cpu_ms": m["own_cpu_s"] * 1e3 / n,
            "run_p50_ms": percentile(durations, 0.5),
            "run_p99_ms": percentile(durations, 0.99),
        }

    @contextlib.contextmanager
    def parley_serve(model, concurrency, name):
        db = work / f"{name}.db"
        log = open(work / f"{name}.log", "w")
        serve = subprocess.Popen(
            [parley, "serve", "--env", "multi-step", "--listen", "127.0.0.1:0", "--base-url", model.url,
             "--db", db, "-c", str(concurrency), "--queue", str(concurrency), "--call-timeout", "600"],
            stdout=subprocess.PIPE, stderr=log, text=True,
        )
        try:
            url = serve.stdout.readline().strip()
            if not url.startswith("http://"):
                raise SystemExit(f"bench: parley serve did not start; see {log.name}")
            yield serve, url + "/run", db
        finally:
            serve.terminate()
            serve.wait()

    for concurrency, count in p["service"]["gym"]:
        _, row = load(gym_url, tasks, concurrency, count, [gym.proc.pid, stub.proc.pid], f"service-gym-c{concurrency}")
        row["system"] = "NeMo Gym simple_agent /run"
        levels.append(row)
        show_service(row)
    for concurrency, count in p["service"]["parley"]:
        with parley_serve(stub, concurrency, f"serve-c{concurrency}") as (serve, url, _):
            _, row = load(url, tasks, concurrency, count, [serve.pid, stub.proc.pid], f"service-parley-c{concurrency}")
        row["system"] = "Parley serve /run"
        levels.append(row)
        show_service(row)
    gym_rows = {r["concurrency"]: r for r in levels if r["system"].startswith("NeMo Gym")}
    for row in levels:
        base = gym_rows.get(row["concurrency"])
        row["x_nemo_gym"] = row["rollouts_per_s"] / base["rollouts_per_s"] if base else None

    # The time added per model call, against a model that takes its time.
    a = p["service"]["added"]
    slow = Stub(parley, work, "stub-slow", "--latency-ms", a["latency_ms"], "--latency-spread-ms", a["spread_ms"],
                "--threads", 1)
    try:
        first = json.loads(Path(tasks).read_text().splitlines()[0])
        params = first["responses_create_params"]
        chat = {"model": "stub", "messages": [{"role": m["role"], "content": m["content"]} for m in params["input"]]}
        (work / "chat.jsonl").write_text(json.dumps(chat) + "\n")
        _, direct = load(slow.url + "/chat/completions", work / "chat.jsonl", a["concurrency"], a["calls"],
                         [slow.proc.pid], "service-direct")
        with parley_serve(slow, a["concurrency"], "serve-added") as (serve, url, db):
            out, through = load(url, tasks, a["concurrency"], a["rollouts"], [serve.pid, slow.proc.pid],
                                "service-added")
        with contextlib.closing(sqlite3.connect(db)) as conn:
            calls = {
                session: (n, total_ms)
                for session, n, total_ms in conn.execute(
                    "SELECT session_id, COUNT(*), SUM(latency_ms) FROM model_calls GROUP BY session_id"
                )
            }
            durations = dict(conn.execute("SELECT id, duration_ms FROM sessions"))
            timed = sorted(r[0] for r in conn.execute("SELECT latency_ms FROM model_calls"))
    finally:
        slow.stop()
    # The first wave (one rollout per slot, every one of them sent at the same instant: the
    # trainer's batch starting) is reported apart; the rest is the service under way, each
    # rollout sent as another ends.
    ids = sorted(session for _, session, _ in out["rollouts"] if session in calls)
    first = set(ids[: a["concurrency"]])
    start = [(took * 1e3, session) for took, session, _ in out["rollouts"] if session in first]
    served = [(took * 1e3, session) for took, session, _ in out["rollouts"] if session in calls and session not in first]
    # A rollout's latency per model call through Parley, against a direct call, percentile by
    # percentile: both see the same model, the same concurrency and the same client.
    per_call = sorted(took / calls[session][0] for took, session in served)
    # Where the rest goes: the session's own time beyond its model calls (as Parley's client
    # timed them), per call; and per rollout, what `/run` adds around the session (recording it,
    # committing its end, HTTP).
    engine = sorted((durations[s] - calls[s][1]) / calls[s][0] for _, s in served)
    around = sorted(took - durations[s] for took, s in served)
    start_engine = sorted((durations[s] - calls[s][1]) / calls[s][0] for _, s in start)
    added_row = {
        "concurrency": a["concurrency"],
        "latency_ms": a["latency_ms"],
        "spread_ms": a["spread_ms"],
        "direct_call_p50_ms": direct["run_p50_ms"],
        "direct_call_p99_ms": direct["run_p99_ms"],
        "run_p50_ms": through["run_p50_ms"],
        "rollouts": through["rollouts"],
        "per_call_p50_ms": percentile(per_call, 0.5),
        "per_call_p99_ms": percentile(per_call, 0.99),
        "parley_timed_call_p50_ms": percentile(timed, 0.5),
        "parley_timed_call_p99_ms": percentile(timed, 0.99),
        "engine_per_call_p50_ms": percentile(engine, 0.5),
        "engine_per_call_p99_ms": percentile(engine, 0.99),
        "around_session_p50_ms": percentile(around, 0.5),
        "around_session_p99_ms": percentile(around, 0.99),
        "first_wave_rollouts": len(start),
        "first_wave_engine_per_call_p50_ms": percentile(start_engine, 0.5),
        "first_wave_engine_per_call_p99_ms": percentile(start_engine, 0.99),
    }
    print(f"added per model call at c = {a['concurrency']} ({a['latency_ms']} ms model, spread {a['spread_ms']} ms), "
          f"the session's own time per call: p50 {added_row['engine_per_call_p50_ms']:.3f} ms, "
          f"p99 {added_row['engine_per_call_p99_ms']:.3f} ms", file=sys.stderr)
    top = max((r for r in levels if r["system"] == "Parley serve /run"), key=lambda r: r["concurrency"])
    best_gym = max(r["rollouts_per_s"] for r in gym_rows.values())
    return {
        "levels": levels,
        "added": added_row,
        "x_nemo_gym_best": top["rollouts_per_s"] / best_gym,
        "targets": {
            "20x NeMo Gym's /run throughput": top["rollouts_per_s"] >= 20 * best_gym,
            f"< 1 ms p99 added per model call at c = {a['concurrency']} (the session's own time per call)":
            added_row["engine_per_call_p99_ms"] < 1.0,
        },
    }


class Postgres:
    """The PostgreSQL server the workers share: the one `PARLEY_BENCH_POSTGRES` (or
    `PARLEY_TEST_POSTGRES`) names, else the one `.ci/setup-postgres` starts on loopback. Each
    measurement gets a database of its own. The server's CPU is read from its postmaster: its own
    and its live processes' (utime + stime), and its reaped backends' (cutime + cstime), so a
    connection that came and went is counted."""

    def __init__(self):
        url = os.environ.get("PARLEY_BENCH_POSTGRES") or os.environ.get("PARLEY_TEST_POSTGRES")
        if not url:
            url = subprocess.run([ROOT / ".ci/setup-postgres"], check=True, capture_output=True, text=True).stdout
        self.url = url.strip()
        self.psql_bin = shutil.which("psql") or next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin/psql"))), None)
        if not self.psql_bin:
            raise SystemExit("bench: no psql (Debian's postgresql-client); .ci/setup-postgres installs it")
        data = Path(self.psql("SHOW data_directory"))
        try:
            self.pid = int((data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            self.pid = None  # a server elsewhere: its CPU is not ours to read

    def psql(self, sql, url=None):
        out = subprocess.run([self.psql_bin, url or self.url, "-XAtqc", sql], check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def database(self, name):
        """A fresh database `name` on the server, and its URL."""
        self.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        self.psql(f"CREATE DATABASE {name}")
        base, _, _ = self.url.rpartition("/")
        return f"{base}/{name}"

    def settle(self, name):
        """Waits until no connection to database `name` is left, so that the backends that served
        it have exited and been reaped: their CPU is then in the postmaster's."""
        for _ in range(200):
            if self.psql(f"SELECT COUNT(*) FROM pg_stat_activity WHERE datname = '{name}'") == "0":
                time.sleep(0.1)
                return
            time.sleep(0.05)

    def drop(self, name):
        self.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def cpu(self):
        if self.pid is None:
            return None
        fields = stat_fields(self.pid)
        reaped = (int(fields[13]) + int(fields[14])) / TICK
        return reaped + tree_cpu(self.pid)


def workers(parley, work, p):
    """Parley on many machines, here on one: a detached run on PostgreSQL driven by 1, 2 and 4
    `parley worker` processes, beside the same run on SQLite by one `parley run`, against the
    same stub and task rows. Per row: rollouts/s (over the sessions phase, the first session's
    start to the last one's end, as `parley run` reports its own), Parley's CPU per rollout (every parley process, the detached run's recording
    included), PostgreSQL's own CPU per rollout, and their sum against SQLite's. Then takeover:
    two workers, one of them (on "another machine", so only its leases speak for it) killed
    with SIGKILL mid-run; how long each of its sessions waits before the other claims it,
    against the lease."""
    w = p["workers"]
    pg = Postgres()
    stub = Stub(parley, work, "stub-workers")
    tasks = write_tasks(parley, work / "tasks-workers.jsonl", w["tasks"])
    run_args = ["--env", "multi-step", "--tasks", tasks, "--trials", w["trials"], "--base-url", stub.url,
                "-c", w["concurrency"]]
    rows = []

    def process_cpu(usage):
        return usage.ru_utime + usage.ru_stime

    def pg_row(count):
        name = f"parley_bench_w{count}"
        url = pg.database(name)
        pg_before, stub_before = pg.cpu(), tree_cpu(stub.proc.pid)
        m = measured([parley, "run", "--detach", "--db", url, *map(str, run_args)], cwd=work,
                     log=work / f"workers-{count}-detach.log")
        started = time.monotonic()
        procs = [
            subprocess.Popen([parley, "worker", "--db", url, "--run", "1", "-c", str(w["concurrency"])],
                             cwd=work, stdout=subprocess.DEVNULL, stderr=open(work / f"workers-{count}-{i}.log", "w"))
            for i in range(count)
        ]
        cpu = m["own_cpu_s"]
        for proc in procs:
            _, status, usage = os.wait4(proc.pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"bench: a worker failed; see {work}/workers-{count}-*.log")
            cpu += process_cpu(usage)
        wall = time.monotonic() - started
        pg.settle(name)
        pg_cpu = pg.cpu() - pg_before if pg_before is not None else None
        finished = int(pg.psql("SELECT COUNT(*) FROM sessions WHERE status = 'finished' AND reward IS NOT NULL", url))
        n = w["tasks"] * w["trials"]
        if finished != n:
            raise SystemExit(f"bench: {count} workers finished {finished} of {n} sessions")
        phase_sql = ("SELECT EXTRACT(EPOCH FROM max(finished_at::timestamptz)"
                     " - min(finished_at::timestamptz - duration_ms * interval '1 millisecond')) FROM sessions")
        # The sessions phase, as `parley run` reports its own: the first session's start to the
        # last one's end (a worker then waits out the others before it exits: `wall_s`).
        phase = float(pg.psql(phase_sql, url))
        pg.drop(name)
        return {
            "system": f"Parley, PostgreSQL, {count} worker{'s' if count > 1 else ''}",
            "store": "postgres",
            "workers": count,
            "concurrency": w["concurrency"],
            "rollouts": n,
            "rollouts_per_s": n / phase,
            "wall_s": wall,
            "parley_cpu_ms": cpu * 1e3 / n,
            "postgres_cpu_ms": pg_cpu * 1e3 / n if pg_cpu is not None else None,
            "stub_cpu_ms": (tree_cpu(stub.proc.pid) - stub_before) * 1e3 / n,
        }

    try:
        # SQLite first, then each PostgreSQL row, on the same stub.
        stub_before = tree_cpu(stub.proc.pid)
        row = parley_run(parley, work, "workers-sqlite", run_args, watch=[])
        rows.append({
            "system": "Parley, SQLite, one process",
            "store": "sqlite",
            "workers": 1,
            "concurrency": w["concurrency"],
            "rollouts": row["rollouts"],
            "rollouts_per_s": row["rollouts_per_s"],
            "wall_s": row["rollouts"] / row["rollouts_per_s_wall"],
            "parley_cpu_ms": row["orchestrator_cpu_ms"],
            "postgres_cpu_ms": 0.0,
            "stub_cpu_ms": (tree_cpu(stub.proc.pid) - stub_before) * 1e3 / row["rollouts"],
        })
        show_workers(rows[-1])
        for count in w["counts"]:
            rows.append(pg_row(count))
            show_workers(rows[-1])
        takeover = takeover_after_kill(parley, work, pg, w)
    finally:
        stub.stop()
    sqlite = rows[0]
    for row in rows:
        store_cpu = row["parley_cpu_ms"] + (row["postgres_cpu_ms"] or 0.0)
        row["store_cpu_ms"] = store_cpu
        row["x_sqlite_cpu"] = store_cpu / sqlite["parley_cpu_ms"]
    one = next(r for r in rows if r["store"] == "postgres" and r["workers"] == 1)
    return {
        "rows": rows,
        "takeover": takeover,
        "targets": {
            "PostgreSQL at most 1.5x SQLite's CPU per persisted rollout (Parley + the server, 1 worker)":
            one["x_sqlite_cpu"] <= 1.5,
            "takeover within twice the lease": takeover["max_wait_s"] <= 2 * takeover["lease_s"],
        },
    }


def takeover_after_kill(parley, work, pg, w):
    """Two workers on a run against a stub that takes its time; one, named for another machine,
    is killed with SIGKILL mid-run. Its sessions still pending are watched (polling the store)
    until another owner holds each; the wait of each from the kill, against the lease."""
    t = w["takeover"]
    url = pg.database("parley_bench_takeover")
    stub = Stub(parley, work, "stub-takeover", "--latency-ms", t["latency_ms"])
    tasks = write_tasks(parley, work / "tasks-takeover.jsonl", t["sessions"])
    env = dict(os.environ, PARLEY_LEASE_SECS=str(t["lease_s"]))
    procs = []
    try:
        subprocess.run([parley, "run", "--detach", "--db", url, "--env", "multi-step", "--tasks", tasks,
                        "--base-url", stub.url, "-c", str(t["concurrency"])], check=True, capture_output=True)
        for name in ["bench-machine-a", "bench-machine-b"]:
            procs.append(subprocess.Popen(
                [parley, "worker", "--db", url, "--run", "1"], cwd=work, env=dict(env, HOSTNAME=name),
                stdout=subprocess.DEVNULL, stderr=open(work / f"takeover-{name}.log", "w")))
        while int(pg.psql("SELECT COUNT(*) FROM sessions WHERE status = 'finished'", url)) < t["sessions"] // 10:
            time.sleep(0.05)
        held_sql = "SELECT id FROM sessions WHERE status = 'pending' AND owner LIKE 'bench-machine-a:%'"
        procs[0].kill()
        killed = time.monotonic()
        procs[0].wait()
        held = set(pg.psql(held_sql, url).split())
        waits = {}
        while held - waits.keys():
            now = time.monotonic() - killed
            if now > 4 * t["lease_s"] + 30:
                raise SystemExit(f"bench: {len(held - waits.keys())} sessions of the killed worker never taken over")
            still = set(pg.psql(held_sql, url).split())
            for session in held - still - waits.keys():
                waits[session] = now
            time.sleep(0.02)
        _, status, _ = os.wait4(procs[1].pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"bench: the surviving worker failed; see {work}/takeover-bench-machine-b.log")
        finished = int(pg.psql("SELECT COUNT(*) FROM sessions WHERE status = 'finished'", url))
        pg.settle("parley_bench_takeover")
        pg.drop("parley_bench_takeover")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        stub.stop()
    if finished != t["sessions"]:
        raise SystemExit(f"bench: takeover: {finished} of {t['sessions']} sessions finished")
    out = sorted(waits.values())
    result = {
        "lease_s": t["lease_s"],
        "sessions_held_at_kill": len(held),
        "min_wait_s": out[0] if out else None,
        "max_wait_s": out[-1] if out else 0.0,
        "p50_wait_s": percentile(out, 0.5),
    }
    print(f"takeover: {len(held)} sessions held by the killed worker, taken over {result['min_wait_s']:.2f} to "
          f"{result['max_wait_s']:.2f} s after the kill (lease {t['lease_s']} s)", file=sys.stderr, flush=True)
    return result


WORKER_COLUMNS = [
    ("system", "{}", 34),
    ("concurrency", "{}", 5),
    ("rollouts", "{}", 6),
    ("rollouts_per_s", "{:.0f}", 10),
    ("parley_cpu_ms", "{:.3f}", 9),
    ("postgres_cpu_ms", "{:.3f}", 9),
    ("store_cpu_ms", "{:.3f}", 9),
    ("x_sqlite_cpu", "{:.2f}x", 8),
    ("stub_cpu_ms", "{:.3f}", 8),
]


def show_workers(row):
    print(line(row, WORKER_COLUMNS), file=sys.stderr, flush=True)


def report_workers(wk):
    print("Many workers on one PostgreSQL (on this one machine), beside SQLite: CPU ms per rollout of Parley's")
    print("processes, of the PostgreSQL server, their sum, that sum against SQLite's, and the stub's")
    heads = ["system", "c", "n", "rollouts/s", "parley ms", "pg ms", "sum ms", "vs SQLite", "stub ms"]
    print(heading(heads, WORKER_COLUMNS))
    for row in wk["rows"]:
        print(line(row, WORKER_COLUMNS))
    t = wk["takeover"]
    print(f"takeover: a worker killed with {t['sessions_held_at_kill']} sessions held; another took them "
          f"{t['min_wait_s']:.2f} to {t['max_wait_s']:.2f} s after the kill (p50 {t['p50_wait_s']:.2f} s), "
          f"lease {t['lease_s']} s")
    for target, met in wk["targets"].items():
        print(f"  [{'met' if met else 'MISSED'}] {target}")


def ranks(parley, load_bin, work, p):
    """A policy served on several data-parallel ranks, one stub each, behind `parley serve`
    (`--base-url` once per rank), as NeMo RL's `policy_base_url` list gives them: how evenly the
    agent's calls spread over the ranks, for multi-step rows and for tau2 airline conversations
    with the LLM user (every airline session opens with the same policy and greeting). Each
    rank counts the calls it took (`/stub/stats`); the target is the busiest rank at most 1.15x
    the idlest."""
    r = p["ranks"]
    tasks = write_tasks(parley, work / "ranks-tasks.jsonl", 200)
    airline = [t["id"] for t in json.loads((tau2_data() / "airline/tasks.json").read_text())]
    (work / "ranks-airline.jsonl").write_text("".join(
        json.dumps({"id": i, "responses_create_params": {"input": [], "temperature": 1.0, "top_p": 1.0}}) + "\n"
        for i in airline))
    cases = [
        ("multi-step", ["--env", "multi-step"], tasks),
        ("tau2 airline, LLM user", ["--env", "tau2:airline", "--data-dir", tau2_data(), "--user", "llm",
                                    "--user-base-url", None], work / "ranks-airline.jsonl"),
    ]
    out = []
    for name, env, bodies in cases:
        stubs = [Stub(parley, work, f"rank-{i}") for i in range(r["ranks"])]
        user = Stub(parley, work, "rank-user", "--user-turns", 2)
        log = open(work / "ranks-serve.log", "w")
        env = [user.url if arg is None else str(arg) for arg in env]
        args = [parley, "serve", *env, "--listen", "127.0.0.1:0", "--db", work / "ranks.db", "-c", str(r["concurrency"])]
        for stub in stubs:
            args += ["--base-url", stub.url]
        serve = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            url = serve.stdout.readline().strip()
            if not url.startswith("http://"):
                raise SystemExit(f"bench: parley serve did not start; see {log.name}")
            run = subprocess.run([load_bin, "run", url + "/run", bodies, str(r["sessions"]), str(r["concurrency"])],
                                 capture_output=True, text=True, check=True)
            statuses = json.loads(run.stdout)["statuses"]
            if statuses.get("200", 0) != r["sessions"]:
                raise SystemExit(f"bench: ranks, {name}: statuses {statuses}")
            calls = [stub.requests() for stub in stubs]
        finally:
            serve.terminate()
            serve.wait()
            for stub in [*stubs, user]:
                stub.stop()
        row = {"environment": name, "ranks": r["ranks"], "sessions": r["sessions"], "calls": calls,
               "busiest_over_idlest": max(calls) / max(min(calls), 1)}
        out.append(row)
        print(f"ranks: {name}: {row['busiest_over_idlest']:.3f} ({calls})", file=sys.stderr, flush=True)
    return out


def report_ranks(rows):
    print(f"{'agent calls per rank':<24}  {'ranks':>5}  {'sessions':>8}  {'busiest/idlest':>14}  calls per rank")
    for row in rows:
        print(f"{row['environment']:<24}  {row['ranks']:>5}  {row['sessions']:>8}  {row['busiest_over_idlest']:>14.3f}  "
              f"{' '.join(map(str, row['calls']))}")
    met = all(row["busiest_over_idlest"] <= 1.15 for row in rows)
    print(f"  [{'met' if met else 'MISSED'}] busiest rank at most 1.15x the idlest")


def tau2_data():
    data = Path(os.environ.get("PARLEY_TAU2_DATA", ROOT.parent / "shared/data/tau2"))
    if not (data / "airline/tasks.json").is_file():
        raise SystemExit(f"bench: no tau2 data at {data} (set PARLEY_TAU2_DATA)")
    return data


def openenv(parley, load_bin, work, p):
    """Trainers that keep the loop: `parley serve`'s OpenEnv WebSocket on tau2 airline, the
    simulated user an LLM (the stub), at 1, 64 and 1,024 sessions at once (bench/load plays the
    trainer: two `calculate` calls, then a text to the user, until the user ends it). Per level:
    steps/s, the CPU of the stack per step, and a tool step's latency as the trainer sees it,
    percentile by percentile. Beside it, in the same run, the same trainer against
    `parley-bench-load echo`, a WebSocket server that answers at once and does nothing else: the
    floor that the loopback socket, the framing and the client put under any server. The time
    Parley adds to a step is the step's latency less that floor and less the tool's own run time
    (as the store recorded it). Parley's own time per step, from the action read off the
    connection to the observation written, is read from `parley serve`'s /metrics. Beside it all,
    the same environment driven in-process by `parley run` (the oracle agent and the same user),
    steps/s."""
    o = p["openenv"]
    data = tau2_data()
    user = Stub(parley, work, "stub-user", "--threads", 1)
    levels = []
    try:
        for (sessions, episodes), think in [(level, 0) for level in o["levels"]] + [(level, o["think_ms"]) for level in o["paced_levels"]]:
            name = f"openenv-{sessions}" + (f"-think{think}" if think else "")
            db = work / f"{name}.db"
            log = open(work / f"{name}.log", "w")
            trainer = [str(sessions), str(episodes), "50", str(think)]
            serve = subprocess.Popen(
                [parley, "serve", "--env", "tau2:airline", "--data-dir", data, "--user", "llm",
                 "--user-base-url", user.url, "--listen", "127.0.0.1:0", "--db", db,
                 "-c", str(sessions), "--queue", str(sessions)],
                stdout=subprocess.PIPE, stderr=log, text=True,
            )
            try:
                url = serve.stdout.readline().strip()
                if not url.startswith("http://"):
                    raise SystemExit(f"bench: parley serve did not start; see {log.name}")
                m, out = play_trainer(load_bin, work, url.replace("http://", "ws://"), trainer, f"{name}-load",
                                      watch=[serve.pid, user.proc.pid])
                with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
                    metrics = r.read().decode()
            finally:
                serve.terminate()
                serve.wait()
            with contextlib.closing(sqlite3.connect(db)) as conn:
                tools = sorted(r[0] / 1e3 for r in conn.execute("SELECT duration_us FROM tool_calls"))
                users = sorted(r[0] for r in conn.execute(
                    "SELECT c.latency_ms FROM model_calls c JOIN messages m ON m.session_id = c.session_id "
                    "AND m.seq = c.seq WHERE m.role = 'user'"))
            # With the trainer thinking, every session's first episode warms the service and is
            # not counted: all of them reset at the same instant, which a trainer's batch does
            # once, and their steps then fall together. Later episodes start as earlier ones end,
            # spread as a running trainer's are. Flat out, every step counts.
            warm = 1 if think and episodes > 1 else 0
            floor = echo_floor(load_bin, work, name, trainer, warm)
            tool_steps = counted_steps(out, "tool", warm)
            text_steps = counted_steps(out, "text", warm)
            all_tool_steps = counted_steps(out, "tool", 0)
            own = step_histogram(metrics, "tool_calls")
            n = len(out["steps"])
            row = {
                "system": "Parley serve, OpenEnv /ws" + (f", trainer thinks {think} ms a step" if think else ", flat out"),
                "concurrency": sessions,
                "think_ms": think,
                "rollouts": sessions * episodes,
                "steps": n,
                "steps_per_s": n / out["wall_s"],
                "stack_cpu_ms_per_step": m["watched_cpu_s"] * 1e3 / n,
                "tool_step_p50_ms": percentile(tool_steps, 0.5),
                "tool_step_p99_ms": percentile(tool_steps, 0.99),
                "floor_tool_step_p50_ms": percentile(floor, 0.5),
                "floor_tool_step_p99_ms": percentile(floor, 0.99),
                "tool_run_p50_ms": percentile(tools, 0.5),
                "tool_run_p99_ms": percentile(tools, 0.99),
                "added_tool_step_p50_ms": percentile(tool_steps, 0.5) - percentile(floor, 0.5) - percentile(tools, 0.5),
                "added_tool_step_p99_ms": percentile(tool_steps, 0.99) - percentile(floor, 0.99) - percentile(tools, 0.99),
                # Parley's own time, every episode counted (its /metrics cannot tell them apart).
                "own_tool_step_p50_ms": histogram_quantile(own, 0.5) * 1e3,
                "own_tool_step_p99_ms": histogram_quantile(own, 0.99) * 1e3,
                "warm_episodes": warm,
                "tool_step_p99_ms_warm_included": percentile(all_tool_steps, 0.99),
                "added_text_step_p50_ms": percentile(text_steps, 0.5) - percentile(users, 0.5),
                "added_text_step_p99_ms": percentile(text_steps, 0.99) - percentile(users, 0.99),
            }
            levels.append(row)
            print(f"openenv {sessions} sessions (think {think} ms): {row['steps_per_s']:.0f} steps/s, tool step "
                  f"p50 {row['tool_step_p50_ms']:.3f} p99 {row['tool_step_p99_ms']:.3f} ms (floor "
                  f"{row['floor_tool_step_p50_ms']:.3f} / {row['floor_tool_step_p99_ms']:.3f}), added "
                  f"p50 {row['added_tool_step_p50_ms']:.3f} p99 {row['added_tool_step_p99_ms']:.3f} ms, own "
                  f"p50 {row['own_tool_step_p50_ms']:.3f} p99 {row['own_tool_step_p99_ms']:.3f} ms",
                  file=sys.stderr, flush=True)
        # The same environment and user, driven in-process.
        top = max(s for s, _ in o["levels"])
        row = parley_run(
            parley, work, "openenv-in-process",
            ["--env", "tau2:airline", "--data-dir", data, "--agent", "oracle", "--user", "llm",
             "--user-base-url", user.url, "--trials", o["in_process_trials"], "-c", top],
            watch=[user.proc.pid],
        )
        db = work / "openenv-in-process" / "parley.db"
        with contextlib.closing(sqlite3.connect(db)) as conn:
            steps = conn.execute("SELECT COUNT(*) FROM messages WHERE role = 'assistant'").fetchone()[0]
        in_process = {"system": "Parley run, in-process (oracle agent)", "concurrency": top,
                      "rollouts": row["rollouts"], "steps": steps, "steps_per_s": steps / row["elapsed_s"]}
    finally:
        user.stop()
    paced = max((r for r in levels if r["think_ms"]), key=lambda r: r["concurrency"])
    return {
        "levels": levels,
        "in_process": in_process,
        # The time Parley adds to a step is its own: from the action read off the connection to
        # the observation written. The trainer's latency less the floor is reported beside it;
        # on a machine whose cores the trainer's client and the stub share with Parley, it also
        # holds the time the client and the kernel wait for a core that Parley's other sessions
        # are using.
        "targets": {
            f"< 1 ms p99 added per step (Parley's own time per tool step) at {paced['concurrency']} sessions (the "
            f"trainer thinking {paced['think_ms']} ms a step)": paced["own_tool_step_p99_ms"] < 1.0,
        },
    }


def counted_steps(out, kind, warm):
    """The latencies in ms of the load's steps of `kind` in episodes from `warm` on, sorted."""
    return sorted(t * 1e3 for t, k, _, episode in out["steps"] if k == kind and episode >= warm)


def play_trainer(load_bin, work, ws_url, trainer, log, watch=()):
    """bench/load's OpenEnv trainer against the server at `ws_url`: its measurement and its
    JSON, refused when any session failed."""
    m = measured([load_bin, "openenv", ws_url + "/ws", *trainer], cwd=work, watch=watch, log=work / f"{log}.log")
    out = json.loads(m["stdout"])
    if out["errors"]:
        raise SystemExit(f"bench: the trainer against {ws_url} ({log}): {out['errors'][:3]}")
    return m, out


def echo_floor(load_bin, work, name, trainer, warm):
    """The trainer's tool steps from episode `warm` on, in ms and sorted, against a server that
    does nothing: the transport's floor."""
    server = subprocess.Popen([load_bin, "echo", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        if not url.startswith("ws://"):
            raise SystemExit("bench: parley-bench-load echo did not start")
        _, out = play_trainer(load_bin, work, url, trainer, f"{name}-echo")
    finally:
        server.terminate()
        server.wait()
    return counted_steps(out, "tool", warm)


def step_histogram(metrics, action):
    """`parley_openenv_step_seconds{action=...}`'s buckets from /metrics: (upper bound in
    seconds, cumulative count), `+Inf` last."""
    prefix = f'parley_openenv_step_seconds_bucket{{action="{action}",le="'
    buckets = []
    for line in metrics.splitlines():
        if line.startswith(prefix):
            bound, count = line[len(prefix):].split('"} ')
            buckets.append((float(bound), int(count)))
    return buckets


def histogram_quantile(buckets, q):
    """The `q` quantile of a cumulative histogram, interpolated within its bucket as
    Prometheus' `histogram_quantile` does (its lowest bucket from 0)."""
    total = buckets[-1][1] if buckets else 0
    if not total:
        return float("nan")
    rank = q * total
    lower, below = 0.0, 0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1)
        lower, below = bound, count
    return lower


def report_openenv(o):
    print("OpenEnv over WebSocket, tau2 airline, the stub as the user: steps/s, stack CPU per step, a tool step's")
    print("latency as the trainer sees it, the same trainer's against a server that does nothing (the floor), the")
    print("time Parley adds (the step less the floor and the tool's run), Parley's own time per tool step (its")
    print("/metrics), and a text step less the user's model call; p50 / p99 ms")
    for r in o["levels"]:
        print(f"  {r['concurrency']:>5} sessions {'think ' + str(r['think_ms']) + ' ms' if r['think_ms'] else 'flat out':>14}  "
              f"{r['steps']:>6} steps  {r['steps_per_s']:>6.0f} steps/s  {r['stack_cpu_ms_per_step']:.2f} ms CPU/step  "
              f"tool step {r['tool_step_p50_ms']:.3f} / {r['tool_step_p99_ms']:.3f}  floor "
              f"{r['floor_tool_step_p50_ms']:.3f} / {r['floor_tool_step_p99_ms']:.3f}  added "
              f"{r['added_tool_step_p50_ms']:.3f} / {r['added_tool_step_p99_ms']:.3f}  own "
              f"{r['own_tool_step_p50_ms']:.3f} / {r['own_tool_step_p99_ms']:.3f}  +text step "
              f"{r['added_text_step_p50_ms']:.3f} / {r['added_text_step_p99_ms']:.3f}")
        if r.get("warm_episodes"):
            print(f"        (each session's first episode, all of them started at once, not counted; with it, the "
                  f"tool step's p99 is {r['tool_step_p99_ms_warm_included']:.3f} ms)")
    ip = o["in_process"]
    print(f"  in-process ({ip['system']}, {ip['concurrency']} at once): {ip['steps']} steps, "
          f"{ip['steps_per_s']:.0f} steps/s")
    for target, met in o["targets"].items():
        print(f"  [{'met' if met else 'MISSED'}] {target}")


SERVICE_COLUMNS = [
    ("system", "{}", 28),
    ("concurrency", "{}", 5),
    ("rollouts", "{}", 6),
    ("rollouts_per_s", "{:.0f}", 10),
    ("x_nemo_gym", "{:.1f}x", 8),
    ("stack_cpu_ms", "{:.2f}", 9),
    ("server_cpu_ms", "{:.3f}", 9),
    ("x_stub", "{:.2f}x", 8),
    ("client_cpu_ms", "{:.2f}", 9),
    ("run_p50_ms", "{:.1f}", 8),
    ("run_p99_ms", "{:.1f}", 8),
]


def show_service(row):
    print(line(row, SERVICE_COLUMNS), file=sys.stderr, flush=True)


def report_service(service, header=True):
    if header:
        heads = ["system", "c", "n", "rollouts/s", "vs Gym", "stack ms", "own ms", "x stub", "client ms", "p50 ms",
                 "p99 ms"]
        print(heading(heads, SERVICE_COLUMNS))
    for row in service["levels"]:
        print(line(row, SERVICE_COLUMNS))
    a = service["added"]
    print(f"at c = {a['concurrency']} against a {a['latency_ms']} ms model (each call {a['latency_ms'] - a.get('spread_ms', 0) // 2} to {a['latency_ms'] + a.get('spread_ms', 0) // 2} ms): a rollout's latency per model call "
          f"p50 {a['per_call_p50_ms']:.2f} ms, p99 {a['per_call_p99_ms']:.2f} ms; a direct call "
          f"p50 {a['direct_call_p50_ms']:.2f} ms, p99 {a['direct_call_p99_ms']:.2f} ms")
    print(f"  a model call as Parley's client timed it: p50 {a['parley_timed_call_p50_ms']:.2f} ms, "
          f"p99 {a['parley_timed_call_p99_ms']:.2f} ms")
    print(f"  the session's own time per model call: p50 {a['engine_per_call_p50_ms']:.3f} ms, "
          f"p99 {a['engine_per_call_p99_ms']:.3f} ms; /run around the session (recording it, committing its end, "
          f"HTTP), per rollout: p50 {a['around_session_p50_ms']:.2f} ms, p99 {a['around_session_p99_ms']:.2f} ms")
    if "first_wave_rollouts" in a:
        print(f"  (the first {a['first_wave_rollouts']} rollouts, sent at once, apart: the session's own time per "
              f"model call p50 {a['first_wave_engine_per_call_p50_ms']:.3f} ms, p99 "
              f"{a['first_wave_engine_per_call_p99_ms']:.3f} ms)")
    for target, met in service["targets"].items():
        print(f"  [{'met' if met else 'MISSED'}] {target}")


def scale(parley, work, p):
    out = {}
    s = p["scale"]
    # The stubs stand in for models served elsewhere: one thread each leaves Parley the rest of the CPU.
    stub = Stub(parley, work, "stub-scale", "--threads", 1, "--latency-ms", s["latency_ms"], "--user-turns",
                s["user_turns"])
    tasks = write_tasks(parley, work / "tasks-scale.jsonl", s["sessions"])
    try:
        before = stub.requests()
        row = parley_run(
            parley, work, "scale-multi-turn",
            ["--env", "multi-step", "--user", "llm", "--tasks", tasks, "--base-url", stub.url,
             "-c", s["sessions"], "--endpoint-concurrency", s["sessions"], "--call-timeout", 600,
             "--session-timeout", 3600],
            watch=[stub.proc.pid],
        )
        calls = (stub.requests() - before) / row["rollouts"]
        row.update(ideal(row, s["sessions"], calls, s["latency_ms"]))
        row.update(system="Parley, multi-turn (--user llm)", concurrency=s["sessions"])
        out["multi_turn"] = row
        show(row)
    finally:
        stub.stop()

    f = p["fixed"]
    stub = Stub(parley, work, "stub-fixed", "--threads", 1, "--latency-ms", f["latency_ms"])
    sessions = f["concurrency"] * f["waves"]
    tasks = write_tasks(parley, work / "tasks-fixed.jsonl", sessions)
    try:
        before = stub.requests()
        row = parley_run(
            parley, work, "scale-fixed-latency",
            ["--env", "multi-step", "--tasks", tasks, "--base-url", stub.url, "-c", f["concurrency"],
             "--call-timeout", 600, "--session-timeout", 3600],
            watch=[stub.proc.pid],
        )
        calls = (stub.requests() - before) / row["rollouts"]
        row.update(ideal(row, f["concurrency"], calls, f["latency_ms"]))
        row.update(system=f"Parley, {f['latency_ms']} ms stub latency", concurrency=f["concurrency"])
        row["ramp_s"] = ramp(work / "scale-fixed-latency" / "parley.db", f["concurrency"])
        out["fixed_latency"] = row
        show(row)
    finally:
        stub.stop()

    # Persistence on and off when the model, not the orchestrator's CPU, sets the pace.
    b = p["persistence_bound"]
    stub = Stub(parley, work, "stub-persistence", "--threads", 1, "--latency-ms", b["latency_ms"])
    sessions = b["concurrency"] * b["waves"]
    tasks = write_tasks(parley, work / "tasks-persistence.jsonl", sessions)
    rows = []
    try:
        for i, (mode, env) in enumerate([("on", {}), ("off", {"PARLEY_BENCH_NO_TURNS": "1"})] * 2):
            before = stub.requests()
            row = parley_run(
                parley, work, f"persistence-bound-{i}",
                ["--env", "multi-step", "--tasks", tasks, "--base-url", stub.url, "-c", b["concurrency"]],
                watch=[stub.proc.pid], env=env,
            )
            row.update(ideal(row, b["concurrency"], (stub.requests() - before) / row["rollouts"], b["latency_ms"]))
            row.update(system=f"Parley, {b['latency_ms']} ms, persistence {mode}", concurrency=b["concurrency"],
                       persistence=mode)
            rows.append(row)
            show(row)
    finally:
        stub.stop()
    out["persistence_model_bound"] = rows
    return out


def at_once(parley, work, p):
    """More sessions in flight at once than the process can hold sockets for: each multi-turn
    (`--user llm`, the stub plays agent and user), their model calls sharing
    `endpoint_concurrency` connections to the stub. Peak RSS of Parley and of the stub, apart,
    and whether every session was under way before the first one ended."""
    s = p["at_once"]
    stub = Stub(parley, work, "stub-at-once", "--threads", 1, "--latency-ms", s["latency_ms"], "--user-turns",
                s["user_turns"])
    tasks = write_tasks(parley, work / "tasks-at-once.jsonl", s["sessions"])
    try:
        before = stub.requests()
        row = parley_run(
            parley, work, "at-once",
            ["--env", "multi-step", "--user", "llm", "--tasks", tasks, "--base-url", stub.url,
             "-c", s["sessions"], "--endpoint-concurrency", s["endpoint_concurrency"],
             "--call-timeout", 600, "--session-timeout", 3600],
            watch=[stub.proc.pid],
        )
        calls = (stub.requests() - before) / row["rollouts"]
        # Calls wait their turn for one of `endpoint_concurrency` connections: the ideal keeps
        # that many calls in flight, every one taking the stub's latency.
        best = s["endpoint_concurrency"] / (calls * s["latency_ms"] / 1e3)
        row.update(latency_ms=s["latency_ms"], model_calls_per_session=calls, ideal_rollouts_per_s=best,
                   of_ideal=row["rollouts_per_s"] / best)
        row["stub_peak_rss_mib"] = status_kib(stub.proc.pid, "VmHWM") / 1024
    finally:
        stub.stop()
    row.update(system=f"Parley, {s['sessions']:,} sessions at once (--user llm)", concurrency=s["sessions"],
               endpoint_concurrency=s["endpoint_concurrency"])
    row.update(overlap(work / "at-once" / "parley.db"))
    show(row)
    return row


def overlap(db):
    """How many sessions had started when the first one ended (a session's start is its end less
    its duration), and how long after the first start the last one started."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        first_end, last_start, first_start, started = conn.execute(
            "WITH s AS (SELECT julianday(finished_at) * 86400000.0 AS end_ms,"
            " julianday(finished_at) * 86400000.0 - duration_ms AS start_ms FROM sessions"
            " WHERE finished_at IS NOT NULL)"
            " SELECT (SELECT min(end_ms) FROM s), max(start_ms), min(start_ms),"
            " (SELECT count(*) FROM s WHERE start_ms < (SELECT min(end_ms) FROM s)) FROM s"
        ).fetchone()
    return {
        "started_before_first_end": started,
        "all_started_s": (last_start - first_start) / 1e3,
        "first_end_s": (first_end - first_start) / 1e3,
    }


def report_at_once(row):
    print()
    print(heading(HEADERS, COLUMNS))
    print(line(row, COLUMNS))
    print(f"{row['rollouts']:,} multi-turn sessions at once ({row['model_calls_per_session']:.1f} calls each, "
          f"{row['latency_ms']} ms, {row['endpoint_concurrency']:,} connections to the stub): peak RSS "
          f"{row['peak_rss_mib']:.0f} MiB (the stub {row['stub_peak_rss_mib']:.0f} MiB); "
          f"{row['started_before_first_end']:,} sessions under way before the first ended "
          f"(all started within {row['all_started_s']:.1f} s, the first ended at {row['first_end_s']:.1f} s); "
          f"{row['rollouts_per_s']:.0f}/s of an ideal {row['ideal_rollouts_per_s']:.0f}/s "
          f"({100 * row['of_ideal']:.1f}%), {row['elapsed_s']:.0f} s; {row['failures']} failed")


def stream(parley, work, p):
    """A run over more tasks than a run would want to hold: `--num-tasks` generated rows, each
    recorded and driven from the store, against a stub on one thread. Its peak RSS is the figure."""
    s = p["stream"]
    stub = Stub(parley, work, "stub-stream", "--threads", 1)
    try:
        row = parley_run(
            parley, work, "stream",
            ["--env", "multi-step", "--num-tasks", s["tasks"], "--base-url", stub.url, "-c", s["concurrency"]],
            watch=[stub.proc.pid],
        )
        row.update(system=f"Parley, {s['tasks']:,} generated tasks", concurrency=s["concurrency"])
        show(row)
        return row
    finally:
        stub.stop()


def write_tasks(parley, path, count):
    """`count` multi-step task rows at `path`, written by `parley tasks`."""
    subprocess.run([parley, "tasks", "multi-step", "--count", str(count), "--out", path], check=True,
                   capture_output=True)
    return path


def ramp(db, concurrency):
    """Seconds from the first session's start to the last start among the first `concurrency`
    sessions: how long the run took to put its first wave under way."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        (spread,) = conn.execute(
            "SELECT (max(start) - min(start)) / 1000.0 FROM (SELECT julianday(finished_at) * 86400000.0 - duration_ms"
            " AS start FROM sessions WHERE finished_at IS NOT NULL ORDER BY id LIMIT ?)",
            (concurrency,),
        ).fetchone()
    return spread


def ideal(row, concurrency, calls_per_session, latency_ms):
    """The ideal: every session waits only on its model calls, one after another, and
    `concurrency` sessions are always in flight."""
    session_s = calls_per_session * latency_ms / 1e3
    # The ideal run takes whole waves of `concurrency` sessions.
    waves = -(-row["rollouts"] // concurrency)
    best = row["rollouts"] / (waves * session_s)
    return {
        "latency_ms": latency_ms,
        "model_calls_per_session": calls_per_session,
        "ideal_session_s": session_s,
        "ideal_rollouts_per_s": best,
        "of_ideal": row["rollouts_per_s"] / best,
    }


def summarize(results):
    rows = results["rows"]
    gym = [r for r in rows if r["system"].startswith("NeMo Gym")]
    rust = [r for r in rows if r["system"] == "Parley, Rust environment"]
    via_gym = [r for r in rows if r["system"].startswith("Parley → NeMo Gym")]
    best_gym = max(gym, key=lambda r: r["rollouts_per_s"])
    best_rust = max(rust, key=lambda r: r["rollouts_per_s"])
    for r in rows:
        r["x_nemo_gym_best"] = r["rollouts_per_s"] / best_gym["rollouts_per_s"]
    persistence = results["persistence"]
    on = [r["rollouts_per_s"] for r in persistence if r["persistence"].startswith("every turn, raw")]
    off = [r["rollouts_per_s"] for r in persistence if r["persistence"].startswith("off")]
    on_mean, off_mean = sum(on) / len(on), sum(off) / len(off)
    scale = results["scale"]
    bound = scale["persistence_model_bound"]
    bound_on = [r["rollouts_per_s"] for r in bound if r["persistence"] == "on"]
    bound_off = [r["rollouts_per_s"] for r in bound if r["persistence"] == "off"]
    bound_cost = 1 - (sum(bound_on) / len(bound_on)) / (sum(bound_off) / len(bound_off))
    return {
        "nemo_gym_best_rollouts_per_s": best_gym["rollouts_per_s"],
        "parley_best_rollouts_per_s": best_rust["rollouts_per_s"],
        "parley_via_gym_best_rollouts_per_s": max(r["rollouts_per_s"] for r in via_gym),
        "speedup_vs_nemo_gym": best_rust["rollouts_per_s"] / best_gym["rollouts_per_s"],
        "parley_orchestrator_cpu_ms_min": min(r["orchestrator_cpu_ms"] for r in rust),
        "parley_orchestrator_cpu_ms_max": max(r["orchestrator_cpu_ms"] for r in rust),
        "nemo_gym_total_cpu_ms_min": min(r["total_cpu_ms"] for r in gym),
        "persistence_on_rollouts_per_s": on,
        "persistence_off_rollouts_per_s": off,
        "persistence_cost": 1 - on_mean / off_mean,
        "persistence_model_bound_on_rollouts_per_s": bound_on,
        "persistence_model_bound_off_rollouts_per_s": bound_off,
        "persistence_cost_model_bound": bound_cost,
        "multi_turn_sessions": scale["multi_turn"]["rollouts"],
        "multi_turn_peak_rss_mib": scale["multi_turn"]["peak_rss_mib"],
        "multi_turn_of_ideal": scale["multi_turn"]["of_ideal"],
        "fixed_latency_of_ideal": scale["fixed_latency"]["of_ideal"],
        "stream_tasks": results["stream"]["rollouts"],
        "stream_peak_rss_mib": results["stream"]["peak_rss_mib"],
        "targets": {
            "25x NeMo Gym's best rollouts/s": best_rust["rollouts_per_s"] >= 25 * best_gym["rollouts_per_s"],
            "orchestrator CPU < 0.5 ms/rollout, every turn persisted": min(r["orchestrator_cpu_ms"] for r in rust)
            < 0.5,
            "10,000 concurrent sessions < 1 GiB resident": scale["multi_turn"]["peak_rss_mib"] < 1024,
            "4,096 x 500 ms within 5% of ideal": scale["fixed_latency"]["of_ideal"] >= 0.95,
            "persistence on vs off < 10% throughput (model-bound)": bound_cost < 0.10,
            "persistence on vs off < 10% throughput (CPU-bound, stub without latency)": 1 - on_mean / off_mean < 0.10,
            "1,000,000 generated tasks at c = 256 < 300 MiB resident": results["stream"]["rollouts"] >= 1_000_000
            and results["stream"]["peak_rss_mib"] < 300,
            **results["service"]["targets"],
            **results["workers"]["targets"],
        },
    }


COLUMNS = [
    ("system", "{}", 50),
    ("concurrency", "{}", 6),
    ("rollouts", "{}", 7),
    ("rollouts_per_s", "{:.0f}", 9),
    ("x_nemo_gym_best", "{:.1f}x", 7),
    ("orchestrator_cpu_ms", "{:.2f}", 9),
    ("total_cpu_ms", "{:.2f}", 9),
    ("peak_rss_mib", "{:.0f}", 8),
    ("session_p50_ms", "{:.1f}", 9),
    ("session_p99_ms", "{:.1f}", 9),
]
HEADERS = ["system", "c", "n", "rollouts/s", "vs Gym", "orch ms", "total ms", "RSS MiB", "p50 ms", "p99 ms"]


def cell(row, key, fmt, width):
    value = row.get(key)
    text = "-" if value is None else fmt.format(value)
    return text.ljust(width) if key == "system" else text.rjust(width)


def line(row, columns):
    """One row of a table: each column's cell, formatted and aligned."""
    return "  ".join(cell(row, k, f, w) for k, f, w in columns)


def heading(heads, columns):
    """A table's header: the first column's title to the left, the others to the right."""
    return "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, (_, _, w)) in enumerate(zip(heads, columns)))


def show(row):
    print(line(row, [c for c in COLUMNS if c[0] != "x_nemo_gym_best"]), file=sys.stderr, flush=True)


def collect(parley, load_bin, work, p, stub, gym, tasks):
    """Collecting rollouts, the two ways side by side on the same rows and stub: NeMo Gym's
    `gym eval run` at each of its levels, then `parley run` at c = 256 (every turn persisted).
    Parley's rate over NeMo Gym's best, and Parley's CPU per rollout over the stub's. Then the
    floor under that ratio: the run's own model calls replayed alone (`calls_floor`)."""
    rows = []
    for concurrency, repeats in p["gym"]:
        row = gym.eval(tasks, repeats, concurrency, stub)
        rows.append(row)
        show(row)
    gym.stop()
    concurrency, trials = next((c, t) for c, t in reversed(p["parley"]) if c <= 256)
    row = parley_run(
        parley, work, f"collect-parley-c{concurrency}",
        ["--env", "multi-step", "--tasks", tasks, "--trials", trials, "--base-url", stub.url, "-c", concurrency],
        watch=[stub.proc.pid],
    )
    row.update(system="Parley, Rust environment", concurrency=concurrency)
    rows.append(row)
    show(row)
    gym_best = max(r["rollouts_per_s"] for r in rows if r["system"].startswith("NeMo Gym"))
    floor = calls_floor(load_bin, work, work / f"collect-parley-c{concurrency}" / "parley.db", row["rollouts"],
                        concurrency, stub)
    return {
        "rows": rows,
        "parley_x_nemo_gym": row["rollouts_per_s"] / gym_best,
        "nemo_gym_best_rollouts_per_s": gym_best,
        "parley_x_stub_cpu": row["x_stub"],
        "calls_floor": floor,
    }


def calls_floor(load_bin, work, db, rollouts, concurrency, stub):
    """The floor under Parley's CPU per rollout against the stub's: the same model calls, each
    rollout's request bodies as the run sent them (read back from its store), posted through
    Parley's own HTTP client (`parley-bench-load calls`) at the same concurrency, against the
    same stub, with no JSON read or written, no engine and no store. Its CPU against the stub's
    is what the calls alone cost; the rest of `parley run`'s ratio is everything else."""
    bodies = work / "collect-calls.jsonl"
    con = sqlite3.connect(db)
    with contextlib.closing(con), open(bodies, "w") as out:
        # One rollout of each task: the stub answers each body as it answered the run.
        sessions = [s for (s,) in con.execute("SELECT MIN(id) FROM sessions GROUP BY task_index ORDER BY 1")]
        texts = dict(con.execute("SELECT id, text FROM texts"))
        for session in sessions:
            calls = con.execute("SELECT seq, request FROM model_calls WHERE session_id = ? ORDER BY seq", (session,))
            out.write(json.dumps(whole_requests(calls, texts), separators=(",", ":"), ensure_ascii=False) + "\n")
    url = stub.url + "/chat/completions"
    m = measured([load_bin, "calls", url, bodies, str(rollouts), str(concurrency)], cwd=work, watch=[stub.proc.pid],
                 log=work / "collect-calls.log")
    statuses = json.loads(m["stdout"])["statuses"]
    if set(statuses) != {"200"}:
        raise SystemExit(f"bench: the calls floor: statuses {statuses}")
    return {
        "rollouts": rollouts,
        "calls": statuses["200"],
        "client_cpu_ms": m["own_cpu_s"] * 1e3 / rollouts,
        "stub_cpu_ms": m["watched_cpu_s"] * 1e3 / rollouts,
        "x_stub": m["own_cpu_s"] / m["watched_cpu_s"] if m["watched_cpu_s"] else None,
        "rollouts_per_s": rollouts / m["wall_s"],
    }


def whole_requests(calls, texts):
    """A session's stored requests, `(seq, text)` by seq, as the bodies that were sent, read as
    `parley_store::reconstruct` reads them (docs/durable-sessions.md, "What the store holds"): a
    request stored as a delta (`parley_delta`) is its base's list with its own items added, the
    base's fields it names, and its own other fields; one that keeps fields apart (its tool list)
    has each put back from `texts` (the store's `texts`, by id); a base, a field or a text it
    names that is missing fails, as it does there."""
    sent, bodies = {}, []
    for seq, text in calls:
        body = json.loads(text)
        delta = body.pop("parley_delta", None)
        if delta and "texts" in delta:
            body.update({key: json.loads(texts[id]) for key, id in delta["texts"].items()})
        elif delta:
            base, items = sent[delta["base"]], delta.get("list", "messages")
            same = {k: base[k] for k in delta["same"]}
            body = {**same, **body, items: base[items] + body.get(items, [])}
        sent[seq] = body
        bodies.append(body)
    return bodies


def report_collect(c):
    parley = c["rows"][-1]
    print(f"Parley's CPU per persisted rollout: {parley['orchestrator_cpu_ms']:.3f} ms, the stub's "
          f"{parley['stub_cpu_ms']:.3f} ms: {c['parley_x_stub_cpu']:.2f}x the stand-in for the model")
    print(f"Parley {parley['rollouts_per_s']:,.0f} rollouts/s at c = {parley['concurrency']}: "
          f"{c['parley_x_nemo_gym']:.1f}x NeMo Gym's best {c['nemo_gym_best_rollouts_per_s']:.1f}/s")
    threads = parley.get("threads_cpu_ms")
    if threads:
        print("Parley's CPU by thread, ms per rollout: "
              + ", ".join(f"{name} {ms:.3f}" for name, ms in sorted(threads.items(), key=lambda t: -t[1])))
    floor = c.get("calls_floor")
    if floor:
        print(f"The same calls alone (bench/load calls, Parley's HTTP client, no JSON, engine or store): "
              f"{floor['client_cpu_ms']:.3f} ms against the stub's {floor['stub_cpu_ms']:.3f} ms, "
              f"{floor['x_stub']:.2f}x: the floor under the ratio above")


def report(results):
    print()
    print(heading(HEADERS, COLUMNS))
    for row in all_rows(results):
        print(line(row, COLUMNS))
    s = results["summary"]
    print()
    print("rollouts/s: NeMo Gym's collection window (first dispatch to last completion) and Parley's sessions")
    print("phase; CPU ms per rollout: orch = the orchestrator process (gym eval run / parley), total = with")
    print("the stub and every server; RSS = the orchestrator's peak; p50/p99 = per-rollout latency.")
    print(f"Parley (Rust environment) best {s['parley_best_rollouts_per_s']:.0f}/s = "
          f"{s['speedup_vs_nemo_gym']:.1f}x NeMo Gym's best {s['nemo_gym_best_rollouts_per_s']:.0f}/s")
    mt, fx = results["scale"]["multi_turn"], results["scale"]["fixed_latency"]
    fx_b = results["scale"]["persistence_model_bound"][0]
    print(f"{mt['rollouts']} concurrent multi-turn sessions ({mt['model_calls_per_session']:.1f} calls each, "
          f"{mt['latency_ms']} ms): peak RSS {mt['peak_rss_mib']:.0f} MiB, {mt['rollouts_per_s']:.0f}/s of an ideal "
          f"{mt['ideal_rollouts_per_s']:.0f}/s ({100 * mt['of_ideal']:.1f}%)")
    print(f"{fx['concurrency']} sessions x {fx['latency_ms']} ms ({fx['rollouts']} sessions, "
          f"{fx['model_calls_per_session']:.1f} calls each): {fx['rollouts_per_s']:.0f}/s of an ideal "
          f"{fx['ideal_rollouts_per_s']:.0f}/s ({100 * fx['of_ideal']:.1f}%); the first {fx['concurrency']} were "
          f"all under way {fx['ramp_s']:.2f} s after the first")
    print(f"persistence on vs off: {100 * s['persistence_cost']:.1f}% fewer rollouts/s with every turn persisted "
          f"when the orchestrator's CPU sets the pace (stub without latency), "
          f"{100 * s['persistence_cost_model_bound']:.1f}% when the model does "
          f"({fx_b['concurrency']} sessions, {fx_b['latency_ms']} ms)")
    report_stream(results, header=False)
    print()
    print("`/run` as a trainer calls it: stack ms = CPU per rollout of the servers and the stub; client ms =")
    print("the trainer's side (bench/load)")
    report_service(results["service"])
    print()
    report_workers(results["workers"])
    if results["quick"]:
        print("(--quick: too few rollouts for the targets to mean anything; they are not checked)")
        return
    for target, met in s["targets"].items():
        print(f"  [{'met' if met else 'MISSED'}] {target}")


def report_stream(results, *, header=True):
    st = results["stream"]
    if header:
        print()
        print(heading(HEADERS, COLUMNS))
        print(line(st, COLUMNS))
    print(f"{st['rollouts']:,} generated tasks at c = {st['concurrency']}: peak RSS {st['peak_rss_mib']:.0f} MiB, "
          f"{st['rollouts_per_s']:.0f} rollouts/s, database {st['db_mib']:.0f} MiB")


def all_rows(results):
    """Every measured row of the parts that ran."""
    rows = results["rows"] + results.get("persistence", [])
    if "scale" in results:
        scale = results["scale"]
        rows += [scale["multi_turn"], scale["fixed_latency"]] + scale["persistence_model_bound"]
    if "stream" in results:
        rows.append(results["stream"])
    if "at_once" in results:
        rows.append(results["at_once"])
    if "service" in results:
        rows += results["service"]["levels"] + [results["service"]["added"]]
    if "openenv" in results:
        rows += results["openenv"]["levels"]
    if "workers" in results:
        rows += results["workers"]["rows"]
    return rows


def check_quick(results):
    """What CI checks: every system ran every rollout, and every rollout was scored."""
    problems = []
    for row in all_rows(results):
        if row["rollouts"] == 0 or row.get("scored", row["rollouts"]) != row["rollouts"] or row.get("failures"):
            problems.append(f"{row['system']} c={row['concurrency']}: {row}")
    if problems:
        raise SystemExit("bench --quick: some rollouts did not complete:\n" + "\n".join(problems))
    print("bench --quick: every system ran and scored every rollout", file=sys.stderr)


if __name__ == "__main__":
    main()
