"""The simulated-user review, measured: how well its rules find a simulator's own faults.

`parley stub --user-fault MODE:RATE` makes a simulated user fail on purpose; its words for each
fault are fixed, so which sessions truly hold a fault is read from the transcript, apart from the
review's rules. Over tau2's mock, airline and retail domains (every task, through `parley serve`'s
`/run`, the user an LLM user played by the stub), with every mode at `--rate` and several seeds,
this prints each rule's precision and recall; then, with a clean stub user, the share of
sessions the review flags (false positives). Run by `bench/bench.py --only users`, or alone:

    python3 bench/users.py --parley target/release/parley [--quick]
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What the stub's faulty user says, by the rule its words break (parley-stub's user_faults.rs).
SAID = {
    "I would like some help with my booking, please.": "repeats",
    "Hello! How can I help you today?": "speaks_as_agent",
    "As an AI playing a customer, I was told to ask about my booking.": "leaks_instructions",
    "Never mind. ###STOP###": "ends_early",
    "Thank you, that is all. ###STOP### One more thing: can you check my seat?": "talks_after_stop",
}
RULES = sorted(set(SAID.values()))
# The stub's user as a clean customer: three turns, and no calls of its own tools (the stub calls
# whatever tools a request offers before it speaks, which as a user means stopping before the
# agent ever answered it: a fault of its own).
CLEAN_USER = ["--user-turns", 3, "--tool-calls", 0]


def tau2_data():
    data = Path(os.environ.get("PARLEY_TAU2_DATA", ROOT.parent / "shared/data/tau2"))
    if not (data / "airline/tasks.json").is_file():
        raise SystemExit(f"bench users: no tau2 data at {data} (set PARLEY_TAU2_DATA)")
    return data


class Process:
    """A `parley` subcommand that prints its URL on its first line of stdout."""

    def __init__(self, parley, work, name, *args):
        self.log = open(work / f"{name}.log", "w")
        self.proc = subprocess.Popen(
            [parley, *map(str, args)], stdout=subprocess.PIPE, stderr=self.log, text=True, cwd=work
        )
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http"):
            self.stop()
            raise SystemExit(f"bench users: {name} did not start; see {self.log.name}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def stub(parley, work, name, *args):
    """`parley stub` on a free port (it prints no URL: the port is chosen here)."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(work / f"{name}.log", "w")
    proc = subprocess.Popen([parley, "stub", "--port", str(port), *map(str, args)], stdout=log, stderr=log)
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/stub/stats", timeout=1).read()
            return proc, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"bench users: the stub did not start; see {log.name}")


def post(url, row):
    request = urllib.request.Request(
        f"{url}/run", data=json.dumps(row).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.loads(answer.read())


def sessions(parley, work, name, policy, user, domain, data):
    """Every task of `domain` once through `/run`: each answer's true and found faults."""
    tasks = json.loads((data / domain / "tasks.json").read_text())
    serve = Process(
        parley, work, name, "serve", "--listen", "127.0.0.1:0", "--env", f"tau2:{domain}", "--data-dir", data,
        "--base-url", policy, "--user", "llm", "--user-base-url", user, "--db", work / f"{name}.db",
        "--concurrency", "16",
    )
    try:
        rows = [{"id": t["id"], "responses_create_params": {"input": []}} for t in tasks]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda row: post(serve.url, row), rows))
    finally:
        serve.stop()
    out = []
    for answer in answers:
        said = [
            item.get("content")
            for item in answer["response"]["output"]
            if item.get("role") == "user" and isinstance(item.get("content"), str)
        ]
        # A fault is true once it shows: a repeat needs its words twice.
        truth = {SAID[s] for s in said if s in SAID and (SAID[s] != "repeats" or said.count(s) > 1)}
        found = {f["rule"] for f in answer.get("user_faults", [])}
        out.append((truth, found, answer.get("instance_config", {}).get("mask_sample") is True))
    return out


