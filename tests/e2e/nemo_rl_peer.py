"""NeMo RL's own rollout code, unchanged, drives Parley through NeMo Gym (tests/e2e/nemo_rl.rs).

NeMo RL's source at commit 7ea279a is read from ../shared/peers/nemo-rl (beside the repository
root; see its NOTICE), never copied here. PyPI's nemo-rl is an empty placeholder and the real one
needs GPUs, torch and Ray, so what its modules import and this machine lacks is stood in for in
`sys.modules` before they load (`install_stand_ins`): torch's tensors are lists, Ray's actors are
plain objects called in this process, a tokenizer that decodes ids as text. Every function and
check of NeMo RL's that touches a `/run` answer runs as written:

- `spinup_nemo_gym_actor` and `NemoGym._spinup` start NeMo Gym (`RunHelper.start`) with NeMo RL's
  config keys: `policy_base_url` as a list of three ranks, the node's address (what Ray reports,
  here an address in a network namespace of this test's own) as Gym's default host, a head-server
  port from 5000-5999. Gym starts Parley from integrations/nemo-gym's shipped config.
- `run_async_nemo_gym_rollout` collects through Gym's `RolloutCollectionHelper.run_examples`
  (`NemoGym.run_rollouts`): `_prepare_nemo_gym_rows`, the stream accumulator, NeMo RL's
  post-processing of every result (`_postprocess_nemo_gym_to_nemo_rl_result`: token fields and
  contiguity), `_postprocess_single_nemo_gym_group` ("one _ng_task_index per prompt group",
  `_extract_mask_sample_flags`, GDPO's `reward/<name>` columns and
  `validate_reward_components_match_scalar`).
- `nemo_rl/experience/failures.py` classifies a failed `/run`: a policy that answers 500 must be
  infrastructure, a malformed row data.

Run as root (it makes a network namespace with `ip netns`):

    .venv-nemo-gym-0.5.1/bin/python tests/e2e/nemo_rl_peer.py --parley target/debug/parley

It prints a JSON summary as its last line and exits 0 when every check held, 1 when one failed
(each named in `failures`), 77 when it cannot run here (not root, no `ip`, no namespaces).
"""

import argparse
import asyncio
import importlib.util
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import types
import urllib.request
from pathlib import Path

SKIP = 77
ROOT = Path(__file__).resolve().parents[2]
INTEGRATION = ROOT / "integrations" / "nemo-gym"
SHIPPED_CONFIG = INTEGRATION / "responses_api_agents" / "parley" / "configs" / "parley.yaml"
RANKS = 3


