"""The web UI's parts without a browser: forms generated from the argument dataclasses, the argv they make, the
CLI's own error messages, the smoothing of curves, and the job store over real `swiftlike` processes."""
import dataclasses
import json
import shlex
import sys
import time

import psutil
import pytest
from cli import run_cli
from model_ids import TINY
from servers import free_port, start

from swiftlike.arguments import parse_args
from swiftlike.arguments.rlhf_args import RlhfArguments
from swiftlike.arguments.train_args import PtArguments, TrainArguments
from swiftlike.arguments.webui_args import WebUIArguments
from swiftlike.ui.forms import (argv_of, check_arguments, command_line, field_specs, flag_value, load_args_json,
                                script_text)
from swiftlike.ui.jobs import JobStore
from swiftlike.ui.pages.command import UIContext
from swiftlike.ui.metrics import curve_rows, ema
from swiftlike.utils.fields import arg


def test_specs_carry_type_default_choices_and_help():
    specs = {s.name: s for s in field_specs(RlhfArguments)}
    assert specs["rlhf_type"].kind == "choice" and specs["rlhf_type"].choices == (
        "dpo", "orpo", "simpo", "kto", "cpo", "rm", "ppo", "grpo", "gkd")
    assert (specs["tuner_type"].default, specs["tuner_type"].choices) == ("lora", ("lora", "full"))
    assert specs["sleep_level"].choices == ("0", "1", "2")
    assert specs["use_vllm"].kind == "bool" and specs["reward_funcs"].kind == "list"
    assert specs["lr_scheduler_kwargs"].kind == "json"
    assert specs["num_generations"].help.startswith("Completions sampled per prompt")
    assert specs["model"].group == "BaseArguments"
    # every init field of the dataclass is in the form, once
    assert [s.name for s in field_specs(RlhfArguments)] == list(dict.fromkeys(s.name for s in field_specs(RlhfArguments)))
    assert {s.name for s in field_specs(RlhfArguments)} == {f.name for f in dataclasses.fields(RlhfArguments) if f.init}


def test_argv_holds_only_what_differs_from_the_defaults_and_parses_back():
    specs = field_specs(TrainArguments)
    shown = {s.name: s.widget_value(s.default) for s in specs}
    shown.update(model=TINY, dataset="swiftlike/alpaca-mini#8 'my data.jsonl'", max_steps="4", packing=True,
                 max_length="128", truncation_strategy="left", lr_scheduler_kwargs='{"min_lr": 1e-6}')
    argv = argv_of(specs, [shown[s.name] for s in specs])
    assert argv == ["--model", TINY, "--max_length", "128", "--dataset", "swiftlike/alpaca-mini#8", "my data.jsonl",
                    "--max_steps", "4", "--lr_scheduler_kwargs", '{"min_lr": 1e-6}', "--truncation_strategy", "left",
                    "--packing", "true"]
    args = parse_args(TrainArguments, argv)
    assert args.dataset == ["swiftlike/alpaca-mini#8", "my data.jsonl"] and args.packing and args.max_steps == 4
    assert args.lr_scheduler_kwargs == {"min_lr": 1e-6}
    line = command_line("sft", argv)
    assert shlex.split(line) == ["swiftlike", "sft", *argv]
    assert script_text("sft", argv).splitlines()[-1] == f'exec {line} "$@"'
    # pt's own default (loss_scale all) is not repeated; a fixed flag comes first and is not taken from the form
    pt_specs = field_specs(PtArguments)
    assert "--loss_scale" not in argv_of(pt_specs, [s.widget_value(s.default) for s in pt_specs])
    grpo = argv_of(field_specs(RlhfArguments), [], fixed={"rlhf_type": "grpo"})
    assert grpo == ["--rlhf_type", "grpo"]
    assert flag_value(["--port", "1", "--host", "h", "--port", "2"], "--port") == "2"
    assert flag_value(["--port"], "--port") is None


