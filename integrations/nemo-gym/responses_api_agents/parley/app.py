"""Parley as one of NeMo Gym's agent servers.

NeMo Gym starts this file (`entrypoint: app.py`) the way it starts its own agents: with the merged
config in NEMO_GYM_CONFIG_DICT and this server's instance name in NEMO_GYM_CONFIG_PATH. It reads
the host and port Gym assigned, the policy's base URLs (`policy_base_url`, one per data-parallel
rank) and model name, and replaces itself with `parley serve` on that address, so that Gym's
process management (and a trainer's) stops Parley directly. Parley then answers Gym's `/run`
exactly as Gym's own agents do.

Config keys of the instance (see configs/parley.yaml):
  parley_bin   the parley binary [default: $PARLEY_BIN, else `parley` on PATH]
  parley_args  more `parley serve` arguments: the environment, the user, limits, --db ...
"""

import json
import os
import shutil
import sys

import yaml


def instance_config(merged, path):
    """The instance's own entry: `<instance>: {responses_api_agents: {parley: {...}}}`."""
    node = merged
    for key in path.split("."):
        node = node[key]
    for server_type in node.values():
        for implementation in server_type.values():
            return implementation
    raise SystemExit(f"parley: no server entry under {path}")


def main():
    merged = yaml.safe_load(os.environ["NEMO_GYM_CONFIG_DICT"])
    path = os.environ["NEMO_GYM_CONFIG_PATH"]
    config = instance_config(merged, path)
    host = config.get("host") or merged.get("default_host") or "127.0.0.1"
    port = config["port"]
    urls = merged.get("policy_base_url") or []
    if isinstance(urls, str):
        urls = [urls]
    model = merged.get("policy_model_name")
    parley = config.get("parley_bin") or os.environ.get("PARLEY_BIN") or shutil.which("parley")
    if not parley:
        raise SystemExit("parley: no parley binary; set parley_bin in the config or PARLEY_BIN")
    args = [parley, "serve", "--listen", f"{host}:{port}"]
    for url in urls:
        args += ["--base-url", url]
    if model:
        args += ["--model", str(model)]
    args += [str(a) for a in config.get("parley_args") or []]
    print(f"parley: {json.dumps(args)}", file=sys.stderr, flush=True)
    os.execv(parley, args)


if __name__ == "__main__":
    main()