def arguments():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parley", required=True, help="the parley binary")
    parser.add_argument("--nemo-rl", default=str(ROOT / ".." / "shared" / "peers" / "nemo-rl"),
                        help="NeMo RL's source [default: ../shared/peers/nemo-rl from the repository root]")
    parser.add_argument("--tau2-data", default=os.environ.get("PARLEY_TAU2_DATA")
                        or str(ROOT / ".." / "shared" / "data" / "tau2"),
                        help="tau2's data [default: $PARLEY_TAU2_DATA, else ../shared/data/tau2]")
    parser.add_argument("--work", help="a folder for the run's files [default: a temporary one]")
    parser.add_argument("--inside", metavar="NODE_ADDRESS", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.parley = str(Path(shutil.which(args.parley) or args.parley).resolve())
    args.nemo_rl, args.tau2_data = str(Path(args.nemo_rl).resolve()), str(Path(args.tau2_data).resolve())
    return args


def summary_and_exit(summary, code):
    print(json.dumps(summary, sort_keys=True), flush=True)
    sys.exit(code)


# ---------------------------------------------------------------------------------------------
# Outside: a network namespace with an address of its own, and the driver run inside it.
# ---------------------------------------------------------------------------------------------


def ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def outside(args):
    if os.geteuid() != 0:
        summary_and_exit({"skipped": "not root: a network namespace (ip netns) needs root"}, SKIP)
    if shutil.which("ip") is None:
        summary_and_exit({"skipped": "no `ip` command (iproute2)"}, SKIP)
    pid = os.getpid()
    name = f"parley-nrl-{pid}"
    host_end, node_end = f"pnrl{pid % 100000}h", f"pnrl{pid % 100000}n"
    node = f"10.77.{pid % 250 + 1}.2"
    own = ip("-o", "addr", "show").stdout
    assert f" {node}/" not in own, f"{node} is an address of this machine already: {own}"
    made = ip("netns", "add", name, check=False)
    if made.returncode != 0:
        summary_and_exit({"skipped": f"cannot create a network namespace: {made.stderr.strip()}"}, SKIP)
    code = 1
    scratch = tempfile.mkdtemp(prefix="pnrl")  # short: Ray's socket paths under it have a length limit

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)  # a test runner's timeout still removes the namespace
    try:
        ip("link", "add", host_end, "type", "veth", "peer", "name", node_end, "netns", name)
        ip("-n", name, "addr", "add", f"{node}/24", "dev", node_end)
        ip("-n", name, "link", "set", "lo", "up")
        ip("-n", name, "link", "set", node_end, "up")
        ip("link", "set", host_end, "up")
        inner = [sys.executable, str(Path(__file__).resolve()), "--inside", node, "--parley", args.parley,
                 "--nemo-rl", args.nemo_rl, "--tau2-data", args.tau2_data, "--scratch", scratch]
        if args.work:
            inner += ["--work", args.work]
        code = subprocess.run(["ip", "netns", "exec", name, *inner]).returncode
    finally:
        # Whatever the driver left running in the namespace (servers Gym started) goes with it.
        for left in ip("netns", "pids", name, check=False).stdout.split():
            try:
                os.kill(int(left), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        ip("link", "del", host_end, check=False)
        ip("netns", "del", name, check=False)
        shutil.rmtree(scratch, ignore_errors=True)
    sys.exit(code)


# ---------------------------------------------------------------------------------------------
# Stand-ins for what NeMo RL imports and this machine lacks.
# ---------------------------------------------------------------------------------------------


class Tensor(list):
    """torch.Tensor as NeMo RL's Gym path uses it: a list with a shape."""

    def __init__(self, values=(), dtype=None):
        super().__init__(values)
        self.dtype = dtype

    @property
    def shape(self):
        shape, node = [], self
        while isinstance(node, list):
            shape.append(len(node))
            node = node[0] if node else None
        return tuple(shape)

    def dim(self):
        return len(self.shape)

    def any(self):
        return any(self)

    def tolist(self):
        return list(self)

    def __getitem__(self, index):
        got = super().__getitem__(index)
        return Tensor(got, self.dtype) if isinstance(index, slice) else got


def stand_in(name, **attributes):
    """A module of `attributes`; any other name imported from it is a type that must not be called."""
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    module.__path__ = []  # a package, so that submodules of it import

    def missing(attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)

        class Unused:
            def __init__(self, *args, **kwargs):
                raise NotImplementedError(f"{name}.{attribute} is a stand-in that NeMo RL's Gym path should not call")

        Unused.__name__ = Unused.__qualname__ = attribute
        setattr(module, attribute, Unused)
        return Unused

    module.__getattr__ = missing
    sys.modules[name] = module
    return module


class Actor:
    """A Ray actor handle over a plain object: `handle.method.remote(...)` calls it here."""

    def __init__(self, instance, tap):
        self._instance, self._tap = instance, tap

    def __getattr__(self, name):
        method = getattr(self._instance, name)
        tap = self._tap

        class Method:
            @staticmethod
            def remote(*args, **kwargs):
                return method(*args, **kwargs)

            @staticmethod
            def options(num_returns=None, **_):
                class Streaming:
                    @staticmethod
                    def remote(*args, **kwargs):
                        return stream(method(*args, **kwargs), tap)

                return Streaming

        return Method


def stream(generator, tap):
    """Ray's streaming generator: an async iterator of awaitables of what the actor yielded."""

    async def each():
        async for item in generator:
            tap(item)
            future = asyncio.get_running_loop().create_future()
            future.set_result(item)
            yield future

    return each()


class ActorClass:
    def __init__(self, cls):
        self.cls = cls
        self.tap = lambda item: None

    def options(self, **_):
        return self

    def remote(self, *args, **kwargs):
        return Actor(self.cls(*args, **kwargs), lambda item: self.tap(item))

    def __call__(self, *args, **kwargs):
        return self.cls(*args, **kwargs)


def ray_remote(*args, **_):
    if len(args) == 1 and callable(args[0]):
        return ActorClass(args[0]) if isinstance(args[0], type) else args[0]
    return lambda target: ray_remote(target)


class Tokenizer:
    """A tokenizer whose text is the ids: NeMo RL decodes them only for its logs."""

    pad_token_id = 0

    def batch_decode(self, sequences, **_):
        return [" ".join(str(t) for t in sequence) for sequence in sequences]

    def apply_chat_template(self, messages, tokenize=True, **_):
        return [len(str(m)) for m in messages]

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]


