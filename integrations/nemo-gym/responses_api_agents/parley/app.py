"""Parley as one of NeMo Gym's agent servers.

NeMo Gym starts this file (`entrypoint: app.py`) the way it starts its own agents: with the merged
config in NEMO_GYM_CONFIG_DICT and this server's instance name in NEMO_GYM_CONFIG_PATH. It reads
the host and port Gym assigned, the policy's base URLs (`policy_base_url`, one per data-parallel
rank) and model name, and replaces itself with `parley serve` on that address, so that Gym's
process management (and a trainer's) stops Parley directly. Parley then answers Gym's `/run`
exactly as Gym's own agents do.

Config keys of the instance (see configs/parley.yaml):
  parley_bin       the parley binary [default: $PARLEY_BIN, else `parley` on PATH]
  parley_args      more `parley serve` arguments: the environment, the user, limits, --db ...
  trusted_network  true: serve a host that is not loopback without a token (`--trusted-network`).
                   NeMo RL sets Gym's default host to the node's address, and Gym sends no token,
                   so a training cluster needs it; set it only where the cluster network is
                   reachable by the trainer's nodes alone. [default: false]

Where files land: Gym starts every server with `cd <server folder> && ...`, so this process starts
in the integration's source folder. `parley serve` runs instead in the folder Gym itself was
started from (the trainer's working directory, which bash's `cd` leaves in OLDPWD), so a relative
`--db` (and the default `parley.db`), `--data-dir` or `--settings` in parley_args means what it
would mean on the trainer's command line, and nothing is written into the source tree. Started
some other way, with no such folder known, a relative or missing `--db` is refused.
"""

import ipaddress
import json
import os
import shutil
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


def instance_config(merged, path):
    """The instance's own entry: `<instance>: {responses_api_agents: {parley: {...}}}`."""
    node = merged
    for key in path.split("."):
        node = node[key]
    for server_type in node.values():
        for implementation in server_type.values():
            return implementation
    raise SystemExit(f"parley: no server entry under {path}")


def is_loopback(host):
    """Whether `host` names this machine's loopback only (`localhost`, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def truthy(value):
    """A YAML boolean, or the strings Hydra overrides leave (`true`, `1`, `yes`)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


def launch_dir():
    """The folder Gym was started from: OLDPWD, left by the `cd` of Gym's launch command."""
    previous = os.environ.get("OLDPWD")
    if previous and os.path.isabs(previous) and os.path.isdir(previous):
        if os.path.realpath(previous) != os.path.realpath(HERE):
            return previous
    return None


def database(args):
    """The `--db` value in `args` (either spelling), or None when it is not given."""
    for i, arg in enumerate(args):
        if arg == "--db" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--db="):
            return arg.split("=", 1)[1]
    return None


def main():
    merged = yaml.safe_load(os.environ["NEMO_GYM_CONFIG_DICT"])
    path = os.environ["NEMO_GYM_CONFIG_PATH"]
    config = instance_config(merged, path)
    host = str(config.get("host") or merged.get("default_host") or "127.0.0.1")
    port = config["port"]
    urls = merged.get("policy_base_url") or []
    if isinstance(urls, str):
        urls = [urls]
    model = merged.get("policy_model_name")
    parley = config.get("parley_bin") or os.environ.get("PARLEY_BIN") or shutil.which("parley")
    if not parley:
        raise SystemExit("parley: no parley binary; set parley_bin in the config or PARLEY_BIN")
    parley = os.path.abspath(parley)
    extra = [str(a) for a in config.get("parley_args") or []]

    # Rows name this server by its instance name in `agent_ref.name`; with several environments
    # in one Parley, they choose theirs by the `environment` field.
    args = [parley, "serve", "--listen", f"{host}:{port}", "--agent-name", path.split(".")[0]]
    if not is_loopback(host) and truthy(config.get("trusted_network", False)):
        args.append("--trusted-network")
    for url in urls:
        args += ["--base-url", url]
    if model:
        args += ["--model", str(model)]
    args += extra

    where = launch_dir()
    if where:
        os.chdir(where)
    else:
        db = database(extra)
        if db is None or ("://" not in db and not os.path.isabs(db)):
            raise SystemExit(
                "parley: the folder NeMo Gym was started from is unknown (no OLDPWD), so a relative or "
                f"missing --db would land in {HERE}; give an absolute --db in parley_args"
            )
    print(f"parley: in {os.getcwd()}: {json.dumps(args)}", file=sys.stderr, flush=True)
    os.execv(parley, args)


if __name__ == "__main__":
    main()