def test_a_flag_added_to_a_command_appears_in_the_ui_unchanged(tmp_path):
    """A new dataclass field gets a widget (advanced section, its help as info) and reaches the argv."""
    import gradio as gr

    from swiftlike.ui.pages.command import CommandPage, UIContext
    from swiftlike.ui.labels import LABELS
    extended = dataclasses.make_dataclass(
        "ExtendedTrainArguments", [("warmup_shape", float, arg(0.5, "A flag no UI code knows about."))],
        bases=(TrainArguments,))
    ctx = UIContext(JobStore(tmp_path), LABELS["en"])
    with gr.Blocks() as demo:
        page = CommandPage(ctx, "x", {"sft": extended}, ["model", "dataset"])
        page.render()
    box = page.widgets["warmup_shape"]
    assert box.label == "warmup_shape" and box.info.startswith("A flag no UI code knows about.")
    advanced = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "x-advanced")
    assert _contains(advanced, box) and not _contains(advanced, page.widgets["model"])
    values = [page.widgets[n].value for n in page.widgets]
    values[list(page.widgets).index("warmup_shape")] = "0.9"
    values[list(page.widgets).index("model")] = TINY
    values[list(page.widgets).index("dataset")] = "swiftlike/alpaca-mini"
    argv = page.argv("sft", tuple(values))
    assert argv[-2:] == ["--warmup_shape", "0.9"] and parse_args(extended, argv).warmup_shape == 0.9


def test_the_multi_turn_group_appears_in_the_ui_unchanged():
    """The multi-turn flags (rl/core/options.py's MultiTurnOptions) are on the rlhf form and the rollout server's,
    each as its option field declares it, with no UI code of their own, and reach the argv."""
    from swiftlike.arguments.rollout_args import SERVER_MULTI_TURN, RolloutServerArguments
    from swiftlike.rl.core.options import MultiTurnOptions
    settings = [f for f in dataclasses.fields(MultiTurnOptions) if f.metadata.get("help")]
    for cls, group, names in ((RlhfArguments, "MultiTurnArguments", [f.name for f in settings]),
                              (RolloutServerArguments, "MultiTurnServerArguments", list(SERVER_MULTI_TURN))):
        specs = {s.name: s for s in field_specs(cls)}
        assert [n for n, s in specs.items() if s.group == group] == names
        for f in settings:
            if f.name in names:
                default = f.default_factory() if f.default is dataclasses.MISSING else f.default
                assert (specs[f.name].help, specs[f.name].default) == (f.metadata["help"], default), f.name
    specs = field_specs(RlhfArguments)
    shown = {s.name: s.widget_value(s.default) for s in specs}
    shown.update(rlhf_type="grpo", model=TINY, dataset="swiftlike/calculator-agent-test#8", reward_funcs="accuracy",
                 multi_turn_scheduler="tool_call_scheduler", max_turns="3", completion_length_limit_scope="total",
                 agent_template="hermes")
    argv = argv_of(specs, [shown[s.name] for s in specs])
    options = parse_args(RlhfArguments, argv).multi_turn_options()
    assert (options.multi_turn_scheduler, options.max_turns, options.completion_length_limit_scope) == (
        "tool_call_scheduler", 3, "total")
    assert {s.name: s for s in specs}["completion_length_limit_scope"].choices == ("total", "per_round")


def test_a_list_field_cannot_set_other_flags():
    """A list field is split into words, and argparse reads any word that begins with '-' as a flag: such an item
    is refused with its field named; numbers (-0.5) and words with dashes inside pass."""
    from swiftlike.ui.forms import FormError
    specs = {s.name: s for s in field_specs(RlhfArguments)}
    with pytest.raises(FormError, match="dataset: the item '--rlhf_type' begins with '-'.* value of --dataset"):
        specs["dataset"].flags("data.jsonl --rlhf_type dpo --output_dir /tmp/elsewhere")
    with pytest.raises(FormError, match="dataset: .*'-o'"):
        specs["dataset"].flags("data.jsonl -o x")
    with pytest.raises(FormError, match="dataset: No closing quotation"):
        specs["dataset"].flags("'data.jsonl")
    assert specs["reward_weights"].flags("1 -0.5 1e-3") == ["--reward_weights", "1", "-0.5", "1e-3"]
    assert specs["dataset"].flags("my-data.jsonl 'a b.jsonl'") == ["--dataset", "my-data.jsonl", "a b.jsonl"]


