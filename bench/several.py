"""Several environments in one `parley serve`, against one `parley serve` per environment.

Three environments: multi-step (built in), math (a custom environment over arithmetic rows,
scored by a composite math reward, its policy a stub answering from the rows) and tau2 airline
with the LLM user (a stub playing the user). The same rows, in the same numbers, are served two
ways at the same concurrency in all (c = 256):

  - one process hosting the three (`[[environment]]` tables), each environment bounded to its
    share of the concurrency; one client sends the rows mixed, each naming its environment in
    its `environment` field;
  - the same process, a client per environment at its share, the three at once (where one
    client's slots go when slow rows wait among fast ones, told apart from the process);
  - one process per environment, each at its share, with a client of its own; the three
    clients run at once.

Per way: rollouts/s (all the rows over the wall time) and the CPU per rollout of the whole stack
(the services and the stubs; the clients are the trainer's side and are left out), and that CPU
per wall second: the share of the machine the stack got. The stubs answer at once, so Parley's
own CPU sets the pace. Run by `bench/bench.py --only several`, or
alone:

    python3 bench/several.py --parley target/release/parley --load target/release/parley-bench-load [--quick]
"""

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONCURRENCY = 256
ENVIRONMENTS = ["multi-step", "math", "airline"]


def plan(quick):
    """Rows per environment: as many tau2 conversations as the others' rows would be too slow
    beside them (a tau2 score replays the conversation against its databases)."""
    if quick:
        return {"concurrency": 24, "rows": {"multi-step": 120, "math": 120, "airline": 12}}
    return {"concurrency": CONCURRENCY, "rows": {"multi-step": 12_000, "math": 12_000, "airline": 1_200}}


def rows(parley, work, counts):
    """Each environment's rows, and all of them mixed in turn, each naming its environment (the
    multi-step rows none: multi-step is the one process's default environment)."""
    from bench import write_tasks

    own = {}
    multi = [json.loads(line) for line in write_tasks(parley, work / "several-multi.jsonl", 200).read_text().splitlines()]
    own["multi-step"] = multi
    own["math"] = [
        {"id": i, "responses_create_params": {"input": [{"role": "user", "content":
         f"What is {i} times 3? Put the answer in \\boxed{{}}."}]}, "expected_answer": str(3 * i)}
        for i in range(200)
    ]
    own["airline"] = [
        {"id": str(i), "responses_create_params": {"input": [], "temperature": 1.0, "top_p": 1.0}} for i in range(50)
    ]
    (work / "several-math.jsonl").write_text("".join(json.dumps(r) + "\n" for r in own["math"]))
    files = {}
    for name, body in own.items():
        files[name] = work / f"several-{name}-bodies.jsonl"
        files[name].write_text("".join(json.dumps(r) + "\n" for r in body))
        # The same rows naming their environment, for the process hosting the three.
        named = [dict(r, environment=name) if name != "multi-step" else r for r in body]
        files["apart-" + name] = work / f"several-{name}-named-bodies.jsonl"
        files["apart-" + name].write_text("".join(json.dumps(r) + "\n" for r in named))
    # The mixed file in the proportions of the counts, one environment after another.
    mixed, taken = [], {name: 0 for name in own}
    total = sum(counts.values())
    for _ in range(total):
        # The environment furthest behind its share goes next.
        name = min(own, key=lambda n: taken[n] / counts[n])
        row = dict(own[name][taken[name] % len(own[name])])
        taken[name] += 1
        if name != "multi-step":
            row["environment"] = name
        mixed.append(row)
    files["mixed"] = work / "several-mixed-bodies.jsonl"
    files["mixed"].write_text("".join(json.dumps(r) + "\n" for r in mixed))
    return files


def serve(parley, work, name, args):
    """`parley serve` on a free port: the process and its `/run` URL."""
    log = open(work / f"several-{name}.log", "w")
    proc = subprocess.Popen([parley, "serve", "--listen", "127.0.0.1:0", "--db", work / f"several-{name}.db",
                             "--call-timeout", "600", *map(str, args)], stdout=subprocess.PIPE, stderr=log, text=True)
    url = proc.stdout.readline().strip()
    if not url.startswith("http://"):
        raise SystemExit(f"bench: parley serve ({name}) did not start; see {log.name}")
    return proc, url + "/run"


