"""tau2's own simulated user, for tests/e2e/tau2_user.rs.

For every task of the domains named on the command line, builds tau2's text orchestrator as
`tau2 run` does (its default user, `UserSimulator`, with its default LLM arguments), starts the
conversation and takes the first request the user sends its model as it reaches `generate`,
before any model is called. Prints one JSON line per task: the task's id, the messages in the
form tau2 hands LiteLLM (`to_litellm_messages`), the tools' schemas and the LLM arguments.

The environment gives tau2 its source (PYTHONPATH) and data (TAU2_DATA_DIR); the tasks are read
from the same files Parley reads: `<domain>/tasks.json`, telecom's `tasks_small.json`.
"""

import json
import os
import sys

from loguru import logger

from tau2.data_model.simulation import TextRunConfig
from tau2.data_model.tasks import Task
from tau2.orchestrator.orchestrator import Role
from tau2.runner.build import build_text_orchestrator
from tau2.user import user_simulator
from tau2.utils.llm_utils import to_litellm_messages


class Asked(Exception):
    """The user's request, taken before it reaches a model."""

    def __init__(self, request: dict):
        super().__init__("the user asked its model")
        self.request = request


def capture(model, messages, tools=None, tool_choice=None, call_name=None, **kwargs):
    raise Asked(
        {
            "model": model,
            "messages": to_litellm_messages(messages),
            "tools": [tool.openai_schema for tool in tools] if tools else None,
            "kwargs": kwargs,
        }
    )


def tasks(domain: str) -> list[Task]:
    name = "tasks_small.json" if domain == "telecom" else "tasks.json"
    path = os.path.join(os.environ["TAU2_DATA_DIR"], "tau2", "domains", domain, name)
    with open(path) as f:
        return [Task.model_validate(row) for row in json.load(f)]


def first_request(domain: str, task: Task) -> dict:
    config = TextRunConfig(domain=domain, agent="llm_agent")
    orchestrator = build_text_orchestrator(config, task)
    orchestrator.initialize()
    if orchestrator.to_role != Role.USER:
        return {"error": f"the conversation starts with {orchestrator.to_role}, not the user"}
    try:
        orchestrator.step()
    except Asked as asked:
        return asked.request
    return {"error": "the user answered without asking its model"}


def main() -> None:
    # tau2 logs every message at DEBUG; its errors are enough here.
    logger.remove()
    logger.add(sys.stderr, level="ERROR")
    user_simulator.generate = capture
    for domain in sys.argv[1:]:
        for task in tasks(domain):
            request = first_request(domain, task)
            print(json.dumps({"domain": domain, "id": task.id, **request}), flush=True)


if __name__ == "__main__":
    main()