def test_an_injected_flag_in_a_page_starts_nothing(tmp_path):
    """The GRPO page fixes --rlhf_type grpo; a dataset field that carries `--rlhf_type dpo --output_dir X` would
    have started a DPO run writing to X (the later flag wins). Now the page names the item and starts nothing."""
    import gradio as gr

    from swiftlike.ui.labels import LABELS
    from swiftlike.ui.pages.training import build_grpo
    ctx = UIContext(JobStore(tmp_path / "jobs"), LABELS["en"])
    with gr.Blocks():
        page, _ = build_grpo(ctx)
    values = [page.widgets[n].value for n in page.widgets]
    values[list(page.widgets).index("model")] = TINY
    values[list(page.widgets).index("dataset")] = \
        f"swiftlike/arithmetic-preference#4 --rlhf_type dpo --output_dir {tmp_path / 'elsewhere'}"
    try:
        preview, status, *_ = page.start("rlhf", *values)
        assert ctx.store.list() == [], "a job was started"
    finally:
        for job in ctx.store.list():
            ctx.store.stop(job.id)
    assert preview == "" and "the item '--rlhf_type' begins with '-'" in status
    assert page.show_command("rlhf", *values)[0] == ""


def _contains(block, target) -> bool:
    return any(child is target or _contains(child, target) for child in getattr(block, "children", []))


@pytest.mark.parametrize("argv", [["--model", TINY, "--dataset", "d.jsonl", "--tuner_type", "bogus"],
                                  ["--dataset", "d.jsonl"], ["--model", TINY, "--dataset", "d.jsonl", "--max_steps",
                                                             "four"]])
def test_argument_errors_are_the_clis_own_messages(argv):
    args, error = check_arguments(TrainArguments, "sft", argv)
    assert args is None
    assert error == run_cli("sft", *argv, check=False).stderr.strip()


def test_bad_rlhf_arguments_are_reported_not_raised():
    _, error = check_arguments(RlhfArguments, "rlhf", ["--rlhf_type", "ppo", "--model", TINY, "--dataset", "x"])
    assert error.startswith("swiftlike rlhf: error: --rlhf_type ppo needs a reward source")


def test_ema_matches_hand_computed_values():
    # weight 0.5: 1 -> 0.5 / 0.5 = 1; then (0.25 + 0.5 * 0) / 0.75 = 1/3; then (0.125 + 0.5 * 1) / 0.875 = 5/7
    assert ema([1.0, 0.0, 1.0], 0.5) == pytest.approx([1.0, 1 / 3, 5 / 7])
    assert ema([2.0, 4.0], 0.0) == [2.0, 4.0]
    with pytest.raises(ValueError):
        ema([1.0], 1.0)
    rows = curve_rows([{"step": 1, "loss": 2.0}, {"step": 2, "loss": float("nan")}, {"step": 3, "loss": 1.0},
                       {"step": 3, "reward": 0.1}], "loss", weight=0.5)
    assert [(r["step"], r["series"]) for r in rows] == [(1, "loss"), (3, "loss"), (1, "loss (smoothed)"),
                                                        (3, "loss (smoothed)")]
    assert rows[-1]["value"] == pytest.approx((0.5 * 2 * 0.5 + 0.5 * 1.0) / 0.75)


