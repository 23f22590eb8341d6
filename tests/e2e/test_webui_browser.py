"""`swiftlike web-ui` as a real process, driven by headless Chromium: fill a page, start the real CLI, and follow
the job in the runtime tab (log, curves, state), then hand its checkpoint to eval and deploy and chat with it.

SWIFTLIKE_UI_SCREENSHOTS=docs/images saves a screenshot of each page there (docs/web-ui.md shows them).
"""
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

import psutil
import pytest
from model_ids import TINY
from servers import free_port, start
from test_app import WATCH_REPLIES, assert_streamed

SHOTS = os.environ.get("SWIFTLIKE_UI_SCREENSHOTS")


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    root = tmp_path_factory.mktemp("webui")
    port = free_port()
    proc = start(["web-ui", "--server_port", str(port), "--jobs_dir", str(root / "jobs")], port, root / "ui.log",
                 timeout=120)
    yield {"url": f"http://127.0.0.1:{port}/", "root": root, "jobs": root / "jobs"}
    proc.terminate()
    proc.wait(timeout=60)
    for job_dir in (root / "jobs").iterdir():  # nothing the tests started is left running
        if (job_dir / "job.json").is_file() and not (job_dir / "exit.json").is_file():
            pid = json.loads((job_dir / "job.json").read_text())["pid"]
            if psutil.pid_exists(pid):
                os.killpg(os.getpgid(pid), 9)


@pytest.fixture(scope="module")
def page(browser, ui):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(ui["url"], wait_until="load")
    page.locator("#sft-model").wait_for(timeout=60_000)
    yield page
    page.close()


def fill(page, elem_id: str, value: str) -> None:
    box = page.locator(f"#{elem_id} input, #{elem_id} textarea").first
    box.fill(value)
    box.dispatch_event("blur")


def fill_until_previewed(page, key: str, values: dict[str, str], tries: int = 3) -> None:
    """Fill the page's fields until its dry-run preview carries every one of them. A fill made while the page
    still applies the update that switched to it (Runtime's "Evaluate its checkpoint") can be overwritten by
    it: seen once in CI as an eval of all 200 questions after `--eval_limit 2` had been typed."""
    wanted = [f"--{name} {shlex.quote(value)}" for name, value in values.items()]
    preview = ""
    for _ in range(tries):
        for name, value in values.items():
            fill(page, f"{key}-{name}", value)
        page.locator(f"#{key}-dry-run").click()
        deadline = time.time() + 30
        while time.time() < deadline:
            preview = page.locator(f"#{key}-preview .cm-content").inner_text()
            if all(w in preview for w in wanted):
                return
            time.sleep(0.5)
    raise AssertionError(f"the {key} preview never carried {wanted}; it shows:\n{preview}")


def choose(page, elem_id: str, option: str) -> None:
    page.locator(f"#{elem_id} input").click()
    page.get_by_role("option", name=re.compile(re.escape(option))).first.click()


def tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()


def wait_for_text(page, selector: str, pattern: str, timeout: float = 240) -> str:
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        text = page.locator(selector).first.inner_text()
        if re.search(pattern, text):
            return text
        time.sleep(0.5)
    raise AssertionError(f"{selector} never showed {pattern!r}; it shows:\n{text[-2000:]}")


def log_text(page, pattern: str, timeout: float = 180) -> str:
    """The runtime tab's log tail once it matches `pattern`."""
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        text = page.locator("#runtime-log textarea").input_value()
        if re.search(pattern, text):
            return text
        time.sleep(0.5)
    raise AssertionError(f"the log tail never showed {pattern!r}; it shows:\n{text[-2000:]}")


def shoot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"web-ui-{name}.png"), full_page=False)


def press(page, key: str, button: str = "start") -> str:
    """Click the page's button; the page's status once it has changed (it keeps the previous message until then)."""
    status = page.locator(f"#{key}-status [data-testid=markdown]")
    before = status.inner_text()
    page.locator(f"#{key}-{button}").click()
    deadline = time.time() + 60
    while time.time() < deadline:
        text = status.inner_text()
        if text != before and re.search(r"Started job|Not started|not built|Saved|Loaded", text):
            return text
        time.sleep(0.3)
    raise AssertionError(f"#{key}-status still shows {before!r}")