class BatchedDataDict(dict):
    def slice(self, start, end):
        return BatchedDataDict({k: v[start:end] for k, v in self.items()})


def batched_message_log_to_flat_message(message_logs, pad_value_dict=None, **_):
    """Each sample's messages' token ids end to end, right-padded to the longest."""
    flat = [[t for m in log for t in m["token_ids"]] for log in message_logs]
    width = max((len(f) for f in flat), default=0)
    pad = (pad_value_dict or {}).get("token_ids", 0)
    return {"token_ids": Tensor([Tensor(f + [pad] * (width - len(f))) for f in flat])}, Tensor([len(f) for f in flat])


def install_stand_ins(node):
    torch = stand_in(
        "torch",
        Tensor=Tensor,
        tensor=lambda values, dtype=None: Tensor(values, dtype),
        isnan=lambda t: Tensor([v != v for v in t]),
        bool="torch.bool", int8="torch.int8", int16="torch.int16", int32="torch.int32",
        int64="torch.int64", float32="torch.float32",
    )
    torch.nn = stand_in("torch.nn")
    torch.nn.functional = stand_in("torch.nn.functional")

    class Context:
        gcs_address = f"{node}:6379"

        def get_node_id(self):
            return "node-0"

    ray_version = "2.49.2"
    try:
        from importlib.metadata import version

        ray_version = version("ray")
    except Exception:
        pass
    exceptions = stand_in("ray.exceptions")
    for name in ["RayActorError", "ActorUnavailableError", "ActorUnschedulableError", "TaskUnschedulableError",
                 "WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "ObjectLostError",
                 "OwnerDiedError", "RpcError", "GetTimeoutError", "ObjectFetchTimedOutError",
                 "OutOfMemoryError", "ObjectStoreFullError", "RaySystemError"]:
        setattr(exceptions, name, type(name, (Exception,), {}))
    # Ray's own answer for the node's address is what `_get_node_ip_local` reads: here, the
    # address this test gave the node.
    services = stand_in("ray._private.services", get_node_ip_address=lambda: node)
    ray = stand_in(
        "ray",
        __version__=ray_version,
        remote=ray_remote,
        get=lambda value, **_: value,
        init=lambda *a, **k: None,
        shutdown=lambda *a, **k: None,
        is_initialized=lambda: True,
        get_runtime_context=Context,
        exceptions=exceptions,
        _private=stand_in("ray._private", services=services),
    )
    ray.util = stand_in("ray.util")
    stand_in("ray.util.placement_group")
    stand_in("ray.util.scheduling_strategies")

    stand_in("transformers", PreTrainedTokenizerBase=Tokenizer)
    stand_in("transformers.audio_utils")
    stand_in("transformers.video_utils")

    class Table:
        def __init__(self, data=None, columns=None):
            self.data, self.columns = data, columns

    class Histogram:
        def __init__(self, values=None, **_):
            self.values = values

    if importlib.util.find_spec("wandb") is None:  # NeMo Gym brings wandb itself
        stand_in("wandb", Table=Table, Histogram=Histogram)

    # NeMo RL's own modules that the NOTICE's files import but that are not in the peer folder.
    stand_in("nemo_rl.algorithms")
    stand_in("nemo_rl.algorithms.utils",
             get_gdpo_reward_component_keys=lambda batch: sorted(k for k in batch if k.startswith("reward/")))
    stand_in("nemo_rl.data.interfaces")
    stand_in("nemo_rl.data.llm_message_utils", batched_message_log_to_flat_message=batched_message_log_to_flat_message)
    stand_in("nemo_rl.distributed.batched_data_dict", BatchedDataDict=BatchedDataDict)
    stand_in("nemo_rl.distributed.ray_actor_environment_registry", get_actor_python_env=lambda name: sys.executable)
    stand_in("nemo_rl.models.policy")
    stand_in("nemo_rl.models.generation.vllm")
    stand_in("nemo_rl.models.generation.vllm.video_utils")
    stand_in("nemo_rl.environments.nemotron_utils")
    stand_in("nemo_rl.utils.routed_experts_codec")
    stand_in("nemo_rl.utils.venvs")
    stand_in("nemo_rl.utils.multimodal_payload_metrics",
             collect_multimodal_payload_metrics=lambda payload, name, enabled=False: None,
             print_multimodal_payload_metrics=lambda metrics: None)


