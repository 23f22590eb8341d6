"""The typed RL option groups (rl/core/options.py): frozen, self-validating, the one declaration of the flat
rlhf flags, built once by RlhfArguments, and the source of the per-type refusals."""
import dataclasses
import typing

import pytest
from cli import run_cli
from model_ids import TINY

from swiftlike.arguments import parse_args
from swiftlike.arguments.rlhf_args import (GkdArguments, GrpoArguments, MultiTurnArguments, PolicyTrainingArguments,
                                           PreferenceArguments, RayArguments, RewardArguments, RlhfArguments,
                                           RolloutPlacementArguments, CompletionArguments, TeacherArguments)
from swiftlike.arguments.rollout_args import SERVER_MULTI_TURN, MultiTurnServerArguments, RolloutServerArguments
from swiftlike.infer.engine.vllm_engine import VllmOptions
from swiftlike.rl.core import options
from swiftlike.rl.core.ppo_options import PPO
from swiftlike.rl.core.options import (GkdOptions, GrpoOptions, MultiTurnOptions, PolicyTrainingOptions,
                                       PreferenceOptions, RayOptions, RewardOptions, RolloutOptions, SamplingOptions,
                                       TeacherOptions, flags_not_read_by, flags_only_for)
from swiftlike.utils.errors import NotBuiltError

GENERATED = {PolicyTrainingOptions: PolicyTrainingArguments, SamplingOptions: CompletionArguments,
             GrpoOptions: GrpoArguments, RewardOptions: RewardArguments, RolloutOptions: RolloutPlacementArguments,
             MultiTurnOptions: MultiTurnArguments, TeacherOptions: TeacherArguments, GkdOptions: GkdArguments,
             PreferenceOptions: PreferenceArguments, RayOptions: RayArguments}
# The multi-turn flags of `swiftlike rlhf` (grpo and gkd read them; a preference type refuses them).
MULTI_TURN_ONLINE = ("multi_turn_scheduler", "max_turns", "use_gym_env", "gym_env", "context_manager",
                     "vllm_server_pass_dataset")
# The hand-kept lists of arguments/rlhf_args.py before the groups (commit 29bcf24), and the flags gkd refused by hand.
OLD_PREFERENCE_ONLY = ("ref_model", "ref_adapters", "loss_weights", "rpo_alpha", "ld_alpha", "center_rewards_coefficient")
OLD_GKD_ONLY = ("teacher_model", "teacher_adapters", "teacher_model_type", "teacher_model_server", "gkd_logits_topk",
                "offload_teacher_model", "seq_kd", "teacher_model_server_api_key")
OLD_GKD_REFUSES_OF_GRPO = ("reward_funcs", "reward_model", "reward_weights", "dynamic_sample", "overlong_filter",
                           "async_generate", "max_staleness", "rollout_importance_sampling_mode",
                           "off_policy_sequence_mask_delta")


def grpo(*argv):
    return parse_args(RlhfArguments, ["--rlhf_type", "grpo", "--model", TINY, "--dataset", "d", "--reward_funcs",
                                      "format", "--num_generations", "2", "--per_device_train_batch_size", "2",
                                      *map(str, argv)])


def gkd(*argv):
    return parse_args(RlhfArguments, ["--rlhf_type", "gkd", "--model", TINY, "--dataset", "d", "--teacher_model",
                                      TINY, *map(str, argv)])


def valid(cls):
    """An instance of each group with its defaults, plus what a group needs to be valid at all."""
    return cls(**{RewardOptions: {"reward_funcs": ["format"]},
                  GkdOptions: {"teacher": TeacherOptions(teacher_model="t")}}.get(cls, {}))


def fields_of(group) -> dict:
    """A group's fields by name, nested groups kept as they are (dataclasses.asdict would turn them into dicts)."""
    return {f.name: getattr(group, f.name) for f in dataclasses.fields(group)}


@pytest.mark.parametrize("cls", list(GENERATED) + [VllmOptions])
def test_each_group_is_frozen_and_changes_only_by_replace(cls):
    group = valid(cls)
    name = dataclasses.fields(cls)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(group, name, getattr(group, name))
    assert dataclasses.replace(group) == group


