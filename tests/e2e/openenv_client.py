"""A trainer's side of OpenEnv, for tests/e2e/openenv.rs: OpenEnv's own client (`openenv-core`,
from .venv-openenv; .ci/setup-openenv) drives `parley serve`.

  play URL SCRIPTS OUT --transport ws|http   each script's actions, one episode per script
  many URL N TASKS OUT                        N WebSocket episodes at once, each with its own texts
  bad URL OUT                                 malformed frames and bodies, and the answers to them
  drop URL SCRIPT OUT                         an episode whose connection drops, continued by id

A script is {"task_index": i, "actions": [assistant message, ...]}, and in a service hosting
several environments the one it resets in (`"environment": NAME`). Every command writes JSON to
OUT; the Rust test reads it and asserts. Nothing here decides what is right.
"""

import asyncio
import json
import sys

import requests
import websockets
from openenv.core import GenericEnvClient


def summary(result, state=None):
    """What the test reads of an episode's last step (and of its state)."""
    obs = result.observation
    out = {
        "session_id": obs.get("session_id"),
        "task_id": obs.get("task_id"),
        "done": result.done,
        "reward": result.reward,
        "termination": obs.get("termination"),
        "error": obs.get("error"),
        "breakdown": obs.get("reward_breakdown"),
    }
    if state is not None:
        out["state"] = state
    return out


def reset_data(script):
    """What a script's reset sends: its task, and its environment when it names one."""
    data = {"task_index": script["task_index"]}
    if "environment" in script:
        data["environment"] = script["environment"]
    return data


async def play_ws(url, scripts):
    out = []
    async with GenericEnvClient(base_url=url, message_timeout_s=300) as env:
        for script in scripts:
            result = await env.reset(**reset_data(script))
            first = result.observation
            for action in script["actions"]:
                if result.done:
                    break
                result = await env.step(action)
            state = await env.state()
            row = summary(result, {k: state[k] for k in ("episode_id", "step_count", "task_index", "session_id")})
            row["first_roles"] = [m["role"] for m in first["messages"]]
            row["tools"] = len(first.get("tools", []))
            out.append(row)
    return out


def play_http(url, scripts):
    out = []
    http = requests.Session()
    for script in scripts:
        answer = http.post(f"{url}/reset", json=reset_data(script), timeout=300)
        answer.raise_for_status()
        body = answer.json()
        session = body["observation"]["session_id"]
        key = body["observation"]["session_key"]
        for action in script["actions"]:
            if body["done"]:
                break
            answer = http.post(f"{url}/step", json={"action": action, "session_id": session, "session_key": key},
                               timeout=300)
            answer.raise_for_status()
            body = answer.json()
        state = http.get(f"{url}/state", params={"session_id": session, "session_key": key}, timeout=60).json()
        obs = body["observation"]
        out.append({
            "session_id": session,
            "task_id": obs.get("task_id"),
            "done": body["done"],
            "reward": body["reward"],
            "termination": obs.get("termination"),
            "error": obs.get("error"),
            "state": {k: state[k] for k in ("episode_id", "step_count", "task_index", "session_id")},
        })
    return out


async def one_of_many(url, i, tasks):
    """One episode of many: its own texts, so that a mix-up between sessions would show."""
    async with GenericEnvClient(base_url=url, message_timeout_s=600) as env:
        result = await env.reset(task_index=i % tasks, episode_id=f"episode-{i}")
        sent = 0
        turns = 2 + i % 3
        while not result.done and sent < turns:
            result = await env.step({"role": "assistant", "content": f"Session {i}, turn {sent}: tell me more."})
            sent += 1
        if not result.done:
            result = await env.step({"content": f"Session {i} is done. ###STOP###"})
            sent += 1
        state = await env.state()
        return {
            "i": i,
            "sent": sent,
            "done": result.done,
            "termination": result.observation.get("termination"),
            "session_id": state["session_id"],
            "episode_id": state["episode_id"],
            "step_count": state["step_count"],
            "task_index": state["task_index"],
            "assistant_texts": [m["content"] for m in state["messages"] if m["role"] == "assistant"],
        }


async def many(url, n, tasks):
    return await asyncio.gather(*(one_of_many(url, i, tasks) for i in range(n)))


