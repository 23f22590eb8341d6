"""The YAML of `swiftlike rlhf --use_ray true --config job.yaml`, in ms-swift's form, as typed arguments per role.

```yaml
rlhf_type: grpo            # shared arguments: every role reads the ones that concern it
model: Qwen/Qwen2.5-7B-Instruct
use_vllm: true
colocate_groups: [[train, rollout]]   # optional: time-share devices instead of separate placement
train:                     # one group per role: its device count and its own arguments
  gpus: 4
  tuner_type: lora
rollout:
  gpus: 4
  vllm_max_model_len: 8192
teacher:                   # gkd only: standalone vLLM replicas answering top-k log-probs
  gpus: 2
  model: Qwen/Qwen2.5-14B-Instruct
```

A colocated `rollout:` group's settings are its engines' vllm_* settings, which the train role then has (its
workers run the engines), as ms-swift builds colocated engines from that group.

Everything is checked here, before Ray starts: unknown roles and arguments (named with their group), a colocate
group whose roles ask for different device counts, a teacher without gkd, and each role's arguments by the same
classes the single-process commands use (`RlhfArguments` for train, `RolloutServerArguments` for a rollout or
teacher replica), so a value that `swiftlike rlhf` or `swiftlike rollout` refuses is refused here with the same
message. The cluster's size is checked by the driver once it knows the cluster.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..utils.errors import UsageError
from .infer_args import VllmArguments
from .parser import build_parser, canonical_settings, load_config_file, parse_args, settings_to_argv
from .rlhf_args import RlhfArguments
from .rollout_args import RolloutServerArguments

ROLES = ("train", "rollout", "teacher")
# ms-swift's colocate groups that have a meaning here: rollout engines inside the train workers (weights handed over
# in memory), and an in-process teacher on the train workers.
COLOCATABLE = ({"train", "rollout"}, {"train", "teacher"}, {"train", "rollout", "teacher"})
# Top-level keys that place roles rather than configure one. `nnodes` (ms-swift's): the nodes the job expects; the
# driver checks that the cluster has them before it places anything, and Ray places the bundles across them.
PLACEMENT_KEYS = ("colocate_groups", "nnodes")
DEVICE_KEY = "gpus"
TEACHER_PLACEHOLDER = "http://teacher-replicas.ray"


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.init}


@dataclass(frozen=True)
class RoleGroup:
    """One role's group of the YAML: how many devices it takes and its own arguments."""

    name: str
    devices: int
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass
class RayJob:
    """A checked Ray job: each role's arguments, and where each role runs."""

    config_path: str
    train: RlhfArguments
    groups: dict[str, RoleGroup]
    colocate_groups: list[list[str]]
    rollout: RolloutServerArguments | None = None  # one rollout replica's arguments (separate placement)
    teacher: RolloutServerArguments | None = None  # one teacher replica's arguments (standalone teacher)
    nnodes: int | None = None  # the YAML's `nnodes:`: the cluster must have at least this many nodes

    def colocated_with_train(self, role: str) -> bool:
        return any(role in group and "train" in group for group in self.colocate_groups)

    @property
    def devices(self) -> dict[str, int]:
        """Devices per placement unit: the train role with whatever is colocated with it, and each separate role."""
        units = {"train": self.groups["train"].devices}
        for role in ("rollout", "teacher"):
            if role in self.groups and not self.colocated_with_train(role):
                units[role] = self.groups[role].devices
        return units


def split_ray_config(path: str) -> tuple[dict, dict[str, RoleGroup], list[list[str]], int | None]:
    """(shared arguments, role groups, colocate groups, nnodes) of the YAML at `path`, with the placement checked."""
    data = dict(load_config_file(path))
    colocate = data.pop("colocate_groups", None) or []
    nnodes = data.pop("nnodes", None)
    if nnodes is not None and (not isinstance(nnodes, int) or isinstance(nnodes, bool) or nnodes < 1):
        raise UsageError(f"{path}: `nnodes` must be a whole number >= 1 (the nodes the job runs on), got {nnodes!r}")
    groups: dict[str, RoleGroup] = {}
    rlhf_fields = _fields(RlhfArguments)
    for key in list(data):
        value = data[key]
        if key in ROLES:
            data.pop(key)
            groups[key] = _role_group(path, key, value)
        elif isinstance(value, dict) and key not in rlhf_fields:
            raise UsageError(f"{path}: `{key}:` is not a role; the roles are {', '.join(ROLES)} (each a group with "
                             f"`{DEVICE_KEY}:` and its own arguments)")
    if "train" not in groups:
        raise UsageError(f"{path}: no `train:` group; give it `{DEVICE_KEY}: N`, the train role's device count")
    _check_colocate_groups(path, colocate, groups)
    return data, groups, colocate, nnodes