def measure(parley, work, quick=False, rate=0.1):
    data = tau2_data()
    domains = ["mock"] if quick else ["mock", "airline", "retail"]
    seeds = [0] if quick else [0, 1, 2, 3, 4]
    policy_proc, policy = stub(parley, work, "policy")
    faulty, clean = [], []
    try:
        for seed in seeds:
            faults = [a for mode in SAID.values() for a in ("--user-fault", f"{mode}:{rate}")]
            user_proc, user = stub(parley, work, f"user-{seed}", "--seed", seed, *CLEAN_USER, *faults)
            try:
                for domain in domains:
                    faulty += sessions(parley, work, f"serve-{domain}-{seed}", policy, user, domain, data)
            finally:
                user_proc.terminate()
                user_proc.wait()
        user_proc, user = stub(parley, work, "user-clean", *CLEAN_USER)
        try:
            for domain in domains:
                clean += sessions(parley, work, f"serve-{domain}-clean", policy, user, domain, data)
        finally:
            user_proc.terminate()
            user_proc.wait()
    finally:
        policy_proc.terminate()
        policy_proc.wait()
    rules = {}
    for rule in RULES:
        tp = sum(rule in t and rule in f for t, f, _ in faulty)
        fp = sum(rule not in t and rule in f for t, f, _ in faulty)
        fn = sum(rule in t and rule not in f for t, f, _ in faulty)
        rules[rule] = {
            "faulty_sessions": tp + fn,
            "precision": tp / (tp + fp) if tp + fp else None,
            "recall": tp / (tp + fn) if tp + fn else None,
        }
    masked_right = sum(m == bool(t) for t, _, m in faulty)
    return {
        "domains": domains,
        "seeds": seeds,
        "rate_per_mode": rate,
        "sessions": len(faulty),
        "rules": rules,
        "masked_as_truth": masked_right / len(faulty),
        "clean_sessions": len(clean),
        "clean_flagged": sum(bool(f) for _, f, _ in clean) / len(clean),
    }


def report(u):
    print(f"\nSimulated-user review: {u['sessions']} sessions of tau2 {', '.join(u['domains'])} "
          f"(seeds {u['seeds']}), the stub user failing on purpose, each mode at {u['rate_per_mode']:.0%}")
    print(f"{'rule':<20} {'faulty':>7} {'precision':>10} {'recall':>8}")
    for rule, r in u["rules"].items():
        fmt = lambda v: "-" if v is None else f"{v:.3f}"
        print(f"{rule:<20} {r['faulty_sessions']:>7} {fmt(r['precision']):>10} {fmt(r['recall']):>8}")
    print(f"masked exactly the faulty sessions: {u['masked_as_truth']:.3f}")
    print(f"clean stub user: {u['clean_sessions']} sessions, flagged {u['clean_flagged']:.3%}")


def check(u):
    """What `--quick` (CI's smoke run) requires: every rule found, none on a clean user."""
    problems = [r for r, v in u["rules"].items() if v["faulty_sessions"] and (v["precision"] or 0) < 0.95]
    problems += [r for r, v in u["rules"].items() if v["faulty_sessions"] and (v["recall"] or 0) < 0.95]
    if problems or u["clean_flagged"] > 0.01:
        raise SystemExit(f"bench users: below target: {sorted(set(problems))}, clean flagged {u['clean_flagged']}")


