"""Rollouts spent where they teach, measured: a simulated learner trained for a fixed budget of
sessions under `--sampler uniform` and `--sampler learnable`, side by side.

The learner is `parley stub --learner RATE`: each task is answered right with a chance that starts
at the task's `difficulty` (a third of the tasks too easy, a third out of reach, a third in
between) and rises with each practice by RATE·4c(1−c), as a policy-gradient trainer learns most
from a task it solves half the time and nothing from one it always or never solves. Practice on
a task the learner already solves, or cannot yet, is wasted; a curriculum spends the budget on
the tasks still being learned. For each sampler, one run of
`--budget` sessions over the same task file (`--env custom --reward exact`, a store of its own),
then the stub's `/stub/stats`: the share of sessions spent on tasks in the learnable band (chance
in [0.1, 0.9] when asked) and the learner's final mean chance over every task. Run by
`bench/bench.py --only curriculum`, or alone:

    python3 bench/curriculum.py --parley target/release/parley [--quick]
"""

import argparse
import json
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from users import stub

SAMPLERS = ["uniform", "learnable"]


def difficulty(i):
    """A task's first chance of being solved, as a dataset's usually spread: a third too easy
    (0.97 and up), a third out of reach (0.03 and below), a third in between."""
    u = ((i * 2654435761) % 1000) / 1000
    if i % 3 == 0:
        return 0.97 + 0.03 * u
    if i % 3 == 1:
        return 0.03 * u
    return 0.05 + 0.9 * u


def tasks(path, count):
    with open(path, "w") as out:
        for i in range(count):
            row = {
                "id": f"q{i}",
                "responses_create_params": {"input": [{"role": "user", "content": f"What is {i} plus {i}?"}]},
                "expected_answer": str(2 * i),
                "difficulty": difficulty(i),
            }
            out.write(json.dumps(row) + "\n")


def measure(parley, work, quick, rate=None):
    count, budget = (30, 300) if quick else (150, 1500)
    rate = rate if rate is not None else 0.05
    rows = work / "curriculum.jsonl"
    tasks(rows, count)
    found = {"tasks": count, "budget": budget, "rate": rate}
    for sampler in SAMPLERS:
        proc, url = stub(parley, work, f"curriculum-{sampler}", "--answers", rows, "--learner", rate)
        try:
            run = [
                parley, "run", "--env", "custom", "--tasks", rows, "--reward", "exact",
                "--base-url", url, "--budget", budget, "--sampler", sampler, "--concurrency", 16,
                "--db", work / f"curriculum-{sampler}.db", "--out", work / f"curriculum-{sampler}.jsonl",
            ]
            done = subprocess.run([str(a) for a in run], capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"bench curriculum: parley run --sampler {sampler} failed:\n{done.stderr}")
            stats = json.loads(urllib.request.urlopen(url.removesuffix("/v1") + "/stub/stats").read())["learner"]
        finally:
            proc.terminate()
            proc.wait()
        found[sampler] = {
            "sessions": stats["answered"],
            "in_band": stats["in_band"] / max(stats["answered"], 1),
            "final_mean_chance": stats["mean_chance"],
        }
    return found


def report(found):
    print(
        f"\ncurriculum: a simulated learner ({found['tasks']} tasks, chance +{found['rate']} per practice), "
        f"{found['budget']} sessions"
    )
    print(f"{'sampler':<10} {'sessions':>8} {'in the band':>12} {'final mean solve rate':>22}")
    for sampler in SAMPLERS:
        r = found[sampler]
        print(f"{sampler:<10} {r['sessions']:>8} {r['in_band']:>11.1%} {r['final_mean_chance']:>22.3f}")


def check(found):
    """The learnable sampler spends more of the budget in the band than uniform does."""
    for sampler in SAMPLERS:
        if found[sampler]["sessions"] != found["budget"]:
            raise SystemExit(f"bench curriculum: {sampler} answered {found[sampler]['sessions']} sessions")
    if found["learnable"]["in_band"] <= found["uniform"]["in_band"]:
        raise SystemExit("bench curriculum: the learnable sampler spent no more of the budget in the band")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parley", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rate", type=float)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        found = measure(args.parley, Path(work), args.quick, args.rate)
    report(found)
    check(found)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
