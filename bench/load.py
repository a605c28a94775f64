"""A trainer's side of `/run`: posts task rows to an agent server at a fixed concurrency, as
NeMo RL's rollout collection does (one `POST /run` per row, the whole row as the body), and
writes what happened as JSON on stdout: wall seconds, the statuses, and each rollout's latency
with the session Parley answered it with (`_parley_session`, when there is one).

Runs under NeMo Gym's virtual environment (aiohttp, orjson), the client NeMo Gym itself uses.

    python bench/load.py URL ROWS.jsonl --count N --concurrency C
"""

import argparse
import asyncio
import sys
import time

import aiohttp
import orjson


async def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", help="the agent server's /run URL")
    parser.add_argument("rows", help="task rows (JSONL), cycled")
    parser.add_argument("--count", type=int, required=True, help="rollouts to collect")
    parser.add_argument("--concurrency", type=int, required=True, help="rollouts in flight at once")
    args = parser.parse_args()
    with open(args.rows, "rb") as f:
        rows = [line for line in f.read().splitlines() if line.strip()]
    if not rows:
        raise SystemExit(f"load: no rows in {args.rows}")
    queue = iter(range(args.count))
    results = []
    statuses = {}

    async def worker(session):
        for i in queue:
            started = time.monotonic()
            async with session.post(args.url, data=rows[i % len(rows)], headers={"Content-Type": "application/json"}) as r:
                body = await r.read()
                took = time.monotonic() - started
                statuses[r.status] = statuses.get(r.status, 0) + 1
                answer = orjson.loads(body) if r.status == 200 else {}
                results.append([took, answer.get("_parley_session"), answer.get("reward")])

    connector = aiohttp.TCPConnector(limit=args.concurrency)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        started = time.monotonic()
        await asyncio.gather(*(worker(session) for _ in range(args.concurrency)))
        wall = time.monotonic() - started
    sys.stdout.buffer.write(orjson.dumps({"wall_s": wall, "statuses": statuses, "rollouts": results}))


if __name__ == "__main__":
    # The same event loop for every server measured; uvloop keeps the client's own cost low.
    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