def started_job(ui, page, key: str, follow: bool = True) -> dict:
    """Start the page's command; with `follow`, once the runtime tab shows the new job."""
    status = press(page, key)
    found = re.search(r"Started job (\S+)", status)
    assert found, status
    if follow:
        wait_for_text(page, "#runtime-status", re.escape(found.group(1)), timeout=30)
    return json.loads((ui["jobs"] / found.group(1) / "job.json").read_text())


def logged(run_glob, key: str) -> list[float]:
    path = next(run_glob)
    return [e[key] for e in map(json.loads, path.read_text().splitlines()) if key in e]


def curve_drawn(page, key: str, values: list[float] | None = None, timeout: float = 240) -> None:
    """The runtime tab's plot of `key` draws its raw and smoothed series as lines (Vega renders SVG: one path
    per series) over a numeric y axis (categories would label every value) whose range holds `values`."""
    deadline = time.time() + timeout
    plot = page.locator(f"#runtime-curve-{key}")
    while time.time() < deadline:
        lines = plot.locator("g.mark-line path")
        if lines.count() >= 2 and all((lines.nth(i).get_attribute("d") or "").count("L") >= 1
                                      for i in range(lines.count())):
            ticks = [t.strip() for t in plot.locator("g.role-axis-label text").evaluate_all(
                "texts => texts.map(t => t.textContent)")]
            numbers = [float(t.replace("\u2212", "-")) for t in ticks
                       if re.fullmatch(r"[-\u2212]?[\d.]+(e-?\d+)?", t)]
            assert len(numbers) == len(ticks), ticks
            if values is None or (min(numbers) <= max(values) and max(numbers) >= min(values)):
                return
        time.sleep(0.5)
    raise AssertionError(f"the {key} curve was never drawn over {values}: {plot.inner_html()[-1500:]}")


@pytest.fixture(scope="module")
def sft_job(ui, page):
    """(1) the sft page for the tiny model, a few steps: log lines, a loss curve, finished, a checkpoint."""
    tab(page, "Train (sft / pt)")
    for elem, value in [("sft-model", TINY), ("sft-dataset", "swiftlike/alpaca-mini#16"),
                        ("sft-output_dir", str(ui["root"] / "out")), ("sft-max_steps", "6"),
                        ("sft-logging_steps", "1"), ("sft-save_steps", "3"), ("sft-per_device_train_batch_size", "2"),
                        ("sft-gradient_accumulation_steps", "1"), ("sft-torch_dtype", "float32")]:
        if elem == "sft-torch_dtype":
            choose(page, elem, value)
        else:
            fill(page, elem, value)
    page.locator("#sft-dry-run").click()
    preview = wait_for_text(page, "#sft-preview .cm-content", r"swiftlike sft", timeout=30)
    shoot(page, "sft")
    record = started_job(ui, page, "sft")
    wait_for_text(page, "#runtime-status", r"running|finished", timeout=30)
    log_text(page, r"swiftlike\.train", timeout=120)
    curve_drawn(page, "loss")
    wait_for_text(page, "#runtime-status", r"\bfinished\b")
    wait_for_text(page, "#runtime-result", r"last checkpoint")
    time.sleep(2 * 2.5)  # the finished run's last refresh
    curve_drawn(page, "loss", logged((ui["root"] / "out").glob("v0-*/logging.jsonl"), "loss"))
    shoot(page, "runtime")
    return record, preview


def test_sft_runs_to_a_checkpoint_with_log_and_loss_curve(ui, page, sft_job):
    record, _ = sft_job
    log = Path(record["log"]).read_text()
    assert "training finished" in log
    run_dirs = list((ui["root"] / "out").glob("v0-*"))
    assert len(run_dirs) == 1 and (run_dirs[0] / "checkpoint-6" / "adapter_config.json").is_file()
    losses = [json.loads(line)["loss"] for line in (run_dirs[0] / "logging.jsonl").read_text().splitlines()
              if '"loss"' in line]
    assert len(losses) == 6
    assert page.locator("#runtime-log textarea").input_value().strip(), "the log tail is empty"


def test_command_preview_equals_what_ran(ui, sft_job):
    """(6) The line the page showed is the job's record, and the record's argv is what the process ran."""
    record, preview = sft_job
    assert preview.strip() == record["command_line"]
    words = shlex.split(preview)
    assert record["exec"] == [sys.executable, "-m", "swiftlike.cli.main", *words[1:]]
    assert "--max_steps" in words and words[words.index("--max_steps") + 1] == "6"


