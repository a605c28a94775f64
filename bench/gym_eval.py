"""`gym eval run`, unchanged, with each rollout's latency written down.

NeMo Gym's collector times every rollout it dispatches (`DispatchLatencyTracker.record`, the
wall time of one `/run`) but prints only minute-rounded percentiles. This wrapper runs the same
CLI entry point in the same process and keeps each (end, seconds) pair, writing them as JSON to
the file named by PARLEY_BENCH_LATENCIES when the CLI exits. Nothing else is changed: one list
append per rollout.
"""

import atexit
import json
import os
import sys
import time

from nemo_gym import rollout_collection

records = []
_record = rollout_collection.DispatchLatencyTracker.record


def record(self, seconds):
    records.append((time.monotonic(), seconds))
    _record(self, seconds)


rollout_collection.DispatchLatencyTracker.record = record


@atexit.register
def dump():
    with open(os.environ["PARLEY_BENCH_LATENCIES"], "w") as f:
        json.dump(records, f)


from nemo_gym.cli.main import main  # noqa: E402  (after the patch, on purpose)

sys.argv[0] = "gym"
sys.exit(main())