def test_ui_refuses_to_bind_beyond_loopback_without_a_key(capsys):
    with pytest.raises(SystemExit):
        parse_args(WebUIArguments, ["--server_name", "0.0.0.0"])
    assert "needs --api_key" in capsys.readouterr().err
    args = parse_args(WebUIArguments, ["--server_name", "0.0.0.0", "--api_key", "k", "--server_port", "7000",
                                       "--lang", "zh"])
    assert (args.server_name, args.server_port, args.lang) == ("0.0.0.0", 7000, "zh")
    assert parse_args(WebUIArguments, []).server_port == 7860
    with pytest.raises(ValueError, match="invalid choice for --lang"):
        WebUIArguments(lang="fr")


def test_a_foreign_host_header_is_refused(tmp_path):
    """DNS rebinding: the real UI, asked under a name it does not answer to, refuses with 400 and names the
    flag; under its bound address, localhost or a name given with --allowed_hosts it serves the page."""
    import httpx
    port = free_port()
    proc = start(["web-ui", "--server_port", str(port), "--jobs_dir", str(tmp_path / "jobs"),
                  "--allowed_hosts", "ui.proxy.example"], port, tmp_path / "ui.log", timeout=120)
    try:
        url = f"http://127.0.0.1:{port}"
        for path in ("/", "/config", "/health"):
            refused = httpx.get(url + path, headers={"Host": f"rebound.example:{port}"})
            assert refused.status_code == 400, (path, refused.status_code)
            assert "--allowed_hosts" in refused.json()["error"]["message"]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "ui.proxy.example"):
            served = httpx.get(url + "/", headers={"Host": host})
            assert served.status_code == 200 and "<html" in served.text.lower(), host
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_load_args_json_from_a_checkpoint(tmp_path):
    ckpt = tmp_path / "v0-x" / "checkpoint-4"
    ckpt.mkdir(parents=True)
    (ckpt.parent / "args.json").write_text(json.dumps({"model": TINY, "max_steps": 4}))
    assert load_args_json(str(ckpt))["max_steps"] == 4
    with pytest.raises(FileNotFoundError):
        load_args_json(str(tmp_path / "nowhere"))


def test_job_store_runs_lists_and_stops_real_processes(tmp_path):
    """A long-running command (another web-ui) is listed as running with the exact argv it was given, survives
    a new store over the same directory, and stops with its whole session; a failing command's exit code and
    error line are recorded."""
    store = JobStore(tmp_path / "jobs", stop_grace_s=5)
    argv = ["--server_port", str(free_port()), "--jobs_dir", str(tmp_path / "inner")]
    job = store.start("web-ui", argv, cwd=str(tmp_path))
    failing = store.start("export", ["--adapters", str(tmp_path / "missing"), "--merge_lora", "true"])
    deadline = time.time() + 60
    while not (job.dir / "process.json").is_file() and time.time() < deadline:
        time.sleep(0.2)
    child = psutil.Process(json.loads((job.dir / "process.json").read_text())["pid"])
    assert child.cmdline() == job.record["exec"] == [sys.executable, "-m", "swiftlike.cli.main", "web-ui", *argv]
    assert shlex.split(job.command_line) == ["swiftlike", "web-ui", *argv]
    again = JobStore(tmp_path / "jobs")
    assert {j.id for j in again.list()} == {failing.id, job.id}
    assert again.get(job.id).state == "running"
    pids = [p.pid for p in store.processes(job.id)]
    assert child.pid in pids and job.record["pid"] in pids
    stopped = store.stop(job.id)
    assert stopped.state == "stopped" and not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                                                  for p in pids)
    while store.get(failing.id).state == "running" and time.time() < deadline + 60:
        time.sleep(0.5)
    failed = store.get(failing.id)
    assert failed.status == "failed (exit code 2)"
    assert failed.error_line().startswith("swiftlike export: error: --adapters")