def test_a_checkpoints_args_json_fills_the_form(ui, page, sft_job):
    tab(page, "Train (sft / pt)")
    fill(page, "sft-max_steps", "99")
    fill(page, "sft-model", "")
    page.get_by_text("Load a checkpoint's args.json").click()
    checkpoint = next((ui["root"] / "out").glob("v0-*/checkpoint-6"))
    fill(page, "sft-args-path", str(checkpoint))
    assert "Loaded" in press(page, "sft", "load")
    value = page.locator("#sft-max_steps input, #sft-max_steps textarea").first
    assert value.input_value() == "6"
    assert page.locator("#sft-model input, #sft-model textarea").first.input_value() == TINY
    saved = re.search(r"Saved: (\S+\.sh)", press(page, "sft", "save")).group(1)
    preview = page.locator("#sft-preview .cm-content").inner_text().strip()
    assert Path(saved).read_text().splitlines()[-1] == f'exec {preview} "$@"' and "--max_steps 6" in preview


def test_eval_the_checkpoint_shows_the_report_table(ui, page, sft_job):
    tab(page, "Runtime")
    choose(page, "runtime-job", sft_job[0]["id"])
    page.locator("#runtime-to-eval").click()
    wait_for_text(page, "#eval-adapters input, #eval-adapters textarea", r"", timeout=10)
    assert "checkpoint-6" in page.locator("#eval-adapters input, #eval-adapters textarea").first.input_value()
    fill_until_previewed(page, "eval", {"eval_limit": "2", "max_new_tokens": "8",
                                        "eval_output_dir": str(ui["root"] / "eval")})
    shoot(page, "eval")
    started_job(ui, page, "eval")
    wait_for_text(page, "#runtime-status", r"\bfinished\b")
    table = wait_for_text(page, "#runtime-result", r"math")
    assert re.search(r"math\s+accuracy\s+2\s+1\s+\d\.\d{4}", table), table


def test_deploy_the_checkpoint_chat_streams_then_stop(ui, page, sft_job):
    """(3) deploy from the runtime tab, chat with a streamed reply; (4) stop it: stopped, its processes gone."""
    tab(page, "Runtime")
    choose(page, "runtime-job", sft_job[0]["id"])
    page.locator("#runtime-to-deploy").click()
    assert "checkpoint-6" in page.locator("#infer-adapters input, #infer-adapters textarea").first.input_value()
    fill(page, "infer-port", str(free_port()))
    fill(page, "infer-max_new_tokens", "24")
    record = started_job(ui, page, "infer")
    log_text(page, r"swiftlike deploy ready on .*checkpoint-6")
    tab(page, "Deploy & chat")
    deadline = time.time() + 180
    while time.time() < deadline:
        page.locator("#chat-refresh").click()
        time.sleep(1)
        page.locator("#chat-deployment input").click()
        if page.get_by_role("option", name=re.compile(record["id"])).count():
            page.get_by_role("option", name=re.compile(record["id"])).first.click()
            break
        page.keyboard.press("Escape")
    page.evaluate(WATCH_REPLIES)
    box = page.locator("#chat-input textarea, #chat-input input").first
    box.fill("hello there")
    box.press("Enter")
    final, steady = "", 0
    while time.time() < deadline and steady < 6:  # until the reply has stopped growing for 3 s
        time.sleep(0.5)
        shown = page.evaluate("window.__shown")
        latest = shown[-1] if shown else ""
        steady = steady + 1 if latest and latest == final else 0
        final = latest
    assert final.strip(), "no reply shown"
    assert_streamed(page.evaluate("window.__shown"))
    shoot(page, "deploy")
    tab(page, "Runtime")
    choose(page, "runtime-job", record["id"])
    pids = [record["pid"], json.loads((Path(record["log"]).parent / "process.json").read_text())["pid"]]
    assert all(psutil.pid_exists(p) for p in pids)
    page.locator("#runtime-stop").click()
    wait_for_text(page, "#runtime-status", r"\bstopped\b", timeout=60)
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