@pytest.mark.parametrize("cls, change, message", [
    (GrpoOptions, {"num_generations": 1}, "--num_generations must be >= 2"),
    (GrpoOptions, {"loss_type": "sigmoid"}, "--loss_type sigmoid: grpo takes one of"),
    (GrpoOptions, {"scale_rewards": "median"}, "invalid choice for --scale_rewards"),
    (GrpoOptions, {"max_resample_times": -1}, "--max_resample_times must be >= 0"),
    (SamplingOptions, {"temperature": 0.0}, "--temperature must be > 0"),
    (SamplingOptions, {"top_p": 1.5}, r"--top_p must be in \(0, 1\]"),
    (RewardOptions, {"reward_weights": [1.0, 2.0]}, "one weight per reward"),
    (RolloutOptions, {"async_generate": True}, "needs --use_vllm true --vllm_mode server"),
    (RolloutOptions, {"weight_sync": "delta"}, "--weight_sync delta .* needs --use_vllm true"),
    (RolloutOptions, {"weight_sync": "bits"}, "invalid choice for --weight_sync"),
    (RolloutOptions, {"use_vllm": True, "vllm_mode": "server", "vllm_server_timeout": 0}, "--vllm_server_timeout"),
    (RolloutOptions, {"use_vllm": True, "sleep_level": 2, "vllm_enable_lora": True}, "--sleep_level 2"),
    (RolloutOptions, {"max_staleness": -1}, "--max_staleness must be >= 0"),
    (GkdOptions, {"gkd_logits_topk": 0}, "--gkd_logits_topk must be >= 1"),
    (GkdOptions, {"lmbda": 2.0}, r"--lmbda must be in \[0, 1\]"),
    (GkdOptions, {"teacher": TeacherOptions()}, "--rlhf_type gkd needs a teacher"),
    (GkdOptions, {"teacher": TeacherOptions(teacher_model_server=["http://h:1"])}, "needs --gkd_logits_topk K"),
    (TeacherOptions, {"teacher_model": "t", "teacher_model_server": ["http://h:1"]}, "both given; choose one"),
    (TeacherOptions, {"teacher_model_server": ["h:1"]}, "must be http\\(s\\) URLs"),
    (TeacherOptions, {"teacher_model_server_api_key": "k"}, "this run has no served teacher"),
    (TeacherOptions, {"teacher_model_server": ["http://h:1"], "teacher_adapters": ["a"]}, "describe an in-process"),
    (PreferenceOptions, {"label_smoothing": 0.5}, r"--label_smoothing must be in \[0, 0.5\)"),
    (PreferenceOptions, {"rlhf_type": "cpo", "loss_type": ["kto"]}, "--loss_type kto: not a cpo loss"),
    (RayOptions, {"train_backend": "jax"}, "invalid choice for --train_backend"),
    (MultiTurnOptions, {"multi_turn_scheduler": "s", "max_turns": 0}, "--max_turns must be >= 1"),
    (MultiTurnOptions, {"multi_turn_scheduler": "s", "completion_length_limit_scope": "all"},
     "invalid choice for --completion_length_limit_scope"),
    (MultiTurnOptions, {"context_manager": "summary"}, "--context_manager was removed .* MultiTurnScheduler .* "
                                                       "--multi_turn_scheduler"),
    (MultiTurnOptions, {"max_turns": 3}, "--max_turns: multi-turn settings, but no --multi_turn_scheduler"),
    (MultiTurnOptions, {"gym_env": "math_env"}, "--gym_env: .* --multi_turn_scheduler gym_scheduler"),
    (MultiTurnOptions, {"completion_length_limit_scope": "total"}, "--completion_length_limit_scope total: "),
    (RewardOptions, {"reward_weights": [1.0, 2.0], "env_reward": True, "reward_funcs": []}, "one weight per reward"),
    (VllmOptions, {"gpu_memory_utilization": 1.5}, "--vllm_gpu_memory_utilization"),
])
def test_bad_values_name_the_flag_when_built_and_when_replaced(cls, change, message):
    with pytest.raises(ValueError, match=message):
        cls(**{**fields_of(valid(cls)), **change})
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(valid(cls), **change)


@pytest.mark.parametrize("options_cls", list(GENERATED))
def test_generated_flags_are_the_option_fields(options_cls):
    """Name, type, default, help, aliases and only= of each flag are the option field's."""
    flags = GENERATED[options_cls]
    flag_fields = {f.name: f for f in dataclasses.fields(flags)}
    option_hints, flag_hints = typing.get_type_hints(options_cls), typing.get_type_hints(flags)
    settings = [f for f in dataclasses.fields(options_cls) if f.metadata.get("help")]
    assert list(flag_fields) == [f.name for f in settings]
    for f in settings:
        flag = flag_fields[f.name]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        flag_default = flag.default_factory() if flag.default_factory is not dataclasses.MISSING else flag.default
        assert (flag_hints[f.name], flag_default, dict(flag.metadata)) == (option_hints[f.name], default,
                                                                          dict(f.metadata))
    assert all(f.name in {g.name for g in dataclasses.fields(RlhfArguments)} for f in settings)