def _role_group(path: str, name: str, value: Any) -> RoleGroup:
    if not isinstance(value, dict):
        raise UsageError(f"{path}: `{name}:` must be a group of arguments with `{DEVICE_KEY}: N`, got {value!r}")
    settings = dict(value)
    devices = settings.pop(DEVICE_KEY, None)
    if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
        raise UsageError(f"{path}: `{name}.{DEVICE_KEY}` must be a whole number >= 1 (the role's device count; CPU "
                         f"slots on a machine without a GPU), got {devices!r}")
    for key in PLACEMENT_KEYS:
        if key in settings:
            raise UsageError(f"{path}: `{name}.{key}` belongs at the top level of the YAML, not inside a role")
    return RoleGroup(name, devices, settings)


def _check_colocate_groups(path: str, colocate: Any, groups: dict[str, RoleGroup]) -> None:
    if not isinstance(colocate, list) or not all(isinstance(g, list) for g in colocate):
        raise UsageError(f"{path}: `colocate_groups` must be a list of role lists, e.g. [[train, rollout]]; got "
                         f"{colocate!r}")
    seen: set[str] = set()
    for i, group in enumerate(colocate):
        where = f"{path}: colocate_groups[{i}] {group}"
        unknown = [r for r in group if r not in ROLES]
        if unknown:
            raise UsageError(f"{where}: unknown role(s) {unknown}; the roles are {', '.join(ROLES)}")
        if len(set(group)) < 2:
            raise UsageError(f"{where}: a colocate group names at least two different roles")
        if seen & set(group):
            raise UsageError(f"{where}: role(s) {sorted(seen & set(group))} are in more than one colocate group")
        seen |= set(group)
        missing = [r for r in group if r not in groups]
        if missing:
            raise UsageError(f"{where}: no `{missing[0]}:` group with `{DEVICE_KEY}:` for role {missing[0]!r}")
        sizes = {r: groups[r].devices for r in group}
        if len(set(sizes.values())) > 1:
            raise UsageError(f"{where}: colocated roles share one set of devices, so their `{DEVICE_KEY}` must be "
                             f"equal; got {', '.join(f'{r}.{DEVICE_KEY}={n}' for r, n in sizes.items())}")
        if set(group) not in COLOCATABLE:
            raise UsageError(f"{where}: colocation is built for [train, rollout], [train, teacher] and [train, "
                             "rollout, teacher]; place the other roles separately (leave them out of "
                             "colocate_groups)")


def _check_keys(path: str, role: str, settings: dict, allowed: set[str], what: str) -> None:
    unknown = sorted(k for k in settings if k not in allowed)
    if unknown:
        raise UsageError(f"{path}: `{role}:` group: unknown argument(s) {', '.join(unknown)} for {what}")


def _arguments(cls: type, settings: dict, overrides: list[str]):
    """`cls` from a settings mapping, the command-line `overrides` last (they win)."""
    return parse_args(cls, settings_to_argv(settings) + overrides)