async def bad(url):
    """Each malformed thing on one connection, which must stay open throughout."""
    ws_url = url.replace("http://", "ws://") + "/ws"
    seen = {}
    async with websockets.connect(ws_url, max_size=None) as ws:

        async def ask(name, frame):
            await ws.send(frame if isinstance(frame, str) else json.dumps(frame))
            seen[name] = json.loads(await ws.recv())

        await ask("not_json", "{this is not json")
        await ask("step_before_reset", {"type": "step", "data": {"content": "hi"}})
        await ask("unknown_type", {"type": "dance", "data": {}})
        await ask("extra_message_field", {"type": "reset", "data": {}, "colour": "red"})
        await ask("reset_unknown_field", {"type": "reset", "data": {"task_index": 0, "shoe_size": 9}})
        await ask("reset_past_the_tasks", {"type": "reset", "data": {"task_index": 100000}})
        await ask("reset", {"type": "reset", "data": {"task_index": 0}})
        await ask("action_unknown_field", {"type": "step", "data": {"content": "x", "colour": "red"}})
        await ask("action_not_an_object", {"type": "step", "data": "hello"})
        await ask("call_without_name", {"type": "step", "data": {"tool_calls": [{"function": {"arguments": "{}"}}]}})
        await ask("step_without_data", {"type": "step"})
        await ask(
            "arguments_not_json",
            {"type": "step", "data": {"tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_user_details", "arguments": "{not json"}}]}},
        )
        await ask("unknown_tool", {"type": "step", "data": {"tool_calls": [
            {"id": "c2", "function": {"name": "no_such_tool", "arguments": "{}"}}]}})
        await ask("text_ends_it", {"type": "step", "data": {"content": "Goodbye."}})
        await ask("step_after_done", {"type": "step", "data": {"content": "still there?"}})
        await ask("state_after_done", {"type": "state"})
        await ask("reset_again", {"type": "reset", "data": {"task_index": 1}})
    http = requests.Session()
    answers = {}

    def record(name, response):
        try:
            body = response.json()
        except ValueError:
            body = response.text
        answers[name] = {"status": response.status_code, "body": body}

    record("reset_not_json", http.post(f"{url}/reset", data="{nope", timeout=60))
    record("reset_unknown_field", http.post(f"{url}/reset", json={"colour": 1}, timeout=60))
    record("step_without_session", http.post(f"{url}/step", json={"action": {"content": "x"}}, timeout=60))
    record("step_unknown_session", http.post(f"{url}/step", json={"action": {"content": "x"}, "session_id": 999999}, timeout=60))
    started = http.post(f"{url}/reset", json={"task_index": 0}, timeout=60)
    session = started.json()["observation"]["session_id"]
    key = started.json()["observation"]["session_key"]
    own = {"session_id": session, "session_key": key}
    record("step_bad_action", http.post(f"{url}/step", json={"action": {"content": 3}, **own}, timeout=60))
    record("step_unknown_field", http.post(f"{url}/step", json={"action": {}, **own, "colour": 1}, timeout=60))
    record("step_without_key", http.post(f"{url}/step", json={"action": {"content": "x"}, "session_id": session}, timeout=60))
    record("state_without_key", http.get(f"{url}/state", params={"session_id": session}, timeout=60))
    record("step_ends_it", http.post(f"{url}/step", json={"action": {"content": "Goodbye."}, **own}, timeout=60))
    record("step_after_done", http.post(f"{url}/step", json={"action": {"content": "x"}, **own}, timeout=60))
    record("state_bad_id", http.get(f"{url}/state", params={"session_id": "x"}, timeout=60))
    record("health", http.get(f"{url}/health", timeout=60))
    return {"ws": seen, "http": answers}


async def drop(url, script):
    """Plays the first action, drops the connection without a close frame, and continues the
    session on a new connection by its id."""
    ws_url = url.replace("http://", "ws://") + "/ws"
    actions = script["actions"]
    ws = await websockets.connect(ws_url, max_size=None)
    await ws.send(json.dumps({"type": "reset", "data": {"task_index": script["task_index"], "episode_id": "dropped"}}))
    first = json.loads(await ws.recv())
    session = first["data"]["observation"]["session_id"]
    key = first["data"]["observation"]["session_key"]
    await ws.send(json.dumps({"type": "step", "data": actions[0]}))
    json.loads(await ws.recv())
    ws.transport.abort()
    await asyncio.sleep(0.5)
    # Another connection that knows only the id cannot take the session over.
    async with websockets.connect(ws_url, max_size=None) as stranger:
        await stranger.send(json.dumps({"type": "reset", "data": {"session_id": session}}))
        refused = json.loads(await stranger.recv())
    async with GenericEnvClient(base_url=url, message_timeout_s=300) as env:
        result = await env.reset(session_id=session, session_key=key)
        continued = [m["role"] for m in result.observation["messages"]]
        for action in actions[1:]:
            if result.done:
                break
            result = await env.step(action)
        state = await env.state()
    row = summary(result, {k: state[k] for k in ("episode_id", "step_count", "session_id")})
    row["continued_roles"] = continued
    row["stranger"] = refused
    return row


def main():
    command, url = sys.argv[1], sys.argv[2].rstrip("/")
    if command == "play":
        scripts = json.load(open(sys.argv[3]))
        transport = sys.argv[6] if len(sys.argv) > 6 else "ws"
        result = asyncio.run(play_ws(url, scripts)) if transport == "ws" else play_http(url, scripts)
        out = sys.argv[4]
    elif command == "many":
        result = asyncio.run(many(url, int(sys.argv[3]), int(sys.argv[4])))
        out = sys.argv[5]
    elif command == "bad":
        result = asyncio.run(bad(url))
        out = sys.argv[3]
    elif command == "drop":
        result = asyncio.run(drop(url, json.load(open(sys.argv[3]))))
        out = sys.argv[4]
    else:
        sys.exit(f"unknown command {command}")
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