def test_grpo_builders_round_trip_the_flags():
    args = grpo("--epsilon_high", 0.28, "--loss_type", "dapo", "--beta", 0.0, "--vllm_server_port", 8001, 8002,
                "--use_vllm", "true", "--vllm_mode", "server", "--weight_sync", "delta", "--async_generate", "true",
                "--cosine_max_len", 100, "--temperature", 0.7, "--max_completion_length", 64)
    for group in (args.grpo_options(), args.rollout_options(), args.reward_options(), args.sampling_options(),
                  args.policy_training_options(), args.ray_options()):
        for f in dataclasses.fields(group):
            if f.metadata.get("help"):
                assert getattr(group, f.name) == getattr(args, f.name), f.name
    grpo_group, rollout = args.grpo_options(), args.rollout_options()
    assert (grpo_group.loss_type, grpo_group.beta, grpo_group.epsilon_high) == ("dapo", 0.0, 0.28)
    assert (rollout.weight_sync, rollout.max_staleness) == ("delta", 1)  # resolved once, for the batch layout
    assert rollout.server_addresses() == [("127.0.0.1", 8001), ("127.0.0.1", 8002)]
    assert args.sampling_options().temperature == 0.7
    assert args.reward_options().function_params(64)["cosine_max_len"] == 100
    assert args.grpo_options() is grpo_group  # built once, after the checks
    multi = grpo("--multi_turn_scheduler", "tool_call_scheduler", "--max_turns", 3, "--completion_length_limit_scope",
                 "total", "--agent_template", "hermes").multi_turn_options()
    assert (multi.multi_turn_scheduler, multi.max_turns, multi.completion_length_limit_scope, multi.use_gym_env,
            multi.enabled) == ("tool_call_scheduler", 3, "total", False, True)
    gym = grpo("--multi_turn_scheduler", "gym_scheduler", "--gym_env", "frozen_lake")
    assert gym.use_gym_env is True and gym.multi_turn_options().use_gym_env is True  # ms-swift's default
    assert gym.reward_options().env_reward
    assert not grpo().multi_turn_options().enabled and not grpo().reward_options().env_reward


def test_each_type_gets_only_its_groups():
    assert args_groups(grpo()) == {"PolicyTrainingOptions", "RayOptions", "RewardOptions", "GrpoOptions",
                                   "SamplingOptions", "RolloutOptions", "MultiTurnOptions", "TeacherOptions"}
    assert not grpo().teacher_options().given and not grpo().grpo_options().opd
    gkd_args = gkd("--gkd_logits_topk", 5, "--lmbda", 0.25)
    assert args_groups(gkd_args) == {"PolicyTrainingOptions", "RayOptions", "GkdOptions", "SamplingOptions",
                                     "RolloutOptions", "MultiTurnOptions", "TeacherOptions"}
    assert gkd_args.gkd_options().teacher is gkd_args.teacher_options()  # one typed object, shared
    assert (gkd_args.gkd_options().gkd_logits_topk, gkd_args.gkd_options().lmbda, gkd_args.gkd_options().beta) == \
        (5, 0.25, 0.5)
    dpo = RlhfArguments(model=TINY, dataset=["d"], rpo_alpha=1.0, loss_type=["sigmoid", "ipo"])
    assert args_groups(dpo) == {"PolicyTrainingOptions", "RayOptions", "PreferenceOptions"}
    assert (dpo.preference_options().rpo_alpha, dpo.preference_options().loss_type) == (1.0, ["sigmoid", "ipo"])
    with pytest.raises(ValueError, match="--rlhf_type dpo reads no GrpoOptions"):
        dpo.grpo_options()


def args_groups(args) -> set[str]:
    out = set()
    for name in ("policy_training", "ray", "reward", "grpo", "sampling", "rollout", "multi_turn", "teacher", "gkd",
                 "preference"):
        try:
            out.add(type(getattr(args, f"{name}_options")()).__name__)
        except ValueError:
            pass
    return out


