#!/usr/bin/env python3
"""A NeMo Gym resources server to start from, with the Python standard library alone.

It speaks the protocol NeMo Gym's `SimpleResourcesServer` does, which Parley drives with
`server = URL` in parley.toml (or `--server URL`):

- `POST /seed_session` with the whole task row: starts a session (a cookie names it) and keeps
  the row's own state, here its `inventory`;
- `POST /count_items` (one route per tool, named as in the row's `tools`): the tool, with the
  model's arguments as the JSON body; what it answers is the tool output the model reads;
- `POST /verify` with the row and `response` (the agent's output, a Responses object): answers
  the row back with `reward` and any fields of your own (here `extracted_answer`);
- `POST /close_session`: forgets the session.

Start it with `python3 resources_server.py --port 8765` (port 0 picks a free one; the first line
on stdout is its URL). Logs go to stderr.
"""

import argparse
import json
import re
import sys
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COOKIE = "parley_init_session"
SESSIONS = {}  # session id -> the task row it was seeded with


def count_items(session, arguments):
    item = str(arguments.get("item", "")).strip().lower()
    return {"item": item, "count": session.get("inventory", {}).get(item, 0)}


TOOLS = {"count_items": count_items}


def final_text(response):
    """The text of the last assistant message in a Responses object's `output`."""
    text = ""
    for item in response.get("output", []):
        if item.get("type") == "message" and item.get("role", "assistant") == "assistant":
            text = "".join(part.get("text", "") for part in item.get("content", []) if isinstance(part, dict))
    return text


def verify(row):
    text = final_text(row.get("response") or {})
    numbers = re.findall(r"-?\d+", text)
    extracted = numbers[-1] if numbers else None
    correct = extracted is not None and extracted == str(row.get("expected_answer"))
    return dict(row, reward=1.0 if correct else 0.0, extracted_answer=extracted)


class Handler(BaseHTTPRequestHandler):
    # Keep-alive, as Parley keeps one connection pool per server (every answer has a length),
    # and no Nagle delay between an answer's headers and its body.
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self.reply(400, {"detail": "the body is not JSON"})
        route = self.path.strip("/")
        session_id = self.session_id()
        if route == "seed_session":
            session_id = uuid.uuid4().hex
            SESSIONS[session_id] = body
            return self.reply(200, {}, cookie=session_id)
        if route == "close_session":
            SESSIONS.pop(session_id, None)
            return self.reply(200, {"resources_session_id": body.get("resources_session_id")})
        if route == "verify":
            return self.reply(200, verify(body))
        if route in TOOLS:
            if session_id not in SESSIONS:
                return self.reply(400, {"detail": "Session not initialized. Please call seed_session first."})
            return self.reply(200, TOOLS[route](SESSIONS[session_id], body))
        return self.reply(404, {"detail": f"no route /{route}"})

    def session_id(self):
        for part in (self.headers.get("Cookie") or "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                return value
        return None

    def reply(self, status, document, cookie=None):
        data = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if cookie is not None:
            self.send_header("Set-Cookie", f"{COOKIE}={cookie}; Path=/")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):
        sys.stderr.write("%s\n" % (format % args))


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # connections waiting to be accepted; the default 5 drops a burst


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    server = Server((args.host, args.port), Handler)
    print(f"http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