def load_nemo_rl(source, node):
    source = Path(source).resolve()
    if not (source / "nemo_rl" / "environments" / "nemo_gym.py").is_file():
        raise SystemExit(f"NeMo RL's source is not at {source} (see ../shared/peers/nemo-rl/NOTICE)")
    install_stand_ins(node)
    sys.path.insert(0, str(source))
    modules = {}
    for name in ["nemo_rl.environments.nemo_gym", "nemo_rl.experience.rollouts", "nemo_rl.experience.failures"]:
        modules[name.rsplit(".", 1)[1]] = importlib.import_module(name)
    for module in modules.values():
        assert str(source) in module.__file__, f"{module.__name__} loaded from {module.__file__}, not {source}"
    return types.SimpleNamespace(**modules)


# ---------------------------------------------------------------------------------------------
# Inside: stubs, Gym and Parley on the node's address; NeMo RL collects; the checks.
# ---------------------------------------------------------------------------------------------


class Stub:
    def __init__(self, parley, node, *flags):
        self.process = subprocess.Popen([parley, "stub", "--host", node, "--port", "0", "--threads", "1", *flags],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith(f"http://{node}:"), f"stub banner: {self.url!r}"

    def requests(self):
        base = self.url.removesuffix("/v1")
        with urllib.request.urlopen(f"{base}/stub/stats", timeout=10) as answer:
            return json.load(answer)["requests"]

    def stop(self):
        self.process.kill()
        self.process.wait()


def start_ray_head(node, scratch):
    """A Ray head on the node, as a NeMo RL job has, when NeMo Gym's own servers need one.

    NeMo RL passes its Ray cluster's address to Gym (`ray_head_node_address`); Gym 0.7.0's
    `legacy_agent` relays join that cluster at start-up (0.5.1 starts no Python server of its
    own here: Parley is the only one). This process keeps its stand-in Ray: the head's address is
    the one the stand-in reports. The head's processes stay in the namespace, which is emptied
    when the run ends.
    """
    import nemo_gym.global_config as gym_config

    if not hasattr(gym_config, "ENVIRONMENT_SERVER_TYPE_KEY_NAME"):
        return None
    temp = scratch or tempfile.mkdtemp(prefix="pnrl")
    started = time.monotonic()
    subprocess.run([str(Path(sys.executable).parent / "ray"), "start", "--head", "--node-ip-address", node,
                    "--port", "6379", "--num-cpus", "1", "--include-dashboard=false", "--disable-usage-stats",
                    "--temp-dir", temp], check=True, capture_output=True, env={**os.environ,
                                                                              "RAY_USAGE_STATS_ENABLED": "0"})
    return round(time.monotonic() - started, 1)


class Checks:
    def __init__(self):
        self.failures = []
        self.cases = {}

    def check(self, case, condition, message):
        if not condition:
            self.failures.append(f"{case}: {message}")
        return condition

    def error(self, case, error):
        text = f"{type(error).__name__}: {error}"
        self.failures.append(f"{case}: {text[:3000]}")
        self.cases.setdefault(case, {})["error"] = text[:3000]
        traceback.print_exc(file=sys.stderr)


def row(agent, task_index, rollout_index, **fields):
    body = {"responses_create_params": {"input": fields.pop("input", [])}, "agent_ref": {
        "type": "responses_api_agents", "name": agent}, "_ng_task_index": task_index,
        "_ng_rollout_index": rollout_index}
    body.update(fields)
    return body


def grpo(agent, prompts, copies, first_index, make):
    """`prompts` x `copies` rows, each prompt's copies together with one `_ng_task_index`."""
    return [row(agent, first_index + p, c, **make(p)) for p in range(prompts) for c in range(copies)]


def multi_step_tasks(parley, count):
    """`parley tasks multi-step` rows (the stub reports [0]; they expect other values)."""
    out = Path(f"tasks-{count}.jsonl")
    subprocess.run([parley, "tasks", "multi-step", "--count", str(count), "--out", str(out)], check=True,
                   capture_output=True)
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def generation_config():
    return {"temperature": 1.0, "top_p": 1.0, "top_k": None, "max_new_tokens": 512, "stop_strings": None,
            "stop_token_ids": None, "vllm_cfg": {"max_model_len": 65536}}


async def collect(nrl, actor, rows, copies, returned):
    """NeMo RL's GRPO rollout of `rows` (groups of `copies`); what Gym returned goes in `returned`."""
    rollouts = nrl.rollouts
    config = generation_config()
    policy = types.SimpleNamespace(cfg=config)
    batch = BatchedDataDict({"extra_env_info": rows, "loss_multiplier": [1.0] * len(rows)})
    def tap(item):
        rowidx, result, _ = item
        full = json.loads(json.dumps(result["full_result"]))
        full["_trainable_turns"] = sum(1 for m in result["message_log"] if m["role"] == "assistant")
        returned.append((rowidx, full))

    nrl.nemo_gym.NemoGym.tap = tap
    groups = []
    async for group in rollouts.run_async_nemo_gym_rollout(
        policy_generation=policy, input_batch=batch, tokenizer=Tokenizer(), task_to_env={"nemo_gym": actor},
        generation_config=config, num_generations=copies, log_full_result_tables=True,
    ):
        groups.append(group)
    return groups


# One event loop for every batch: Gym's aiohttp client belongs to the loop it was made in.
LOOP = asyncio.new_event_loop()


def run_batch(nrl, actor, rows, copies):
    returned = []
    groups = LOOP.run_until_complete(collect(nrl, actor, rows, copies, returned))
    return groups, returned


def agent_turns(output):
    """The agent's turns in a Responses output: runs of its reasoning, function calls and messages."""
    turns, inside = 0, False
    for item in output:
        agents = item.get("type") in ("reasoning", "function_call") or (
            item.get("type") == "message" and item.get("role") == "assistant")
        turns += agents and not inside
        inside = agents
    return turns


def check_rows_came_back(checks, case, rows, returned, expect_tokens=True):
    """Every row once, its indices as sent, token fields on its agent turns."""
    checks.check(case, len(returned) == len(rows), f"{len(returned)} results for {len(rows)} rows")
    for rowidx, result in returned:
        sent = rows[rowidx]
        for key in ("_ng_task_index", "_ng_rollout_index"):
            checks.check(case, result.get(key) == sent[key],
                         f"row {rowidx}: {key} came back {result.get(key)!r}, sent {sent[key]!r}")
        # NeMo RL's contiguity assertion held (post-processing ran); Parley also holds back the
        # tokens of a turn whose prompt does not continue the last one, so every agent turn must
        # have come back trainable.
        checks.check(case, "_parley_token_contiguity" not in result,
                     f"row {rowidx}: Parley held tokens back: {result.get('_parley_token_contiguity')}")
        turns = agent_turns(result["response"]["output"])
        checks.check(case, result["_trainable_turns"] == turns,
                     f"row {rowidx}: {result['_trainable_turns']} of {turns} agent turns trainable")
        instance = result.get("instance_config") or {}
        checks.check(case, isinstance(instance, dict), f"row {rowidx}: instance_config is not an object: {instance!r}")


def inside(args):
    node = args.inside
    if args.scratch:
        # Ray keeps state in ~/.ray (an auth token another Ray on this machine may have left, which
        # the head started here would then refuse) and in /tmp/ray: both in this run's own folder.
        home = Path(args.scratch) / "home"
        home.mkdir(exist_ok=True)
        os.environ["HOME"], os.environ["RAY_TMPDIR"] = str(home), str(Path(args.scratch) / "ray")
    checks = Checks()
    summary = {"node_address": node, "cases": checks.cases, "failures": checks.failures}
    nrl = load_nemo_rl(args.nemo_rl, node)
    import nemo_gym

    try:
        from importlib.metadata import version

        summary["nemo_gym"] = version("nemo-gym")
    except Exception:
        summary["nemo_gym"] = getattr(nemo_gym, "__version__", "?")
    work = Path(args.work or tempfile.mkdtemp(prefix="parley-nemo-rl-"))
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)  # the trainer's working directory, where Gym is started from
    tau2 = Path(args.tau2_data).resolve()
    source_dbs = set(INTEGRATION.rglob("*.db"))

    ranks = [Stub(args.parley, node, "--token-ids") for _ in range(RANKS)]
    user = Stub(args.parley, node, "--token-ids", "--user-turns", "2")
    own_policy = Stub(args.parley, node, "--token-ids")
    failing = Stub(args.parley, node, "--server-error", "1")
    stubs = [*ranks, user, own_policy, failing]
    actor = None
    try:
        # Gym's servers share this venv (Gym's `skip_venv_if_present`), as a prebuilt image's do.
        venvs = work / "venvs"
        for server in ["responses_api_agents/parley", "environment_servers/legacy_agent"]:
            (venvs / server).mkdir(parents=True, exist_ok=True)
            link = venvs / server / ".venv"
            if not link.exists():
                link.symlink_to(sys.prefix)
        os.environ["NEMO_GYM_EXTRA_ROOTS"] = str(INTEGRATION)
        os.environ["PARLEY_BIN"] = str(Path(args.parley).resolve())
        os.environ["NEMO_GYM_VENV_DIR"] = str(venvs)  # read by spinup_nemo_gym_actor as uv_venv_dir
        os.environ["PATH"] = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"

        def parley_agent(*parley_args):
            return {"responses_api_agents": {"parley": {"entrypoint": "app.py", "trusted_network": True,
                                                        "parley_args": list(parley_args)}}}

        # The user's `env.nemo_gym`: the shipped config (multi-step, as shipped) and two more
        # instances of the same integration.
        env_config = {"nemo_gym": {
            "config_paths": [str(SHIPPED_CONFIG)],
            "skip_venv_if_present": True,
            "parley_tau2": parley_agent("--env", "tau2:airline", "--data-dir", str(tau2), "--user", "llm",
                                        "--user-base-url", user.url, "--token-ids", "--db", "parley-tau2.db"),
            "parley_reward": parley_agent("--env", "multi-step", "--token-ids", "--db", "parley-reward.db",
                                          "--reward", "environment:weight=0.8",
                                          "--reward", "steps:budget=4,weight=-0.1"),
        }}
        summary["ray_head_seconds"] = start_ray_head(node, args.scratch)
        # A verifier that reports its own failure: Gym's equivalence_llm_judge, started by Parley,
        # whose judge answers 500. Gym's judge failsafe (0.7.0; 0.5.1's verify raises instead)
        # answers mask_sample, which must reach NeMo RL as instance_config.mask_sample.
        judge = importlib.import_module("nemo_gym.judge")
        judge_failsafe = "mask_sample" in inspect.getsource(getattr(judge, "judge_failsafe", lambda: None))
        if judge_failsafe:
            equivalence = work / "equivalence.yaml"
            equivalence.write_text(
                "equivalence_llm_judge:\n  resources_servers:\n    equivalence_llm_judge:\n      entrypoint: app.py\n"
                "      judge_model_server: {type: responses_api_models, name: policy_model}\n"
                "      judge_responses_create_params: {input: []}\n"
                "      judge_prompt_template_fpath: prompt_templates/equivalence_llm_judge.txt\n")
            env_config["nemo_gym"]["parley_judge"] = parley_agent(
                "--env", "nemo-gym", "--config", str(equivalence), "--config",
                "responses_api_models/openai_model/configs/openai_model.yaml", "--gym-venv", sys.prefix,
                "--server-name", "equivalence_llm_judge", "--judge-base-url", failing.url, "--token-ids",
                "--db", "parley-judge.db")
        started = time.monotonic()
        actor = nrl.nemo_gym.spinup_nemo_gym_actor(
            env_config, [s.url for s in ranks], "stub-model", tokenizer=Tokenizer(), enable_router_replay=False,
            routed_experts_dtype="int16", use_fastokens=False)
        summary["spinup_seconds"] = round(time.monotonic() - started, 1)
        gym = actor._instance
        summary["default_host"] = gym.node_ip
        checks.check("spinup", gym.node_ip == node, f"the node address NeMo RL read is {gym.node_ip}, not {node}")

        def calls():
            return [s.requests() for s in ranks]

        # A GRPO batch of multi-step tasks on the shipped config: 8 prompts x 4 copies.
        case = "grpo_multi_step"
        try:
            tasks = multi_step_tasks(args.parley, 8)
            rows = grpo("parley_agent", 8, 4, 100, lambda p: {k: v for k, v in tasks[p].items()
                                                             if not k.startswith("_ng_")})
            before = calls()
            groups, returned = run_batch(nrl, actor, rows, 4)
            spread = [a - b for a, b in zip(calls(), before)]
            check_rows_came_back(checks, case, rows, returned)
            checks.check(case, len(groups) == 8, f"{len(groups)} prompt groups, not 8")
            checks.check(case, sorted(g.task_index for g in groups) == list(range(100, 108)),
                         f"group task indices {sorted(g.task_index for g in groups)}")
            masks = [bool(m) for g in groups for m in g.final_batch["mask_sample"]]
            checks.check(case, not any(masks), f"no sample masked: {masks}")
            checks.cases[case] = {"sessions": len(rows), "calls_per_rank": spread,
                                  "rewards": [r["reward"] for _, r in returned]}
            checks.check(case, min(spread) > 0, f"every rank served agent calls: {spread}")
            even = sum(spread) / len(spread)
            checks.check(case, min(spread) >= 0.5 * even,
                         f"calls spread roughly evenly over {RANKS} ranks for {len(rows)} sessions: {spread}")
            checks.check(case, not (set(INTEGRATION.rglob("*.db")) - source_dbs),
                         f"no database written into the source tree: {set(INTEGRATION.rglob('*.db')) - source_dbs}")
            checks.check(case, (work / "parley-serve.db").is_file(),
                         "the shipped config's --db parley-serve.db is in the folder Gym was started from")
        except Exception as error:  # noqa: BLE001 - every case reports, the others still run
            checks.error(case, error)

        # tau2 airline, the simulated user an LLM (a stub of its own): 10 tasks x 3 copies.
        case = "tau2_airline_llm_user"
        try:
            rows = grpo("parley_tau2", 10, 3, 0, lambda p: {"id": str(p)})
            before = calls()
            user_before = user.requests()
            groups, returned = run_batch(nrl, actor, rows, 3)
            spread = [a - b for a, b in zip(calls(), before)]
            check_rows_came_back(checks, case, rows, returned)
            turns = [sum(1 for i in r["response"]["output"] if i.get("role") == "user") for _, r in returned]
            checks.cases[case] = {"sessions": len(rows), "calls_per_rank": spread,
                                  "user_calls": user.requests() - user_before, "user_turns": turns}
            checks.check(case, all(t >= 2 for t in turns), f"multi-turn conversations: user turns {turns}")
            checks.check(case, min(spread) > 0, f"every rank served agent calls: {spread}")
            even = sum(spread) / len(spread)
            checks.check(case, min(spread) >= 0.5 * even,
                         f"calls spread roughly evenly over {RANKS} ranks for {len(rows)} sessions: {spread}")
        except Exception as error:  # noqa: BLE001
            checks.error(case, error)

        # A composite reward: reward_components become GDPO's reward/<name> columns, and NeMo RL
        # checks that they sum to the reward (inside _postprocess_single_nemo_gym_group).
        case = "composite_reward"
        try:
            tasks = multi_step_tasks(args.parley, 2)
            tasks[0]["expected_synonym_values"] = [0]  # what the stub reports: this one scores 1
            rows = grpo("parley_reward", 2, 2, 200, lambda p: {k: v for k, v in tasks[p].items()
                                                              if not k.startswith("_ng_")})
            groups, returned = run_batch(nrl, actor, rows, 2)
            check_rows_came_back(checks, case, rows, returned)
            columns = sorted({k for g in groups for k in g.final_batch if k.startswith("reward/")})
            components = [r.get("reward_components") for _, r in returned]
            checks.cases[case] = {"gdpo_columns": columns, "reward_components": components}
            checks.check(case, all(isinstance(c, dict) and c for c in components),
                         f"every result carries reward_components: {components}")
            checks.check(case, "reward/environment" in columns and "reward/steps" in columns,
                         f"GDPO's columns reward/environment and reward/steps: {columns}")
            nrl.nemo_gym.validate_reward_components_match_scalar([r for _, r in returned])
        except Exception as error:  # noqa: BLE001
            checks.error(case, error)

        # A row that names its own policy (`policy_base_url`): still trainable, on that policy only.
        case = "row_policy_base_url"
        try:
            task = {k: v for k, v in multi_step_tasks(args.parley, 1)[0].items() if not k.startswith("_ng_")}
            rows = grpo("parley_agent", 1, 2, 300, lambda p: {**task, "policy_base_url": own_policy.url})
            before, own_before = calls(), own_policy.requests()
            groups, returned = run_batch(nrl, actor, rows, 2)
            check_rows_came_back(checks, case, rows, returned)
            own_calls = own_policy.requests() - own_before
            rank_calls = [a - b for a, b in zip(calls(), before)]
            checks.cases[case] = {"own_policy_calls": own_calls, "rank_calls": rank_calls}
            checks.check(case, own_calls > 0 and sum(rank_calls) == 0,
                         f"the row's own policy served it ({own_calls} calls), no rank did ({rank_calls})")
        except Exception as error:  # noqa: BLE001
            checks.error(case, error)

        # Failures, each its own rollout (a failed /run ends NeMo RL's whole batch): a policy that
        # answers 500 is the infrastructure's fault, a malformed row the data's.
        failures = nrl.failures
        for case, bad_row, expected in [
            # A row Parley can run (its expected values given), whose policy answers 500.
            ("policy_answers_500", row("parley_agent", 400, 0, input="Find the synonyms.",
                                       expected_synonym_values=[407], policy_base_url=failing.url),
             failures.FailureClass.INFRA),
            ("malformed_row", row("parley_agent", 401, 0, input=[{"role": "wizard", "content": "Hi."}]),
             failures.FailureClass.DATA),
        ]:
            try:
                try:
                    run_batch(nrl, actor, [bad_row], 1)
                except Exception as error:  # what reaches NeMo RL's retry policy
                    kind = failures.classify_rollout_failure(error)
                    checks.cases[case] = {"class": kind.value, "error": f"{type(error).__name__}: {error}"[:500]}
                    checks.check(case, kind == expected,
                                 f"NeMo RL classifies it {kind.value}, not {expected.value}: {error}")
                else:
                    checks.check(case, False, "the rollout succeeded; it should have failed")
            except Exception as error:  # noqa: BLE001
                checks.error(case, error)

        case = "judge_failed_mask_sample"
        if judge_failsafe:
            try:
                subprocess.run([args.parley, "tasks", "arithmetic", "--count", "1", "--out", "arithmetic.jsonl"],
                               check=True, capture_output=True)
                task = json.loads(Path("arithmetic.jsonl").read_text().splitlines()[0])
                rows = grpo("parley_judge", 1, 2, 500, lambda p: {k: v for k, v in task.items()
                                                                 if not k.startswith("_ng_")})
                groups, returned = run_batch(nrl, actor, rows, 2)
                check_rows_came_back(checks, case, rows, returned)
                masks = [bool(m) for g in groups for m in g.final_batch["mask_sample"]]
                instance = [(r.get("instance_config") or {}).get("mask_sample") for _, r in returned]
                checks.cases[case] = {"mask_sample": masks, "instance_config_mask_sample": instance,
                                      "rewards": [r.get("reward") for _, r in returned]}
                checks.check(case, masks == [True, True],
                             f"NeMo RL's _extract_mask_sample_flags masks both samples: {masks}")
            except Exception as error:  # noqa: BLE001
                checks.error(case, error)
        else:
            checks.cases[case] = {"skipped": "this NeMo Gym's judge raises instead of answering mask_sample"}
    except Exception as error:  # noqa: BLE001
        checks.error("setup", error)
    finally:
        client = getattr(sys.modules.get("nemo_gym.server_utils"), "_GLOBAL_AIOHTTP_CLIENT", None)
        if client is not None:  # closed in the loop it belongs to, not at exit in another
            LOOP.run_until_complete(client.close())
        if actor is not None:
            try:
                actor._instance.shutdown()
            except Exception as error:  # noqa: BLE001
                checks.error("shutdown", error)
        for stub in stubs:
            stub.stop()
    summary_and_exit(summary, 1 if checks.failures else 0)


def main():
    args = arguments()
    if args.inside:
        inside(args)
    else:
        outside(args)


if __name__ == "__main__":
    main()
