"""Shared fixtures. Expensive things (vLLM engines, servers, converted models) are built once per session: per
pytest-xdist worker when the suite runs in parallel (`make test` runs two), each worker being its own process.

The suite mirrors the package: tests/unit/<package>/ (unit tests by package), tests/e2e/ (end-to-end runs:
training, servers, the CLI, browsers), tests/repo/ (checks of the repository itself: layers, dependencies,
docs, examples, GPU scripts), tests/helpers/ (the shared helpers: servers, workers, paths), tests/gpu/ (prepared
GPU checks). tests/helpers is put on sys.path here, so any test imports `servers` or `paths` by name.
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))
pytest_plugins = ["timings_plugin"]  # fixture setup times for scripts/test_times.py ($SWIFTLIKE_FIXTURE_TIMES)

os.environ.setdefault("SWIFTLIKE_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A fixed thread count in every run the tests start: a training process otherwise follows the machine's load
# (utils/threads.py), and a different count sums in another order, so a seeded run could sample other tokens
# when the suite runs beside other work. tests/unit/utils/test_threads.py drives the adaptation directly. With
# pytest-xdist the cores are shared out between the workers.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // _WORKERS)))

import pytest  # noqa: E402

from model_ids import SMOLLM2, TINY  # noqa: E402, F401  (the fixtures' models; tests import them from model_ids)

CHROMIUM = "/usr/bin/chromium"
# Flags for a closed network: without the background-networking ones Chromium keeps dialling Google's hosts.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture
def fresh_warnings(monkeypatch):
    """warn_once remembers for the process; a test that asks for this sees its own first warning."""
    from swiftlike.utils import logging as swiftlike_logging
    monkeypatch.setattr(swiftlike_logging, "_WARNED", set())


@pytest.fixture
def encode_calls(monkeypatch):
    """Counts Template.encode calls: the observable difference between encoding, lazy encoding and cache reuse."""
    from swiftlike.template import Template
    calls = []
    original = Template.encode

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(Template, "encode", counted)
    return calls


@pytest.fixture(scope="session")
def tiny_resolved():
    from swiftlike.model import resolve_model
    return resolve_model(TINY)


@pytest.fixture(scope="session")
def tiny_template(tiny_resolved):
    from swiftlike.model import load_tokenizer
    from swiftlike.template import get_template
    return get_template(tiny_resolved.meta.template, load_tokenizer(tiny_resolved))


@pytest.fixture(scope="session")
def tiny_adapter(tiny_resolved, tmp_path_factory):
    """A LoRA adapter with random (non-zero) B matrices, so it really changes the output."""
    import torch
    from peft import LoraConfig, get_peft_model
    from swiftlike.model import load_model
    torch.manual_seed(1)
    model = load_model(tiny_resolved, "float32", "cpu")
    cfg = LoraConfig(r=8, lora_alpha=32, target_modules=list(tiny_resolved.meta.lora_target_modules),
                     init_lora_weights=False)
    peft_model = get_peft_model(model, cfg)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.1)
    out = tmp_path_factory.mktemp("adapter") / "lora"
    peft_model.save_pretrained(out)
    return str(out)


@pytest.fixture(scope="session")
def tiny_reward_model(tiny_resolved, tmp_path_factory):
    """A one-label sequence-classification checkpoint (`tiny_rm/`) of the tiny model with a seeded random score
    head, large enough that different conversations score visibly apart."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    out = tmp_path_factory.mktemp("rm") / "tiny_rm"
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_resolved.model_dir, num_labels=1,
                                                               dtype=torch.float32)
    with torch.no_grad():
        model.score.weight.normal_(0, 0.5)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_resolved.model_dir).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_reward_lora(tiny_resolved, tmp_path_factory):
    """A LoRA reward-model checkpoint laid out as `swiftlike rlhf --rlhf_type rm --tuner_type lora` writes one:
    `run/checkpoint-1/` holding a PEFT SEQ_CLS adapter (random non-zero LoRA weights and score head), with the
    run's args.json beside it naming the base model."""
    import json

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification
    torch.manual_seed(2)
    base = AutoModelForSequenceClassification.from_pretrained(tiny_resolved.model_dir, num_labels=1,
                                                              dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(task_type="SEQ_CLS", r=8, lora_alpha=16, init_lora_weights=False,
                                            target_modules=list(tiny_resolved.meta.lora_target_modules)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name or "score" in name:
                p.normal_(0, 0.2)
    run = tmp_path_factory.mktemp("rm_lora") / "v0-run"
    model.save_pretrained(run / "checkpoint-1")
    (run / "args.json").write_text(json.dumps({"model": TINY, "model_type": tiny_resolved.model_type,
                                               "rlhf_type": "rm"}))
    return run / "checkpoint-1"


@pytest.fixture(scope="session")
def pt_tiny(tiny_resolved, tiny_template, tiny_adapter):
    from swiftlike.infer.engine.pt_engine import PtEngine
    return PtEngine(tiny_resolved, tiny_template, torch_dtype="float32", adapters={"lora": tiny_adapter})


@pytest.fixture(scope="session")
def vllm_tiny(tiny_resolved, tiny_template, tiny_adapter):
    """The one vLLM engine of the session for the tiny model (LoRA enabled)."""
    from swiftlike.infer.engine.vllm_engine import VllmEngine, VllmOptions
    engine = VllmEngine(tiny_resolved, tiny_template, VllmOptions(torch_dtype="float32", enable_lora=True,
                                                                  max_model_len=1024),
                        adapters={"lora": tiny_adapter})
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def rollout_server(tmp_path_factory):
    """The session's `swiftlike rollout` of the tiny model, fp32 with LoRA, contexts of 1024 and up to 8 log-probs a
    token: its port. For tests that generate, score, load adapters or sync LoRA weights; the base weights stay as
    loaded, so a test that syncs full weights starts a server of its own. About 15 s to start, once per worker."""
    from servers import free_port, start, stop
    port = free_port()
    proc = start(["rollout", "--model", TINY, "--port", str(port), "--torch_dtype", "float32", "--vllm_enable_lora",
                  "true", "--vllm_max_model_len", "1024", "--max_logprobs", "8", "--max_prompts", "256"], port,
                 tmp_path_factory.mktemp("rollout_server") / "server.log")
    yield port
    stop(proc)


@pytest.fixture(scope="session")
def pt_deploy(tmp_path_factory, tiny_adapter):
    """The session's `swiftlike deploy` of the tiny model on the pt engine, fp32, with the `lora` adapter and up to 8
    log-probs a token: its base URL (`http://127.0.0.1:PORT`). For judges, served teachers and OpenAI-client tests
    that do not change what is served."""
    from servers import free_port, start, stop
    port = free_port()
    proc = start(["deploy", "--model", TINY, "--infer_backend", "pt", "--torch_dtype", "float32", "--port", str(port),
                  "--adapters", f"lora={tiny_adapter}", "--max_logprobs", "8"], port,
                 tmp_path_factory.mktemp("pt_deploy") / "server.log")
    yield f"http://127.0.0.1:{port}"
    stop(proc)


_VLLM_SERVE = {}


@pytest.fixture(scope="session")
def vllm_serve_tiny(tiny_resolved, tmp_path_factory):
    """Bare `vllm serve` of the tiny model for the tests that compare what we serve with it: its /v1 base URL. The
    served name is the model id, as on our server. Shared by the modules that use it (the eval backends', ~50 s of
    start each) and stopped after the last test that does (pytest_runtest_teardown below), not at the session's
    end: its two processes hold ~3 GB, which the rest of the session should not carry."""
    from servers import free_port, start_vllm_serve
    port = free_port()
    _VLLM_SERVE["proc"] = start_vllm_serve(str(tiny_resolved.model_dir), port,
                                           tmp_path_factory.mktemp("vllm_serve") / "log.txt", TINY)
    yield f"http://127.0.0.1:{port}/v1"
    _stop_vllm_serve()


def _stop_vllm_serve() -> None:
    proc = _VLLM_SERVE.pop("proc", None)
    if proc is not None and proc.poll() is None:
        proc.terminate()
        proc.wait(60)


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (what `make test` asks for), with the files that use the shared `vllm serve` as one unit: a
    file's tests run on one worker, in order, so its module fixtures start once, and `vllm serve` starts once.

    A scheduler of ours, not `--dist loadgroup` with xdist_group marks: pytest 9.2 names a test by `Node._id`, and
    xdist 3.8's loadgroup renames `_nodeid`, so the marks were ignored and each file's tests were spread over both
    workers (every module fixture started twice, two Ray heads at once). The controller collects nothing, so the
    users of `vllm_serve_tiny` are found by name in the test files."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling
    serve_files = {str(path.relative_to(config.rootpath)) for path in Path(__file__).parent.rglob("test_*.py")
                   if "vllm_serve_tiny" in path.read_text(encoding="utf-8")}

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            return "vllm_serve" if path in serve_files else path

    return FileScheduling(config, log)


def pytest_collection_finish(session):
    """The last test to use the shared `vllm serve`, once -k / -m have deselected: it stops the server after that
    test, not at the end of the session."""
    users = [item.nodeid for item in session.items if "vllm_serve_tiny" in getattr(item, "fixturenames", ())]
    _VLLM_SERVE["last_user"] = users[-1] if users else None


def pytest_runtest_teardown(item, nextitem):
    """Stop the shared `vllm serve` after the last test that uses it, not at the end of the session."""
    if item.nodeid == _VLLM_SERVE.get("last_user"):
        _stop_vllm_serve()


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (Debian's /usr/bin/chromium) through Playwright, for the Gradio pages' tests. One per
    module, not per session: Playwright's sync API keeps an event loop running in the main thread while it is
    open, and the later modules' `asyncio.run` (engines, in-process servers) refuses to start under it."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: scripts/setup.sh installs Debian's chromium package")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def grpo_one_process(tmp_path_factory, tiny_adapter):
    """(base, results): every run of tests/e2e/test_grpo_ddp.py's RUNS in one process on the recorded rollouts
    written into `base`. The reference that two processes (test_grpo_ddp.py) and the Megatron backend
    (test_megatron_rl.py) must both match, launched once for both."""
    import json

    from test_grpo_ddp import RUNS, launch_one_and_two
    base = tmp_path_factory.mktemp("grpo_one_process")
    runs = {name: [a.format(adapter=tiny_adapter) for a in argv] for name, argv in RUNS.items()}
    (base / "runs.json").write_text(json.dumps(runs))
    return base, launch_one_and_two(base, runs, processes=(1,))[1]