def test_sft_form_starts_an_agent_job_with_its_agent_template(tmp_path):
    """--agent_template comes from BaseArguments like every field, up front on the sft and deploy forms (the
    commands AGENT_TEMPLATE_COMMANDS lists); a job started from the sft form on the built-in agent dataset runs
    `swiftlike sft` with it, and a command that does not take it yet is refused with the CLI's own message."""
    import gradio as gr

    from swiftlike.arguments.base import AGENT_TEMPLATE_COMMANDS
    from swiftlike.ui.labels import LABELS
    from swiftlike.ui.pages.serving import build_deploy
    from swiftlike.ui.pages.training import build_rlhf, build_train
    ctx = UIContext(JobStore(tmp_path / "jobs", stop_grace_s=5), LABELS["en"])
    with gr.Blocks() as demo:
        page, deploy, rlhf = build_train(ctx), build_deploy(ctx), build_rlhf(ctx)
    assert {"sft", "deploy"} <= set(AGENT_TEMPLATE_COMMANDS)
    for shown in (page, deploy):
        box = shown.widgets["agent_template"]
        assert box.info.startswith("How tools, tool calls and tool results are written for the model")
        advanced = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == f"{shown.key}-advanced")
        assert not _contains(advanced, box), f"--agent_template is not up front on the {shown.key} form"
    names = list(page.widgets)
    values = [page.widgets[n].value for n in names]
    for name, value in {"model": TINY, "dataset": "swiftlike/calculator-agent#8", "agent_template": "hermes",
                        "max_steps": "1", "output_dir": str(tmp_path / "out")}.items():
        values[names.index(name)] = value
    try:
        preview, status, *_ = page.start("sft", *values)
        [job] = ctx.store.list()
        assert job.id in status
        assert job.record["command"] == "sft" and flag_value(job.record["argv"], "--agent_template") == "hermes"
        assert flag_value(job.record["argv"], "--dataset") == "swiftlike/calculator-agent#8"
        assert "--agent_template hermes" in preview
    finally:
        for job in ctx.store.list():
            ctx.store.stop(job.id)
    rlhf_names = list(rlhf.widgets)
    rlhf_values = [rlhf.widgets[n].value for n in rlhf_names]
    for name, value in {"model": TINY, "dataset": "swiftlike/arithmetic-preference#4", "agent_template": "hermes"
                        }.items():
        rlhf_values[rlhf_names.index(name)] = value
    error = rlhf.show_command("rlhf", *rlhf_values)[1]
    assert "--agent_template with swiftlike rlhf: not built yet" in error


def test_the_grpo_page_starts_a_multi_turn_job_with_an_explicit_false(tmp_path):
    """The multi-turn flags reach a started job's argv from the GRPO page's generated form. --use_gym_env defaults
    to None (true when --gym_env is given), so its widget offers '', true and false: false is passed as
    `--use_gym_env false` (a checkbox left unticked passed nothing, and the rule turned it on); '' passes nothing."""
    import gradio as gr

    from swiftlike.ui.labels import LABELS
    from swiftlike.ui.pages.training import build_grpo
    ctx = UIContext(JobStore(tmp_path / "jobs", stop_grace_s=5), LABELS["en"])
    with gr.Blocks() as demo:
        page, _ = build_grpo(ctx)
    box = page.widgets["use_gym_env"]
    assert isinstance(box, gr.Dropdown) and [c[1] for c in box.choices] == ["", "true", "false"] and box.value == ""
    advanced = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "grpo-advanced")
    assert not _contains(advanced, page.widgets["multi_turn_scheduler"]) and _contains(advanced, box)
    names = list(page.widgets)
    values = [page.widgets[n].value for n in names]
    settings = {"model": TINY, "dataset": "swiftlike/arithmetic#8", "multi_turn_scheduler": "gym_scheduler",
                "max_turns": "2", "gym_env": "math_env", "use_gym_env": "false", "reward_funcs": "accuracy",
                "completion_length_limit_scope": "total", "max_steps": "1", "output_dir": str(tmp_path / "out")}
    for name, value in settings.items():
        values[names.index(name)] = value
    try:
        preview, status, *_ = page.start("rlhf", *values)
        [job] = ctx.store.list()
        argv = job.record["argv"]
        assert job.id in status and job.record["command"] == "rlhf" and "--use_gym_env false" in preview
        for flag in ("multi_turn_scheduler", "max_turns", "gym_env", "use_gym_env", "completion_length_limit_scope"):
            assert flag_value(argv, f"--{flag}") == settings[flag], flag
        assert parse_args(RlhfArguments, argv).multi_turn_options().use_gym_env is False
    finally:
        for job in ctx.store.list():
            ctx.store.stop(job.id)
    values[names.index("use_gym_env")] = ""  # left to the rule: nothing passed, and --gym_env turns it on
    argv = page.argv("rlhf", tuple(values))
    assert "--use_gym_env" not in argv and parse_args(RlhfArguments, argv).multi_turn_options().use_gym_env is True