def loads(load_bin, runs, watch):
    """Runs the clients `runs` ((url, bodies, count, concurrency) each) at once: the wall seconds
    from the first start to the last end, the rollouts answered 200, and the CPU seconds of the
    `watch` processes (with their descendants) over that time."""
    from bench import tree_cpu

    before = {p: tree_cpu(p) for p in watch}
    outs = [None] * len(runs)

    def one(i, url, bodies, count, concurrency):
        done = subprocess.run([load_bin, "run", url, bodies, str(count), str(concurrency)],
                              capture_output=True, text=True, check=True)
        outs[i] = json.loads(done.stdout)

    started = time.monotonic()
    threads = [threading.Thread(target=one, args=(i, *run)) for i, run in enumerate(runs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    cpu = sum(tree_cpu(p) - before[p] for p in watch)
    statuses = {}
    for out in outs:
        if out is None:
            raise SystemExit("bench: several: a client failed")
        for status, n in out["statuses"].items():
            statuses[status] = statuses.get(status, 0) + n
    return wall, statuses, cpu


def measure(parley, load_bin, work, quick):
    from bench import Stub

    p = plan(quick)
    counts, c = p["rows"], p["concurrency"]
    share = c // len(ENVIRONMENTS)
    files = rows(parley, work, counts)
    policy = Stub(parley, work, "several-policy")
    math = Stub(parley, work, "several-math-policy", "--answers", work / "several-math.jsonl",
                "--answer-format", "So it is \\boxed{{answer}}.", "--wrong-answers", 0.3)
    user = Stub(parley, work, "several-user", "--user-turns", 2)
    stubs = [policy, math, user]
    # Each environment's own flags, as a process of its own takes them and as a table says them.
    own = {
        "multi-step": ["--env", "multi-step", "--base-url", policy.url],
        "math": ["--env", "custom", "--tasks", work / "several-math.jsonl", "--base-url", math.url,
                 "--reward", "math:weight=0.8", "--reward", "format:pattern=\\\\boxed,weight=0.2"],
        "airline": ["--env", "tau2:airline", "--base-url", policy.url, "--user", "llm", "--user-base-url", user.url],
    }
    (work / "several.toml").write_text(
        f'[[environment]]\nname = "math"\nenv = "custom"\ntasks = "{work / "several-math.jsonl"}"\n'
        f'base_url = "{math.url}"\n\n'
        '[[environment.reward]]\nscorer = "math"\nweight = 0.8\n\n'
        "[[environment.reward]]\nscorer = \"format\"\nweight = 0.2\noptions = { pattern = '\\\\boxed' }\n\n"
        f'[[environment]]\nname = "airline"\nenv = "tau2:airline"\nuser = "llm"\nuser_base_url = "{user.url}"\n'
    )
    total = sum(counts.values())
    out = {"concurrency": c, "rows": counts, "ways": []}
    try:
        # One process, three environments: multi-step the default, math and airline its tables.
        # Each environment gets a third of the concurrency and a queue as deep as the whole's.
        hosting = ["--env", "multi-step", "--base-url", policy.url, "--settings", work / "several.toml", "-c", c,
                   "--queue", c * len(ENVIRONMENTS)]
        one, url = serve(parley, work, "one", hosting)
        try:
            wall, statuses, cpu = loads(load_bin, [(url, files["mixed"], total, c)], [one.pid] + [s.proc.pid for s in stubs])
        finally:
            one.terminate()
            one.wait()
        out["ways"].append(row("one process, one mixed client", total, wall, statuses, cpu))
        one, url = serve(parley, work, "one-apart", hosting)
        try:
            runs = [(url, files["apart-" + n], counts[n], share) for n in ENVIRONMENTS]
            wall, statuses, cpu = loads(load_bin, runs, [one.pid] + [s.proc.pid for s in stubs])
        finally:
            one.terminate()
            one.wait()
        out["ways"].append(row("one process, a client per environment", total, wall, statuses, cpu))
        # One process per environment, each at its share, all at once.
        procs = {}
        try:
            for name in ENVIRONMENTS:
                procs[name] = serve(parley, work, name, [*own[name], "-c", share, "--queue", c])
            runs = [(procs[n][1], files[n], counts[n], share) for n in ENVIRONMENTS]
            wall, statuses, cpu = loads(load_bin, runs, [p.pid for p, _ in procs.values()] + [s.proc.pid for s in stubs])
        finally:
            for proc, _ in procs.values():
                proc.terminate()
                proc.wait()
        out["ways"].append(row("a process per environment", total, wall, statuses, cpu))
    finally:
        for stub in stubs:
            stub.stop()
    return out


def row(way, total, wall, statuses, cpu):
    answered = statuses.get("200", 0)
    if answered != total:
        raise SystemExit(f"bench: several, {way}: {total} rows sent, statuses {statuses}")
    return {"way": way, "rollouts": answered, "wall_s": wall, "rollouts_per_s": answered / wall,
            "stack_cpu_ms": cpu * 1e3 / answered, "stack_cpu_s_per_s": cpu / wall}


def report(s):
    counts = ", ".join(f"{n} {k}" for k, n in s["rows"].items())
    print(f"\nSeveral environments at c = {s['concurrency']} in all ({counts})")
    print(f"{'way':<40} {'rollouts':>9} {'rollouts/s':>11} {'CPU ms/rollout':>15} {'CPU s/s':>8}")
    for r in s["ways"]:
        print(f"{r['way']:<40} {r['rollouts']:>9} {r['rollouts_per_s']:>11.1f} {r['stack_cpu_ms']:>15.3f} "
              f"{r['stack_cpu_s_per_s']:>8.2f}")


def check(s):
    """What `--quick` (CI's smoke run) requires: every way served every row."""
    if len(s["ways"]) != 3:
        raise SystemExit("bench: several: a way is missing")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parley", default=str(ROOT / "target/release/parley"))
    parser.add_argument("--load", default=str(ROOT / "target/release/parley-bench-load"))
    parser.add_argument("--quick", action="store_true", help="a smoke run: a few rows at c = 24")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="parley-several-"))
    s = measure(args.parley, args.load, work, args.quick)
    report(s)
    check(s)
    (work / "several.json").write_text(json.dumps(s, indent=2))
    print(f"results: {work / 'several.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