def test_grpo_with_pt_rollout_draws_a_reward_curve(ui, page):
    """(2) and the rollout-server panel: start `swiftlike rollout`, see it healthy, stop it."""
    tab(page, "GRPO")
    for elem, value in [("grpo-model", TINY), ("grpo-dataset", "swiftlike/arithmetic#8"),
                        ("grpo-reward_funcs", "format_hash repetition"), ("grpo-num_generations", "4"),
                        ("grpo-max_completion_length", "12"), ("grpo-output_dir", str(ui["root"] / "grpo")),
                        ("grpo-max_steps", "3"), ("grpo-per_device_train_batch_size", "4"),
                        ("grpo-gradient_accumulation_steps", "1"), ("grpo-logging_steps", "1")]:
        fill(page, elem, value)
    shoot(page, "grpo")
    record = started_job(ui, page, "grpo")
    assert record["argv"][:2] == ["--rlhf_type", "grpo"]
    curve_drawn(page, "reward")
    wait_for_text(page, "#runtime-status", r"\bfinished\b")
    time.sleep(2 * 2.5)
    for key in ("reward", "kl"):
        curve_drawn(page, key, logged((ui["root"] / "grpo").glob("v0-*/logging.jsonl"), key))
    rewards = [json.loads(line) for line in next((ui["root"] / "grpo").glob("v0-*/logging.jsonl")).read_text()
               .splitlines()]
    assert sum("reward" in e for e in rewards) == 3


def test_rollout_server_panel_starts_checks_and_stops(ui, page):
    tab(page, "GRPO")
    page.locator("#rollout-panel").get_by_text("Rollout servers").first.click()
    model_box = page.locator("#rollout-model input, #rollout-model textarea").first
    model_box.wait_for(state="visible")
    page.wait_for_timeout(500)  # the opening panel mounts its fields; a value typed while it does can be lost
    port = free_port()
    for elem, value in [("rollout-model", TINY), ("rollout-port", str(port)), ("rollout-vllm_max_model_len", "512")]:
        fill(page, elem, value)
    choose(page, "rollout-torch_dtype", "float32")
    assert model_box.input_value() == TINY
    record = started_job(ui, page, "rollout", follow=False)
    deadline = time.time() + 240
    while time.time() < deadline:
        page.locator("#rollout-health").click()
        time.sleep(2)
        if "healthy" in page.locator("#rollout-servers").inner_text():
            break
    assert "healthy" in page.locator("#rollout-servers").inner_text()
    shoot(page, "rollout")
    choose(page, "rollout-picker", record["id"])
    page.locator("#rollout-stop").click()
    wait_for_text(page, "#rollout-servers", r"stopped", timeout=60)
    assert not psutil.pid_exists(record["pid"]) or psutil.Process(record["pid"]).status() == psutil.STATUS_ZOMBIE


def test_bad_input_shows_the_clis_error_and_leaves_nothing_running(ui, page):
    """(5) A dataset that does not exist: the job fails and the page shows the CLI's own message; a value the
    parser refuses is reported before anything starts."""
    tab(page, "Train (sft / pt)")
    fill(page, "sft-model", TINY)
    fill(page, "sft-max_steps", "four")
    jobs_before = len(list(ui["jobs"].glob("*/job.json")))
    message = press(page, "sft")
    assert "argument --max_steps: invalid int value: 'four'" in message
    assert len(list(ui["jobs"].glob("*/job.json"))) == jobs_before
    fill(page, "sft-max_steps", "2")
    fill(page, "sft-dataset", str(ui["root"] / "no-such-data.jsonl"))
    record = started_job(ui, page, "sft")
    status = wait_for_text(page, "#runtime-status", r"failed \(exit code 1\)", timeout=120)
    assert "swiftlike sft: error: dataset file not found" in status and "Traceback" not in status
    shoot(page, "error")
    assert not psutil.pid_exists(record["pid"]) or psutil.Process(record["pid"]).status() == psutil.STATUS_ZOMBIE


def test_rlhf_page_offers_every_rlhf_type_and_export_renders(ui, page):
    tab(page, "RLHF")
    page.locator("#rlhf-rlhf_type input").click()
    options = [o.inner_text().split()[-1] for o in page.get_by_role("option").all()]  # the chosen one has a ✓
    assert options == ["dpo", "orpo", "simpo", "kto", "cpo", "rm", "ppo", "grpo", "gkd"]
    page.get_by_role("option", name="ppo").click()
    fill(page, "rlhf-model", TINY)
    fill(page, "rlhf-dataset", "swiftlike/preference-mini")
    assert "swiftlike rlhf: error: --rlhf_type ppo needs a reward source" in press(page, "rlhf", "dry-run")
    assert "--rlhf_type ppo" in page.locator("#rlhf-preview").inner_text()
    choose(page, "rlhf-rlhf_type", "dpo")
    page.locator("#rlhf-dry-run").click()
    shoot(page, "rlhf")
    tab(page, "Export")
    page.locator("#export-adapters").wait_for(timeout=10_000)
    shoot(page, "export")
