# Two commands for a fresh machine: `make demo` and `make test`. Both set up .venv first.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-stamp

.PHONY: setup test test-fast demo demo-dpo demo-gkd demo-agent-sft demo-agent demo-algorithms demo-ppo demo-rft examples bench bench-train bench-grpo bench-rollout bench-async bench-deploy bench-dpo bench-gkd bench-ray bench-delta bench-agent bench-reward bench-ppo bench-sample bench-eval bench-pair bench-logps bench-compile padding-waste profile-steps roofline lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh scripts/pip_sources.py $(wildcard scripts/locks/*.txt)
	bash scripts/setup.sh

# Per-test durations (--durations=0, JUnit XML) and fixture setup times land in build/test-results/;
# scripts/test_times.py sums them per tier, file and fixture (docs/testing.md).
# Two pytest-xdist workers, a file's tests together on one (docs/testing.md); TEST_WORKERS=0 runs in one process.
RESULTS := build/test-results
TEST_WORKERS ?= 2
PARALLEL := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: setup
	$(VENV)/bin/ruff check swiftlike tests benchmarks scripts
	rm -rf $(RESULTS)
	SWIFTLIKE_FIXTURE_TIMES=$(RESULTS)/fixtures.json $(PY) -m pytest -q $(PARALLEL) --durations=0 \
		--junitxml=$(RESULTS)/junit.xml tests
	$(PY) scripts/test_times.py $(RESULTS)/junit.xml $(RESULTS)/fixtures.json --top 25

# The unit tier, what a contributor runs before each commit: tests/unit and tests/repo (no training process, no
# vLLM engine, no server; tests/repo/test_test_tiers.py keeps it so).
test-fast: setup
	$(PY) -m pytest -q $(PARALLEL) tests/unit tests/repo

demo: setup
	bash scripts/demo.sh

demo-ppo: setup
	DEMO_ALGO=ppo bash scripts/demo.sh

# RFT: rounds of swiftlike sample -> keep the correct answers -> LoRA SFT, held-out greedy before / after (~24 min)
demo-rft: setup
	bash scripts/rft_demo.sh

demo-dpo: setup
	bash scripts/dpo_demo.sh

demo-gkd: setup
	bash scripts/gkd_demo.sh

demo-agent-sft: setup
	bash scripts/agent_sft_demo.sh

# Multi-turn GRPO with tools after its own short agent-SFT warm-up (AGENT_DEMO_SFT_ROWS=0: from demo-agent-sft);
# DEMO_QUICK=1 for a smoke run on the tiny random model.
demo-agent: setup
	bash scripts/agent_demo.sh

# Issue 31's evidence table: GRPO, RLOO, REINFORCE++, CISPO and top-entropy tokens, 3 seeds each (~50 min)
demo-algorithms: setup
	bash scripts/algorithms_evidence.sh

# Every script under examples/ in smoke mode (2 steps, a few samples), with a PASS/FAIL line each; not part of
# `make test`. `make examples ONLY="deploy grpo"` runs the scripts whose path contains one of the words.
examples: setup
	bash scripts/run_examples.sh $(ONLY)

bench: setup
	$(PY) benchmarks/bench_infer.py

bench-train: setup
	$(PY) benchmarks/bench_train.py

bench-grpo: setup
	$(PY) benchmarks/bench_grpo.py

bench-rollout: setup
	$(PY) benchmarks/bench_rollout.py

bench-async: setup
	$(PY) benchmarks/bench_async.py

bench-deploy: setup
	$(PY) benchmarks/bench_deploy.py

bench-dpo: setup
	$(PY) benchmarks/bench_dpo.py

bench-gkd: setup
	$(PY) benchmarks/bench_gkd.py

bench-ray: setup
	$(PY) benchmarks/bench_ray.py

bench-delta: setup
	$(PY) benchmarks/bench_delta_sync.py

bench-agent: setup
	$(PY) benchmarks/bench_agent.py

bench-reward: setup
	$(PY) benchmarks/bench_reward.py

bench-ppo: setup
	$(PY) benchmarks/bench_ppo.py

bench-sample: setup
	$(PY) benchmarks/bench_sample.py

bench-eval: setup
	$(PY) benchmarks/bench_eval.py --rounds 2
	$(PY) benchmarks/bench_eval.py --rounds 2 --compiled

bench-pair: setup
	$(PY) benchmarks/bench_pair.py

bench-logps: setup
	$(PY) benchmarks/bench_logps.py

bench-compile: setup
	$(PY) benchmarks/bench_compile.py

padding-waste: setup
	$(PY) benchmarks/padding_waste.py

profile-steps: setup
	$(PY) benchmarks/profile_steps.py

roofline: setup
	$(PY) benchmarks/roofline.py

lint: setup
	$(VENV)/bin/ruff check swiftlike tests benchmarks scripts

clean:
	rm -rf $(VENV) build *.egg-info