def test_type_only_flags_are_derived_from_the_groups():
    """The lists once kept by hand, now read off the fields' only= metadata."""
    assert sorted(flags_only_for(options.PREFERENCE_TYPES)) == sorted(OLD_PREFERENCE_ONLY)
    # the teacher's flags, in-process and served, are grpo's too now (OPD-RL)
    opd = ("teacher_model", "teacher_adapters", "teacher_model_type", "teacher_model_server",
           "teacher_model_server_api_key")
    gkd_only = tuple(n for n in OLD_GKD_ONLY if n not in opd)
    assert sorted(flags_only_for(options.GKD)) == sorted(gkd_only)
    ppo_only = flags_only_for(PPO)
    assert {"num_ppo_epochs", "kl_coef", "cliprange", "gamma", "lam", "value_model"} <= set(ppo_only)
    refused_by_grpo = flags_not_read_by("grpo")
    assert sorted(n for names in refused_by_grpo.values() for n in names) == sorted(OLD_PREFERENCE_ONLY + gkd_only
                                                                                    + ppo_only)
    refused_by_gkd = flags_not_read_by("gkd")
    # gkd refuses what it did by hand and the GRPO-only flags added since whose default reads "unset" (the
    # others' defaults cannot tell); the reward flags are grpo's and ppo's now; --external_plugins and
    # --use_vllm are read by every type that samples
    added = ("kl_in_reward", "rollout_rs", "rollout_rs_threshold", "rollout_bypass_mode", "reward_model_server",
             "reward_model_server_api_key", "judge_model_server", "judge_model", "judge_model_server_api_key",
             "judge_prompt_template", "judge_temperature")
    assert sorted(refused_by_gkd[options.GRPO] + refused_by_gkd[options.REWARDED]) == sorted(
        OLD_GKD_REFUSES_OF_GRPO + added)
    assert sorted(refused_by_gkd[options.PREFERENCE_TYPES]) == sorted(OLD_PREFERENCE_ONLY)
    assert sorted(refused_by_gkd[PPO]) == sorted(ppo_only)
    refused_by_dpo = flags_not_read_by("dpo")
    assert sorted(refused_by_dpo[options.GKD]) == sorted(gkd_only)
    assert sorted(refused_by_dpo[options.ONLINE]) == sorted((*MULTI_TURN_ONLINE, *opd))
    assert sorted(refused_by_dpo[options.SAMPLING]) == ["external_plugins", "use_vllm"]
    # dpo refused --reward_funcs, --reward_model, --external_plugins by hand; now every flag of the types that
    # sample or are rewarded
    assert {"reward_funcs", "reward_model"} <= set(refused_by_dpo[options.REWARDED])
    # ppo refuses GRPO's and GKD's own flags, and reads the reward and sampling ones
    refused_by_ppo = flags_not_read_by("ppo")
    assert options.REWARDED not in refused_by_ppo and options.SAMPLING not in refused_by_ppo
    assert "async_generate" in refused_by_ppo[options.GRPO] and "multi_turn_scheduler" in refused_by_ppo[options.ONLINE]


@pytest.mark.parametrize("kind, flags, message", [
    ("grpo", ["--gkd_logits_topk", "4"], "--gkd_logits_topk: GKD's teacher arguments, not used by --rlhf_type grpo"),
    ("grpo", ["--rpo_alpha", "1"], "--rpo_alpha: preference-training arguments, not used by --rlhf_type grpo"),
    ("gkd", ["--teacher_model", TINY, "--dynamic_sample", "true"], "--dynamic_sample: GRPO's rollout and reward "
                                                                   "arguments, not used by --rlhf_type gkd"),
    ("dpo", ["--use_vllm", "true"], "dpo learns from the answers in the dataset"),
    ("kto", ["--gkd_logits_topk", "4"], "--gkd_logits_topk: GKD's teacher arguments, not used by --rlhf_type kto"),
    ("dpo", ["--multi_turn_scheduler", "tool_call_scheduler"], "--multi_turn_scheduler: rollout and teacher "
                                                               "arguments of grpo and gkd, not used by --rlhf_type dpo"),
])
def test_unread_flags_are_refused_naming_them(kind, flags, message):
    argv = ["--rlhf_type", kind, "--model", TINY, "--dataset", "d", *flags]
    if kind == "grpo":
        argv += ["--reward_funcs", "format", "--num_generations", "2", "--per_device_train_batch_size", "2"]
    with pytest.raises(ValueError, match=message):
        RlhfArguments(**vars_of(argv))


def vars_of(argv: list[str]) -> dict:
    """argv -> the keyword arguments parse_args would pass (without exiting the test on an error)."""
    from swiftlike.arguments.parser import build_parser
    values = vars(build_parser(RlhfArguments, "rlhf").parse_args(argv))
    values.pop("config")
    return values


