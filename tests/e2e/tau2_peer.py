"""tau2's own code as the peer of Parley's tau2 scorer (driven by tests/e2e/tau2_fidelity.rs).

Two commands:

  judge PORT_FILE     serve a deterministic NL-assertion judge (OpenAI Chat Completions) on a free
                      loopback port, written to PORT_FILE; both Parley and tau2 (through litellm)
                      call it, so both sides get the same verdicts for the same prompt.
  rescore RESULTS     re-score every simulation of a Parley tau2 export with tau2's own
                      `evaluate_simulation` (EvaluationType.ALL, strict replay), replay every tool
                      call of each trajectory against a fresh tau2 environment, and print one JSON
                      report: per session, tau2's reward info, Parley's, the tool outputs that
                      differ, tau2's final database hashes, and the exception when tau2 raised.

The environment gives tau2 its data (TAU2_DATA_DIR) and source (PYTHONPATH); the judge's address
reaches litellm through OPENAI_BASE_URL.
"""

import hashlib
import json
import sys
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def verdict(conversation: str, outcome: str) -> bool:
    """Met or not, from the prompt alone: half the assertions pass, decided by a digest."""
    digest = hashlib.sha256((conversation + "\x00" + outcome).encode()).digest()
    return digest[0] % 2 == 0


def judge_answer(messages: list) -> str:
    import ast

    user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    head, _, tail = user.partition("expectedOutcomes:")
    conversation = head.partition("conversation:")[2]
    try:
        outcomes = ast.literal_eval(tail.strip())
    except (ValueError, SyntaxError):
        outcomes = []
    results = [
        {
            "expectedOutcome": o,
            "reasoning": "deterministic test judge",
            "metExpectation": verdict(conversation, o),
        }
        for o in outcomes
    ]
    return json.dumps({"results": results})


class Judge(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
        content = judge_answer(body.get("messages", []))
        answer = json.dumps(
            {
                "id": "chatcmpl-judge",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "judge"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def serve_judge(port_file: str) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os

    os.replace(port_file + ".tmp", port_file)
    server.serve_forever()


def same_content(a, b) -> bool:
    """tau2's comparison of tool outputs in `set_state`: JSON when both parse, else text."""
    try:
        a = json.loads(a)
    except (json.JSONDecodeError, TypeError):
        pass
    try:
        b = json.loads(b)
    except (json.JSONDecodeError, TypeError):
        pass
    return a == b


def replay_outputs(domain, task, simulation):
    """Every tool call of the trajectory (history excluded) replayed in order against a fresh
    tau2 environment set to the task's initial state; the outputs that differ, and the final
    database hashes."""
    from tau2.data_model.message import AssistantMessage, ToolMessage, UserMessage
    from tau2.registry import registry

    env = registry.get_env_constructor(domain)(solo_mode=False)
    state = task.initial_state
    history = list(state.message_history or []) if state else []
    env.set_state(
        initialization_data=state.initialization_data if state else None,
        initialization_actions=state.initialization_actions if state else None,
        message_history=history,
    )
    messages = simulation.messages[len(history):]
    differences = []
    calls = 0
    for i, message in enumerate(messages):
        if not isinstance(message, (AssistantMessage, UserMessage)) or not message.tool_calls:
            continue
        for j, call in enumerate(message.tool_calls):
            recorded = messages[i + 1 + j] if i + 1 + j < len(messages) else None
            if not isinstance(recorded, ToolMessage):
                differences.append({"call": call.name, "problem": "no tool message follows the call"})
                continue
            calls += 1
            response = env.get_response(call)
            if not same_content(response.content, recorded.content) or response.error != recorded.error:
                differences.append(
                    {
                        "call": call.name,
                        "arguments": call.arguments,
                        "tau2": response.content,
                        "tau2_error": response.error,
                        "parley": recorded.content,
                        "parley_error": recorded.error,
                    }
                )
    return calls, differences, env.get_db_hash(), env.get_user_db_hash()


# What the workers of `rescore` share, set before they fork.
DOMAIN = ""
TASKS = {}


def rescore_one(raw: dict) -> dict:
    from tau2.data_model.simulation import SimulationRun
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    entry = {"id": raw["id"], "task_id": raw["task_id"], "parley": raw.get("reward_info")}
    try:
        parley_part = raw.pop("parley", None)
        simulation = SimulationRun.model_validate(raw)
        task = TASKS[simulation.task_id]
        entry["dropped"] = (parley_part or {}).get("dropped_calls", [])
        try:
            reward = evaluate_simulation(simulation, task, EvaluationType.ALL, solo_mode=False, domain=DOMAIN)
            entry["tau2"] = json.loads(reward.model_dump_json())
        except Exception as e:  # tau2 itself raised: counted and explained by the test
            entry["tau2_raised"] = f"{type(e).__name__}: {e}"
        try:
            calls, differences, db, user_db = replay_outputs(DOMAIN, task, simulation)
            entry["replayed_calls"] = calls
            entry["output_differences"] = differences
            entry["db_hashes"] = {"db": db, "user_db": user_db}
        except Exception as e:
            entry["replay_raised"] = f"{type(e).__name__}: {e}"
    except Exception:
        entry["load_raised"] = traceback.format_exc()
    return entry


def read_databases_once() -> None:
    """tau2 builds every environment from its database file, read as JSON into Python's objects
    and validated from them: four times a session (three in `evaluate_simulation`, one in
    `replay_outputs`), over half of a re-score's time. Here each JSON file is read once per worker
    and each load validates its bytes in pydantic's JSON mode, in one pass. The first load of each
    file and class also takes tau2's own way, and the two databases must dump the same, so the
    shortcut is checked wherever it is taken; any other file is loaded tau2's way."""
    from tau2.environment.db import DB

    theirs = DB.load.__func__
    texts: dict = {}
    checked: set = set()

    def load(cls, path):
        key = str(path)
        if not key.endswith(".json"):
            return theirs(cls, path)
        if key not in texts:
            with open(key, "rb") as f:
                texts[key] = f.read()
        db = cls.model_validate_json(texts[key])
        if (cls, key) not in checked:
            if theirs(cls, path).model_dump() != db.model_dump():
                raise AssertionError(f"{key}: pydantic's JSON mode reads another {cls.__name__} than tau2's load")
            checked.add((cls, key))
        return db

    DB.load = classmethod(load)


def rescore(path: str) -> None:
    """Sessions are independent, so they are re-scored on every core."""
    global DOMAIN, TASKS
    import multiprocessing
    import os

    from loguru import logger

    logger.remove()
    read_databases_once()
    from tau2.data_model.tasks import Task

    with open(path) as f:
        document = json.load(f)
    DOMAIN = document["info"]["environment_info"]["domain_name"]
    TASKS = {row["id"]: Task.model_validate(row) for row in document["tasks"]}
    simulations = document["simulations"]
    workers = max(1, min(len(simulations), os.cpu_count() or 1, 8))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        report = pool.map(rescore_one, simulations, chunksize=1)
    json.dump({"domain": DOMAIN, "sessions": report}, sys.stdout)


if __name__ == "__main__":
    if sys.argv[1] == "judge":
        serve_judge(sys.argv[2])
    elif sys.argv[1] == "rescore":
        rescore(sys.argv[2])
    else:
        sys.exit(f"unknown command {sys.argv[1]}")
