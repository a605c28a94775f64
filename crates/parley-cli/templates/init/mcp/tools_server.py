#!/usr/bin/env python3
"""A small MCP tool server over stdio, with the Python standard library alone.

Parley starts it (`mcp_stdio` in parley.toml) and speaks MCP to it: one JSON-RPC message per
line on stdin and stdout. It answers `initialize`, `tools/list` and `tools/call`; add a tool by
adding an entry to TOOLS and a function beside it. Log to stderr, never to stdout: stdout is
the protocol.
"""

import json
import sys


def add(a, b):
    return a + b


def multiply(a, b):
    return a * b


# name -> (function, description, JSON Schema of its arguments)
NUMBERS = {
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
}
TOOLS = {
    "add": (add, "Add two numbers.", NUMBERS),
    "multiply": (multiply, "Multiply two numbers.", NUMBERS),
}


def number_text(value):
    """12.0 reads as 12, so that answers copied from a tool look like the expected ones."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def call_tool(params):
    name = params.get("name")
    arguments = params.get("arguments") or {}
    if name not in TOOLS:
        # An unknown tool is a protocol error; Parley shows it to the model as a tool error.
        raise LookupError(f"unknown tool: {name}")
    function = TOOLS[name][0]
    try:
        text = number_text(function(**arguments))
        return {"content": [{"type": "text", "text": text}], "isError": False}
    except Exception as error:  # a tool that fails tells the model why, as text
        return {"content": [{"type": "text", "text": f"Error: {error}"}], "isError": True}


def answer(request):
    method = request.get("method")
    params = request.get("params") or {}
    if method == "initialize":
        return {
            # Answer with the version the client asked for: this server uses nothing newer.
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "parley-init-tools", "version": "0.1.0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {
            "tools": [
                {"name": name, "description": description, "inputSchema": schema}
                for name, (_, description, schema) in TOOLS.items()
            ]
        }
    if method == "tools/call":
        return call_tool(params)
    raise NotImplementedError(method)


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification (`notifications/initialized`, say) needs no answer
        reply = {"jsonrpc": "2.0", "id": request["id"]}
        try:
            reply["result"] = answer(request)
        except NotImplementedError as error:
            reply["error"] = {"code": -32601, "message": f"method not found: {error}"}
        except Exception as error:
            reply["error"] = {"code": -32602, "message": str(error)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