def test_the_sample_page_starts_a_sampling_job_that_writes_its_rows(tmp_path):
    """The sample tab's form is generated from SampleArguments like every page's; a job started from it runs the real
    `swiftlike sample`, finishes, and the runtime panel finds its output directory."""
    import gradio as gr

    from swiftlike.ui.labels import LABELS
    from swiftlike.ui.pages.serving import build_sample
    ctx = UIContext(JobStore(tmp_path / "jobs", stop_grace_s=5), LABELS["en"])
    with gr.Blocks():
        page = build_sample(ctx)
    assert page.widgets["n_best_to_keep"].info.startswith("With a reward, keep at most")
    names = list(page.widgets)
    values = [page.widgets[n].value for n in names]
    for name, value in {"model": TINY, "dataset": "swiftlike/arithmetic#3", "num_return_sequences": "2",
                        "max_new_tokens": "8", "output_dir": str(tmp_path / "sampled"),
                        "output_file": "rows.jsonl"}.items():
        values[names.index(name)] = value
    preview, status, *_ = page.start("sample", *values)
    [job] = ctx.store.list()
    assert job.id in status and "swiftlike sample" in preview and "--num_return_sequences 2" in preview
    deadline = time.time() + 300
    while ctx.store.get(job.id).state == "running" and time.time() < deadline:
        time.sleep(0.5)
    finished = ctx.store.get(job.id)
    assert finished.state == "finished", finished.error_line()
    assert len((tmp_path / "sampled" / "rows.jsonl").read_text().splitlines()) == 6
    assert finished.record.get("output_dir") == str(tmp_path / "sampled")


def test_the_eval_page_offers_every_backend_and_lists_their_datasets_from_the_backends_themselves(tmp_path):
    """The backend choice is the argument's own Literal; the datasets come from each backend's registry (ours and
    reasoning-gym's, lm-eval's task index, evalscope's benchmark registry in its own virtualenv)."""
    import gradio as gr

    from swiftlike.eval.catalog import search
    from swiftlike.ui.labels import LABELS
    from swiftlike.ui.pages.serving import build_eval
    ctx = UIContext(JobStore(tmp_path / "jobs", stop_grace_s=5), LABELS["en"])
    with gr.Blocks():
        page = build_eval(ctx)
    assert [value for _, value in page.widgets["eval_backend"].choices] == ["", "Native", "lm_eval", "swiftlike"]
    names = list(page.widgets)
    values = [page.widgets[n].value for n in names]
    for name, value in {"model": TINY, "eval_backend": "lm_eval", "eval_dataset": "gsm8k"}.items():
        values[names.index(name)] = value
    preview, _ = page.show_command("eval", *values)
    assert "--eval_backend lm_eval" in preview and "--eval_dataset gsm8k" in preview
    assert "rg:basic_arithmetic" in search("swiftlike", "arith")[0] and "math" in search("swiftlike", "")[0]
    assert "gsm8k" in search("lm_eval", "gsm8k")[0] and search("lm_eval", "")[1] > 1000
    assert {"gsm8k", "arc"} <= set(search("Native", "")[0] + search("Native", "gsm8k")[0] + search("Native", "arc")[0])