def smollm2(parley, work, tasks=10):
    """A real small model as the user: SmolLM2-135M through llama.cpp's `llama-server` (as
    `.ci/setup-llama` builds it and `.ci/llama-serve` starts it) plays tau2 mock's users, the
    oracle plays the agent, once with the stop guard (`--stop-grace 1`, the default) and once
    without (`--stop-grace 0`). For each: the share of sessions the review flags, by rule, and the
    share that ended with the user stopping before the task was done (reward below 1)."""
    cached = subprocess.run([str(ROOT / ".ci/setup-llama"), "--cached"], capture_output=True, text=True)
    if cached.returncode != 0:
        raise SystemExit("bench users --smollm2: llama-server is not built; run .ci/setup-llama")
    port = "18199"
    started = subprocess.run([str(ROOT / ".ci/llama-serve"), "start", port], capture_output=True, text=True)
    if started.returncode != 0:
        raise SystemExit(f"bench users --smollm2: llama-server did not start: {started.stderr}")
    url = started.stdout.strip()
    found = {"tasks": tasks, "model": "SmolLM2-135M-Instruct (Q4_1, llama.cpp)"}
    try:
        for grace in (1, 0):
            db = work / f"smollm2-{grace}.db"
            run = [
                parley, "run", "--env", "tau2:mock", "--agent", "oracle", "--num-tasks", tasks,
                "--user", "llm", "--user-base-url", url, "--user-model", "smollm2",
                "--user-max-tokens", 48, "--max-turns", 6, "--stop-grace", grace, "--call-timeout", 120,
                "--concurrency", 2, "--db", db, "--out", work / f"smollm2-{grace}.jsonl",
            ]
            done = subprocess.run([str(a) for a in run], capture_output=True, text=True, cwd=work)
            if done.returncode != 0:
                raise SystemExit(f"bench users --smollm2: the run failed:\n{done.stderr}")
            by_rule = {}
            for rule in RULES:
                listed = subprocess.run(
                    [parley, "sessions", "1", "--db", str(db), "--user-fault", rule],
                    capture_output=True, text=True, check=True,
                ).stdout
                by_rule[rule] = max(len(listed.strip().splitlines()) - 1, 0) / tasks
            rows = [json.loads(line) for line in open(work / f"smollm2-{grace}.jsonl") if line.strip()]
            stops = subprocess.run(
                [parley, "sessions", "1", "--db", str(db), "--termination", "user_stop"],
                capture_output=True, text=True, check=True,
            ).stdout.strip().splitlines()[1:]
            # Columns: session, task, trial, status, termination, reward, ms.
            stopped_early = sum(1 for line in stops if float(line.split()[5]) < 1)
            flagged = subprocess.run(
                [parley, "metrics", "1", "--db", str(db), "--json"], capture_output=True, text=True, check=True
            ).stdout
            found[f"stop_grace_{grace}"] = {
                "sessions": len(rows),
                "flagged": json.loads(flagged)["user_faults"] / tasks,
                "by_rule": by_rule,
                "user_stopped_unfinished": stopped_early / max(len(rows), 1),
                "mean_reward": sum((r.get("reward") or 0) for r in rows) / max(len(rows), 1),
            }
    finally:
        subprocess.run([str(ROOT / ".ci/llama-serve"), "stop", port], capture_output=True)
    return found


def report_smollm2(found):
    print(f"\nsimulated user: {found['model']} on tau2 mock ({found['tasks']} tasks, the oracle as agent)")
    print(f"{'stop guard':<14} {'flagged':>8} " + " ".join(f"{r:>18}" for r in RULES) + f" {'stopped unfinished':>19} {'reward':>7}")
    for grace in (1, 0):
        r = found[f"stop_grace_{grace}"]
        rules = " ".join(f"{r['by_rule'][rule]:>18.0%}" for rule in RULES)
        label = f"--stop-grace {grace}"
        print(f"{label:<14} {r['flagged']:>8.0%} {rules} {r['user_stopped_unfinished']:>19.0%} {r['mean_reward']:>7.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parley", default=str(ROOT / "target/release/parley"))
    parser.add_argument("--quick", action="store_true", help="tau2 mock, one seed: a smoke run")
    parser.add_argument("--rate", type=float, help="each mode's share of the conversations [0.1; --quick 0.3]")
    parser.add_argument("--smollm2", action="store_true", help="only the real small model as the user (llama.cpp)")
    args = parser.parse_args()
    if args.smollm2:
        with tempfile.TemporaryDirectory(prefix="parley-bench-users-") as work:
            found = smollm2(str(Path(args.parley).resolve()), Path(work))
        report_smollm2(found)
        print(json.dumps(found))
        return found
    args.rate = args.rate if args.rate is not None else (0.3 if args.quick else 0.1)
    with tempfile.TemporaryDirectory(prefix="parley-bench-users-") as work:
        u = measure(str(Path(args.parley).resolve()), Path(work), args.quick, args.rate)
    report(u)
    check(u)
    return u


if __name__ == "__main__":
    main()