def test_multi_turn_runs_on_the_megatron_backend_and_gkd_on_rollout_servers():
    """Placements once refused as not built: the arguments now build (the runs are tests/e2e's)."""
    megatron = grpo("--multi_turn_scheduler", "tool_call_scheduler", "--train_backend", "megatron", "--use_vllm",
                    "true")
    assert megatron.multi_turn_options().enabled and megatron.train_backend == "megatron"
    served = gkd("--multi_turn_scheduler", "tool_call_scheduler", "--use_vllm", "true", "--vllm_mode", "server",
                 "--external_plugins", __file__)
    assert served.rollout_options().server_mode and served.multi_turn_options().external_plugins == [__file__]


def test_multi_turn_on_servers_with_async_generate_and_the_dataset_passed(capsys):
    server = ("--use_vllm", "true", "--vllm_mode", "server")
    args = grpo("--multi_turn_scheduler", "gym_scheduler", "--gym_env", "math_env", *server, "--async_generate",
                "true", "--vllm_server_pass_dataset", "true")
    assert args.multi_turn_options().vllm_server_pass_dataset and args.rollout_options().async_generate
    # ms-swift's trainer command on servers: the scheduler is the server's, --max_turns and the dataset go along
    swift_style = grpo(*server, "--max_turns", "3", "--vllm_server_pass_dataset", "true").multi_turn_options()
    assert not swift_style.enabled and swift_style.on_servers and swift_style.max_turns == 3
    for flags in ([], ["--multi_turn_scheduler", "math_tip_trick"]):
        with pytest.raises(SystemExit):
            grpo(*flags, "--vllm_server_pass_dataset", "true")
        assert ("--vllm_server_pass_dataset true sends the rows' other columns to the rollout servers' multi-turn "
                "scheduler; it needs --use_vllm true --vllm_mode server" in capsys.readouterr().err)
    with pytest.raises(SystemExit):
        grpo("--max_turns", "3")
    assert "--max_turns: multi-turn settings, but no --multi_turn_scheduler" in capsys.readouterr().err


def test_agent_template_is_read_by_multi_turn_rollouts_only():
    assert grpo("--multi_turn_scheduler", "tool_call_scheduler", "--agent_template", "react_en").agent_template == \
        "react_en"
    with pytest.raises(NotBuiltError, match="--agent_template with swiftlike rlhf: not built yet .*--multi_turn"):
        grpo("--agent_template", "hermes")
    with pytest.raises(NotBuiltError, match="--agent_template with swiftlike rlhf: not built"):
        RlhfArguments(rlhf_type="dpo", model=TINY, dataset=["d"], agent_template="hermes")


def test_rollout_server_has_the_servers_multi_turn_flags():
    """The group's flags ms-swift's `swift rollout` has, generated from the same fields, checked by the group."""
    flags = {f.name: f for f in dataclasses.fields(MultiTurnServerArguments)}
    assert tuple(flags) == SERVER_MULTI_TURN
    options_fields = {f.name: f for f in dataclasses.fields(MultiTurnOptions)}
    assert all(dict(flags[n].metadata) == dict(options_fields[n].metadata) for n in SERVER_MULTI_TURN)
    server = parse_args(RolloutServerArguments, ["--model", TINY])
    assert not server.multi_turn_options().enabled
    served = RolloutServerArguments(model=TINY, multi_turn_scheduler="tool_call_scheduler", max_turns=3,
                                    agent_template="hermes")
    assert served.multi_turn_options().max_turns == 3 and served.agent_template == "hermes"
    with pytest.raises(NotBuiltError, match="--agent_template with swiftlike rollout: not built yet .*scheduler"):
        RolloutServerArguments(model=TINY, agent_template="hermes")
    with pytest.raises(ValueError, match="--context_manager was removed"):
        RolloutServerArguments(model=TINY, context_manager="summary")
    with pytest.raises(ValueError, match="--max_turns must be >= 1"):
        RolloutServerArguments(model=TINY, max_turns=0)


def test_rollout_server_with_an_unknown_scheduler_stops_before_the_model_loads(tmp_path):
    broken = tmp_path / "broken_plugin.py"
    broken.write_text("import not_a_module_anywhere\n")
    run = run_cli("rollout", "--model", TINY, "--multi_turn_scheduler", "nope", check=False)
    assert run.returncode != 0
    assert "unknown --multi_turn_scheduler 'nope'; valid values: gym_scheduler" in run.stderr
    run = run_cli("rollout", "--model", TINY, "--multi_turn_scheduler", "nope", "--external_plugins", broken,
                  check=False)
    assert run.returncode != 0
    assert "broken_plugin.py" in run.stderr
