"""Builds the answer pairs of the math-agreement benchmark and labels each with math-verify.

Pairs: generated (integers, decimals, fractions, percentages, roots, multiples of pi, powers,
polynomials, tuples, intervals, sets, equations, degrees, text) and the math rows that NeMo Gym's
wheel ships (Apache-2.0; `ns_tools/data/compmath_test.jsonl` and the math environments' examples),
each gold answer with replies that are right in another form and replies that are wrong.

Each pair is labelled as NeMo Gym's math_with_judge asks math-verify: the gold wrapped in
\\boxed{} and read as LaTeX, the reply read as an expression or as LaTeX.

    python label.py WHEEL OUT.jsonl
"""

import json
import random
import re
import sys
import zipfile
from fractions import Fraction

from math_verify.metric import math_metric
from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

rng = random.Random(20261123)
verifier = math_metric(
    gold_extraction_target=(LatexExtractionConfig(),),
    pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()),
)


def strip(s):
    s = s.strip()
    if s.startswith("\\(") and s.endswith("\\)"):
        s = s[2:-2].strip()
    if s.startswith("$") and s.endswith("$") and len(s) > 1:
        s = s[1:-1].strip()
    return s


def label(gold, reply):
    try:
        score, _ = verifier(["\\boxed{" + strip(gold) + "}"], [reply])
        return float(score) > 0.5
    except BaseException:
        return False


def replies(answer):
    """A few ways a model writes the same final answer."""
    return rng.choice(
        [
            f"\\boxed{{{answer}}}",
            f"So the final answer is $\\boxed{{{answer}}}$.",
            f"Working it through, we get \\boxed{{{answer}}}",
        ]
    )


def generated():
    pairs = []
    for _ in range(160):
        n = rng.randint(-999, 99999)
        pairs += [(str(n), replies(str(n))), (str(n), replies(str(n + rng.choice([1, -1, 10])))),
                  (str(n), f"The answer is {n}."), (str(n), replies(f"{n}.0"))]
    for _ in range(140):
        a, b = rng.randint(1, 60), rng.randint(2, 60)
        f = Fraction(a, b)
        if f.denominator == 1:
            continue
        gold = f"\\frac{{{f.numerator}}}{{{f.denominator}}}"
        k = rng.randint(2, 5)
        pairs += [(gold, replies(f"\\dfrac{{{f.numerator * k}}}{{{f.denominator * k}}}")),
                  (gold, replies(f"{f.numerator}/{f.denominator}")),
                  (gold, replies(f"\\frac{{{f.numerator + 1}}}{{{f.denominator}}}")),
                  (gold, replies(f"{float(f):.10f}".rstrip("0")))]
    for _ in range(80):
        p = rng.randint(1, 99)
        pairs += [(f"{p}\\%", replies(f"{p}\\%")), (f"{p}\\%", replies(str(p))),
                  (f"{p}\\%", replies(str(p + 1)))]
    for _ in range(80):
        k, m = rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7, 10, 11])
        gold = f"{k}\\sqrt{{{m}}}"
        pairs += [(gold, replies(f"\\sqrt{{{k * k * m}}}")), (gold, replies(f"{k + 1}\\sqrt{{{m}}}")),
                  (gold, replies(gold))]
    for _ in range(60):
        k, m = rng.randint(1, 9), rng.randint(2, 9)
        gold = f"\\frac{{{k}\\pi}}{{{m}}}"
        pairs += [(gold, replies(f"\\frac{{{k}}}{{{m}}}\\pi")), (gold, replies(f"\\frac{{{k + 1}\\pi}}{{{m}}}"))]
    for _ in range(80):
        a = rng.randint(1, 9)
        gold = f"x^2+{2 * a}x+{a * a}"
        pairs += [(gold, replies(f"(x+{a})^2")), (gold, replies(f"(x-{a})^2")), (gold, replies(f"{a * a}+{2 * a}x+x^2"))]
    for _ in range(60):
        a, b = sorted(rng.sample(range(-20, 30), 2))
        pairs += [(f"({a}, {b})", replies(f"({a},{b})")), (f"({a}, {b})", replies(f"({b},{a})")),
                  (f"[{a}, {b})", replies(f"[{a},{b})")), (f"[{a}, {b})", replies(f"[{a},{b}]")),
                  (f"\\{{{a}, {b}\\}}", replies(f"\\{{{b}, {a}\\}}"))]
    for _ in range(60):
        v = rng.randint(1, 50)
        pairs += [(str(v), replies(f"x = {v}")), (f"{v}^\\circ", replies(str(v))), (f"{v}", replies(f"{v + 1}^\\circ"))]
    for _ in range(40):
        d = round(rng.uniform(0, 100), 2)
        pairs += [(f"{d}", replies(f"{d}0")), (f"{d}", replies(f"{d + 0.01:.2f}"))]
    for _ in range(30):
        b, e = rng.randint(2, 9), rng.randint(2, 6)
        pairs += [(f"{b}^{{{e}}}", replies(str(b**e))), (f"{b}^{{{e}}}", replies(str(b**e + 1)))]
    return [(g, r, "generated") for g, r in pairs]


def shipped(wheel):
    golds = []
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(z.namelist()):
            if not name.endswith(".jsonl") or not re.search(r"math|gsm|aime|compmath", name):
                continue
            for line in z.read(name).decode("utf8", "replace").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                gold = row.get("expected_answer") if isinstance(row, dict) else None
                if isinstance(gold, (str, int, float)) and str(gold).strip() and str(gold) not in golds:
                    golds.append(str(gold))
    pairs = []
    for gold in golds:
        g = strip(gold)
        pairs.append((gold, replies(g)))
        pairs.append((gold, f"Thus the answer is ${g}$."))
        if re.fullmatch(r"-?\d+", g):
            pairs.append((gold, replies(str(int(g) + 1))))
            pairs.append((gold, f"Computing, the result is {g}"))
        else:
            pairs.append((gold, replies(g + "+1")))
            pairs.append((gold, replies("2")))
    return [(g, r, "nemo-gym") for g, r in pairs]


def main():
    wheel, out = sys.argv[1], sys.argv[2]
    rows = generated() + shipped(wheel)
    with open(out, "w") as f:
        for gold, reply, source in rows:
            f.write(json.dumps({"gold": gold, "reply": reply, "source": source, "math_verify": label(gold, reply)}) + "\n")
    print(f"{len(rows)} pairs labelled into {out}")


main()