def load_ray_job(argv: list[str], cls: type[RlhfArguments] = RlhfArguments) -> RayJob:
    """The job described by `--config` in `argv`; the other flags of `argv` override every role's settings.
    `cls` is the train role's arguments class: RlhfArguments, or MegatronRlhfArguments (`swiftlike megatron
    rlhf`), which also takes Megatron-LM's names and gets its data-parallel size from `train.gpus`."""
    path, overrides = _config_flag(argv, cls)
    shared, groups, colocate, nnodes = split_ray_config(path)
    shared = canonical_settings(cls, shared, f"{path} (top level)")  # the aliases a command line takes
    groups["train"] = dataclasses.replace(groups["train"], settings=canonical_settings(
        cls, groups["train"].settings, f"{path}: `train:` group"))
    rlhf_fields = _fields(cls)
    _check_keys(path, "(top level)", shared, rlhf_fields, "swiftlike rlhf")
    _check_keys(path, "train", groups["train"].settings, rlhf_fields, "the train role (swiftlike rlhf's arguments)")
    placement = RayJob(path, None, groups, colocate)  # type: ignore[arg-type]  # placement only, until parsed
    engine = _colocated_engine_settings(placement) if placement.colocated_with_train("rollout") else {}
    train_settings = {**shared, **groups["train"].settings, **engine, **_train_placement(placement, shared)}
    if "data_parallel_size" in rlhf_fields and train_settings.get("data_parallel_size") is None:
        per_replica = (int(train_settings.get("tensor_model_parallel_size", 1))
                       * int(train_settings.get("pipeline_model_parallel_size", 1)))
        train_settings["data_parallel_size"] = max(1, groups["train"].devices // per_replica)
    job = RayJob(path, _arguments(cls, train_settings, overrides), groups, colocate, nnodes=nnodes)
    if "rollout" in groups and not job.colocated_with_train("rollout"):
        settings = _replica_settings(job, shared, "rollout")
        settings["api_key"] = _replica_key(path, "rollout", settings.get("api_key"), "vllm_server_api_key",
                                           job.train.vllm_server_api_key)
        job.rollout = _arguments(RolloutServerArguments, settings,
                                 _known_overrides(overrides, _fields(RolloutServerArguments)))
    if "teacher" in groups and not job.colocated_with_train("teacher"):
        settings = _replica_settings(job, shared, "teacher")
        settings["max_logprobs"] = max(int(settings.get("max_logprobs", 0)), job.train.gkd_logits_topk)
        settings["vllm_enable_lora"] = False
        settings["api_key"] = _replica_key(path, "teacher", settings.get("api_key"), "teacher_model_server_api_key",
                                           job.train.teacher_model_server_api_key)
        job.teacher = _arguments(RolloutServerArguments, settings,
                                 _known_overrides(overrides, _fields(RolloutServerArguments) - {"model"}))
    return job


def _replica_key(path: str, role: str, group_key: str | None, train_flag: str, train_key: str | None) -> str | None:
    """The API key a role's replicas are started with when the YAML gives one (the group's `api_key`, or the
    train role's key for them); None lets the driver generate one per job."""
    if group_key and train_key and group_key != train_key:
        raise UsageError(f"{path}: `{role}.api_key` and `{train_flag}` differ; the train role sends the key its "
                         f"{role} replicas check, so give one of them (or neither: the job generates one)")
    return group_key or train_key


def _colocated_engine_settings(job: RayJob) -> dict:
    """A colocated `rollout:` group's own settings. Its engines run inside the train workers, so its settings
    (ms-swift builds the rollout engines from the shared settings, then the rollout group's) are the train role's
    vllm_* engine settings; anything else there is refused, and so is the train group giving one of them another
    value (one engine, one value)."""
    path, rollout, train = job.config_path, job.groups["rollout"].settings, job.groups["train"].settings
    engine_fields = _fields(VllmArguments)
    _check_keys(path, "rollout", rollout, engine_fields, "a rollout engine colocated with the train role, which "
                f"takes the engine's settings only: {', '.join(sorted(engine_fields))}")
    for key, value in rollout.items():
        if key in train and train[key] != value:
            raise UsageError(f"{path}: `{key}` is {train[key]!r} in `train:` and {value!r} in `rollout:`; the "
                             "colocated engine has one value: give it in one group")
    return dict(rollout)


def _train_placement(job: RayJob, shared: dict) -> dict:
    """The train role's arguments that follow from the placement: where its completions come from (engines
    inside the workers, or rollout replicas), and its teacher (in-process, or replicas)."""
    path, groups = job.config_path, job.groups
    out: dict[str, Any] = {}
    use_vllm = bool({**shared, **groups["train"].settings}.get("use_vllm", False))
    rlhf_type = {**shared, **groups["train"].settings}.get("rlhf_type")
    if rlhf_type not in ("grpo", "gkd") and ("rollout" in groups or "teacher" in groups):
        role = "rollout" if "rollout" in groups else "teacher"
        raise UsageError(f"{path}: a `{role}:` group serves grpo and gkd; rlhf_type {rlhf_type} trains on the "
                         "dataset's answers with the train role alone: remove the group (and use_vllm)")
    if "rollout" in groups:
        if not use_vllm:
            raise UsageError(f"{path}: a `rollout:` group places vLLM engines; set use_vllm: true (without it the "
                             "train workers generate with the training model itself)")
        out["vllm_mode"] = "colocate" if job.colocated_with_train("rollout") else "server"
    elif use_vllm:
        raise UsageError(f"{path}: use_vllm: true needs a `rollout:` group with `{DEVICE_KEY}:` (and colocate_groups: "
                         "[[train, rollout]] to run the engines inside the train workers)")
    if "teacher" not in groups:
        return out
    if rlhf_type != "gkd":
        raise UsageError(f"{path}: a `teacher:` group is for rlhf_type: gkd (on-policy distillation); this job's "
                         f"rlhf_type is {rlhf_type}")
    teacher_model = groups["teacher"].settings.get("model")
    if job.colocated_with_train("teacher"):
        if teacher_model:  # the in-process teacher, on the train workers' devices
            out["teacher_model"] = teacher_model
        return out
    if shared.get("teacher_model") or groups["train"].settings.get("teacher_model"):
        raise UsageError(f"{path}: a standalone `teacher:` group serves the teacher itself; remove teacher_model (it "
                         "would load a second, in-process teacher on the train workers)")
    if not teacher_model:
        raise UsageError(f"{path}: `teacher:` needs `model:`, the teacher checkpoint its replicas serve")
    if {**shared, **groups["train"].settings}.get("gkd_logits_topk") is None:
        raise UsageError(f"{path}: standalone teacher replicas answer top-k log-probs only; set gkd_logits_topk: K")
    # The replicas' addresses are known once they run; until then the train role is checked as a served-teacher
    # run against a placeholder, which the driver replaces.
    out["teacher_model_server"] = [TEACHER_PLACEHOLDER]
    return out


def uses_ray(argv: list[str]) -> bool:
    """`--use_ray true` on the command line, or `use_ray: true` at the top of the --config YAML."""
    from .parser import str2bool
    if "--use_ray" in argv and argv.index("--use_ray") + 1 < len(argv):
        return str2bool(argv[argv.index("--use_ray") + 1])
    if "--config" in argv and argv.index("--config") + 1 < len(argv):
        return bool(load_config_file(argv[argv.index("--config") + 1]).get("use_ray", False))
    return False


def _config_flag(argv: list[str], cls: type) -> tuple[str, list[str]]:
    if "--config" not in argv or argv.index("--config") + 1 >= len(argv):
        raise UsageError("--use_ray true takes the job from a YAML: add --config job.yaml (examples/ray/ has some)")
    i = argv.index("--config")
    overrides = argv[:i] + argv[i + 2:]
    build_parser(cls, f"swiftlike {cls.command}").parse_args(overrides)  # bad flags fail here, by argparse
    return argv[i + 1], overrides


def _replica_settings(job: RayJob, shared: dict, role: str) -> dict:
    """What one vLLM replica of `role` is started with: the shared arguments a rollout server has, the train
    role's LoRA and length settings (so the replica accepts its adapters and sequences), then the group's own."""
    server_fields = _fields(RolloutServerArguments)
    group = job.groups[role]
    _check_keys(job.config_path, role, group.settings, server_fields, f"a {role} replica (swiftlike rollout's "
                "arguments)")
    train = job.train
    settings = {k: v for k, v in shared.items() if k in server_fields}
    settings.update(vllm_enable_lora=train.vllm_enable_lora, vllm_max_lora_rank=train.vllm_max_lora_rank,
                    vllm_max_model_len=train.vllm_max_model_len or (train.max_length or 1024)
                    + train.max_completion_length, torch_dtype=train.torch_dtype)
    settings.update(group.settings)
    return settings


def _known_overrides(overrides: list[str], names: set[str]) -> list[str]:
    """The command-line flags (with their values) that a replica has too."""
    out, keep = [], False
    for token in overrides:
        if token.startswith("--"):
            keep = token[2:] in names
        if keep:
            out.append(token)
    return out
