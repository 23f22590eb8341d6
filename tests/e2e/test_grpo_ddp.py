"""GRPO with several processes (gloo on CPU): two ranks must train exactly like one process on the same batch.

The rollouts are recorded once with the real pt engine and served to both runs by tests/helpers/grpo_ddp_worker.py
(see there for the one hook); everything from rewards to the optimizer step is the real code. One process
trains with per_device_train_batch_size 4, two with 2 each: the same global batch of 8 prompts x 2
completions, 4 micro-batches per generation batch, 2 accumulated per optimizer step, 2 steps (the second
reuses the batch, so the ratio, clipping and the KL to the reference are live). SGD without clipping makes
the update proportional to the gradient, so the parameter comparison checks the gradient's scale too.
"""
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from cli import _process_state_restored, run_cli
from model_ids import TINY
from swiftlike.train.outputs import read_log
from paths import HELPERS, REPO

WORKER = HELPERS / "grpo_ddp_worker.py"
NUM_GENERATIONS = 2
PROMPTS = [f"What is {a} + {b}?" for a, b in [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10), (11, 12), (13, 14), (15, 16)]]
COMMON = ["--rlhf_type", "grpo", "--model", TINY, "--reward_funcs", "text_length", "--tuner_type", "full",
          "--num_generations", str(NUM_GENERATIONS), "--gradient_accumulation_steps", "2",
          "--steps_per_generation", "4", "--max_completion_length", "12", "--max_steps", "2", "--logging_steps", "1",
          "--save_steps", "100", "--report_to", "none", "--gradient_checkpointing", "false",
          "--torch_dtype", "float32", "--use_vllm", "false", "--optim", "sgd", "--learning_rate", "0.5",
          "--max_grad_norm", "1e9", "--log_rollout_offpolicy_metrics", "true"]
RUNS = {
    "grpo": ["--loss_type", "grpo", "--beta", "0.04"],
    "bnpo": ["--loss_type", "bnpo", "--beta", "0.04"],
    "dr_grpo": ["--loss_type", "dr_grpo", "--beta", "0"],
    "dapo": ["--loss_type", "dapo", "--beta", "0.04"],
    "gspo": ["--loss_type", "grpo", "--importance_sampling_level", "sequence", "--beta", "0.04"],
    # the reward std of the whole global batch, not of each rank's half
    "batch_std": ["--loss_type", "grpo", "--scale_rewards", "batch", "--beta", "0"],
    # the 2026 set: KL folded into the reward, the entropy threshold and KL-Cov's covariance over both ranks'
    # tokens, REINFORCE++'s and GDPO's statistics over the global batch, Clip-Cov's draw over both ranks' tokens
    "rloo_cispo_entropy": ["--advantage_estimator", "rloo", "--loss_type", "cispo", "--epsilon_high", "5.0",
                           "--top_entropy_quantile", "0.3", "--beta", "0.04"],
    "reinforce_pp_sapo": ["--advantage_estimator", "reinforce_plus_plus", "--loss_type", "sapo", "--beta", "0.04"],
    "gdpo_kl_cov": ["--scale_rewards", "gdpo", "--loss_type", "kl_cov", "--kl_cov_ratio", "0.1", "--beta", "0"],
    "clip_cov": ["--loss_type", "clip_cov", "--clip_cov_ratio", "0.2", "--clip_cov_lb", "-5", "--clip_cov_ub", "5",
                 "--beta", "0"],
    # OPD-RL: the tiny model with a random LoRA adapter merged in as teacher ({adapter}: the session's adapter)
    "opd_rl": ["--teacher_model", TINY, "--teacher_adapters", "{adapter}", "--teacher_kl_coef", "0.5",
               "--loss_type", "dapo", "--beta", "0"],
}
RTOL = 1e-5
# The weight update is held to 2e-5 (loss and gradient norm to RTOL): Adam divides each entry's step by the root
# of its running squared gradient, so where a tensor's gradient is small the fp32 rounding of the gradient sums
# (batched in one process, split and averaged over two) is magnified in its update (measured 3.1e-6 to 1.1e-5,
# the worst rloo_cispo_entropy, whose entropy selection leaves 70% of the tokens without a gradient)
UPDATE_RTOL = 2e-5


def test_sampler_shares_are_whole_groups_of_the_single_process_batch():
    from swiftlike.rl.online.grpo_trainer import RepeatSampler
    # 12 prompts, groups of 2, micro-batch 2 per rank (one prompt), 2 micro-batches per generation batch,
    # each generation batch served twice; one process would take micro-batch 4 (two prompts)
    one = list(RepeatSampler(12, 2, 4, 2, seed=0, prompts_per_unit=2))
    ranks = [RepeatSampler(12, 2, 2, 2, seed=0, num_processes=2, process_index=r, prompts_per_unit=1)
             for r in (0, 1)]
    shares = [list(r) for r in ranks]
    assert len(one) == 3 * 4 * 2 * 2 == 2 * len(ranks[0]) == 2 * len(shares[0])  # 3 generation batches
    # micro-batch by micro-batch (2 rows per rank, 4 in one process) the ranks' rows make up one process's
    assert one == [i for k in range(0, len(shares[0]), 2) for share in shares for i in share[k:k + 2]]
    assert not set(shares[0]) & set(shares[1])
    # a group larger than a micro-batch (unit: the whole share): contiguous halves of the global batch
    one = list(RepeatSampler(8, 4, 2, 1, seed=3))
    shares = [list(RepeatSampler(8, 4, 1, 1, seed=3, num_processes=2, process_index=r)) for r in (0, 1)]
    assert one == [i for g in range(0, len(one), 8) for share in shares for i in share[g // 2:g // 2 + 4]]


def _reduce_on_rank(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from swiftlike.rl.online.distributed import reduce_metrics, sum_across_processes
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    local = {"reward": [0.5, 1.5][rank], "timing/generate": [3.0, 2.0][rank],
             "completions/max_length": [7.0, 9.0][rank], "rollout_correction/log_ppl_diff_min": [-0.1, -0.3][rank]}
    if rank == 1:
        local["staleness/mean"] = 4.0  # only this rank logged it
    result = {"metrics": reduce_metrics(local), "tokens": sum_across_processes([[3, 1], [2, 5]][rank])}
    dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))


def test_metric_reduction_under_a_two_process_gloo_group(tmp_path):
    import torch.multiprocessing as mp

    from swiftlike.utils.net import free_port
    mp.spawn(_reduce_on_rank, args=(free_port(), str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert result["tokens"] == [5, 6]
        assert result["metrics"] == {"reward": 1.0, "timing/generate": 3.0, "completions/max_length": 9.0,
                                     "rollout_correction/log_ppl_diff_min": -0.3, "staleness/mean": 4.0}


def record_rollouts(path: Path, cut: bool = True) -> None:
    """NUM_GENERATIONS real pt-engine samples per prompt, each cut to a prefix of a different length.

    The random tiny model never stops by itself, so uncut (`cut=False`) every completion has the same length
    and every token-count normaliser is the same constant; prefixes of real samples keep the rollouts
    genuine while giving the ranks and micro-batches different token counts.
    """
    import torch

    from swiftlike.arguments import RlhfArguments
    from swiftlike.model import load_model, load_tokenizer, resolve_model
    from swiftlike.rl.online.rollout_worker import RolloutWorker
    from swiftlike.template import get_template
    resolved = resolve_model(TINY)
    tokenizer = load_tokenizer(resolved)
    args = RlhfArguments(rlhf_type="grpo", model=TINY, dataset=["unused"], reward_funcs=["format"], num_generations=NUM_GENERATIONS,
                         per_device_train_batch_size=NUM_GENERATIONS, max_completion_length=12, use_vllm=False)
    worker = RolloutWorker(args.rollout_options(), args.sampling_options(), args.vllm_options(), resolved, get_template(resolved.meta.template, tokenizer),
                           load_model(resolved, "float32", "cpu"))
    rows = [{"messages": [{"role": "user", "content": p}]} for p in PROMPTS for _ in range(NUM_GENERATIONS)]
    torch.manual_seed(0)  # the same rollouts on every test run
    recorded: dict[str, list[dict]] = {p: [] for p in PROMPTS}
    for i, rollout in enumerate(worker.generate(rows)):
        keep = 2 + (7 * i) % 11 if cut else len(rollout.completion_ids)  # 2..12 tokens
        ids = rollout.completion_ids[:keep]
        record = {**asdict(rollout), "completion_ids": ids, "rollout_logps": rollout.rollout_logps[:keep],
                  "text": tokenizer.decode(ids), "finish_reason": "length" if keep == 12 else "stop"}
        del record["row"]
        recorded[rollout.row["messages"][0]["content"]].append(record)
    path.write_text(json.dumps(recorded))


def launch(out: Path, rollouts: Path, dataset: Path, processes: int, runs: dict | None = None,
           common: list[str] = COMMON) -> None:
    """`runs` (RUNS by default) on the recorded `rollouts` in `processes` processes, results into `out`
    (tests/helpers/grpo_ddp_worker.py). One process is this one (its thread count, environment, registries and
    trainer classes put back after); two are torchrun's ranks, processes of their own by nature."""
    micro = 2 * NUM_GENERATIONS // processes
    runs = RUNS if runs is None else runs
    common = [*common, "--dataset", str(dataset), "--per_device_train_batch_size", str(micro)]
    if processes == 1:
        import torch

        import grpo_ddp_worker
        # one thread, as the single process of a launch had (OMP_NUM_THREADS=1): the same summation order. torch's
        # own setter: a vLLM engine started in this process replaces torch.set_num_threads with a no-op
        threads = torch.get_num_threads()
        try:
            with _process_state_restored({"OMP_NUM_THREADS": "1", "NPROC_PER_NODE": None, "RANK": None,
                                          "LOCAL_RANK": None, "WORLD_SIZE": None}):
                torch._C.set_num_threads(1)
                grpo_ddp_worker.run_all(rollouts, out, runs, common)
        finally:
            torch._C.set_num_threads(threads)
        return
    env = {**os.environ, "SWIFTLIKE_OFFLINE": "1", "OMP_NUM_THREADS": "1", "DDP_TEST_ROLLOUTS": str(rollouts),
           "DDP_TEST_OUT": str(out), "DDP_TEST_ARGS": json.dumps(runs), "DDP_TEST_COMMON": json.dumps(common),
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("NPROC_PER_NODE", None)
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             f"--nproc_per_node={processes}", str(WORKER)], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-6000:]


def launch_one_and_two(base: Path, runs: dict, common: list[str] = COMMON,
                       processes: tuple[int, ...] = (1, 2)) -> dict[int, Path]:
    """The rollouts recorded and the prompts written into `base` (once), then `runs` in each number of
    `processes`: {processes: directory of the worker's results}."""
    rollouts, dataset = base / "rollouts.json", base / "prompts.jsonl"
    if not rollouts.exists():
        record_rollouts(rollouts)
        dataset.write_text("".join(json.dumps({"messages": [{"role": "user", "content": p}]}) + "\n"
                                   for p in PROMPTS))
    out = {}
    for count in processes:
        out[count] = base / f"p{count}"
        out[count].mkdir()
        launch(out[count], rollouts, dataset, count, runs, common)
    return out


@pytest.fixture(scope="module")
def runs(grpo_one_process):
    """{processes: directory of the worker's results} for one process (shared with test_megatron_rl.py) and two."""
    base, one = grpo_one_process
    return {1: one, **launch_one_and_two(base, runs_with_adapter(base), processes=(2,))}


def runs_with_adapter(base: Path) -> dict:
    return json.loads((base / "runs.json").read_text())


def rel_diff(a, b) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def train_logs(out: Path, name: str) -> list[dict]:
    run_dir = Path(json.loads((out / f"{name}.rank0.json").read_text())["run_dir"])
    return [e for e in read_log(run_dir) if "loss" in e]


@pytest.mark.parametrize("name", list(RUNS))
def test_two_processes_match_one_process(runs, name):
    import torch
    one, two = train_logs(runs[1], name), train_logs(runs[2], name)
    assert [e["step"] for e in one] == [e["step"] for e in two] == [1, 2]
    for a, b in zip(one, two):
        for key in ("loss", "grad_norm"):
            assert rel_diff(a[key], b[key]) < RTOL, (name, a["step"], key, a[key], b[key])
    assert one[0]["grad_norm"] > 0 and one[1]["loss"] != one[0]["loss"]
    kl_in_loss = "--advantage_estimator" not in RUNS[name]  # rloo and reinforce_plus_plus fold it into the reward
    if kl_in_loss and "--beta" in RUNS[name] and RUNS[name][RUNS[name].index("--beta") + 1] != "0":
        assert one[1]["kl"] > 0  # the second step's policy has moved away from the reference
    if "--teacher_model" in RUNS[name]:  # the teacher differs from the student: its term is in the advantages
        assert one[0]["teacher_kl"] > 0.01, one[0]

    p1, p2 = torch.load(runs[1] / f"{name}.params.pt"), torch.load(runs[2] / f"{name}.params.pt")
    assert all(torch.equal(p1["before"][n], p2["before"][n]) for n in p1["before"])
    # the update of each weight tensor, compared in L2: elementwise, fp32 rounding of the gradient sums
    # (batched in one process, split and averaged over two) reaches ~1e-5 of a tensor's largest entry
    updates = {n: (p1["after"][n] - p1["before"][n], p2["after"][n] - p2["before"][n]) for n in p1["after"]}
    assert sum(int(d1.any()) for d1, _ in updates.values()) > len(updates) // 2
    per_tensor = {n: float((d1 - d2).norm() / d1.norm()) for n, (d1, d2) in updates.items() if d1.any()}
    worst = max(per_tensor.values())
    worst_entry = max(float((d1 - d2).abs().max() / d1.abs().max()) for d1, d2 in updates.values() if d1.any())
    assert worst < UPDATE_RTOL, (name, worst, max(per_tensor, key=per_tensor.get))
    print(f"{name}: loss rel diff {max(rel_diff(a['loss'], b['loss']) for a, b in zip(one, two)):.1e}, "
          f"grad_norm {max(rel_diff(a['grad_norm'], b['grad_norm']) for a, b in zip(one, two)):.1e}, "
          f"parameter update (L2 per tensor) {worst:.1e}, largest entry difference / tensor max {worst_entry:.1e}")


def test_ranks_split_the_batch_in_whole_groups(runs):
    one = json.loads((runs[1] / "grpo.rank0.json").read_text())["prompts"]
    ranks = [json.loads((runs[2] / f"grpo.rank{r}.json").read_text())["prompts"] for r in (0, 1)]
    assert sorted(one) == sorted(PROMPTS)  # one generation batch: every prompt once
    assert len(ranks[0]) == len(ranks[1]) == 4 and not set(ranks[0]) & set(ranks[1])
    # one prompt per micro-batch per rank, dealt in turn: the single process's micro-batch s is
    # rank 0's micro-batch s followed by rank 1's
    assert one == [p for pair in zip(*ranks) for p in pair]


MAX_KEYS = {"completions/max_length", "rollout_correction/log_ppl_diff_max"}
MIN_KEYS = {"completions/min_length", "rollout_correction/log_ppl_diff_min"}


def test_logged_metrics_are_reduced_across_ranks(runs):
    """What rank 0 logs is the two ranks' own values combined: maxima, minima and timings by max / min,
    everything else (reward, kl, entropy, clip ratios, rollout_correction/*) by the mean."""
    ranks = [json.loads((runs[2] / f"grpo.rank{r}.json").read_text())["metrics"] for r in (0, 1)]
    logged = train_logs(runs[2], "grpo")
    differing = set()
    for step, entry in enumerate(logged):
        r0, r1 = ranks[0][step], ranks[1][step]
        assert set(r0) == set(r1) and set(r0) <= set(entry)
        assert any(k.startswith("rollout_correction/") for k in r0) and "kl" in r0
        for key in r0:
            if key in MAX_KEYS or key.startswith("timing/"):
                expected = max(r0[key], r1[key])
            elif key in MIN_KEYS:
                expected = min(r0[key], r1[key])
            else:
                expected = (r0[key] + r1[key]) / 2
            assert entry[key] == pytest.approx(expected, rel=1e-6, abs=1e-12), (step, key)
            if r0[key] != r1[key]:
                differing.add(key)
    # the ranks really measured different things
    assert {"reward", "entropy", "kl", "completions/mean_length", "rollout_correction/training_log_ppl"} <= differing
    # per-completion averages over the same global batch equal the single process's
    one = train_logs(runs[1], "grpo")
    for key in ("reward", "completions/mean_length", "completions/max_length", "completions/min_length"):
        assert logged[0][key] == pytest.approx(one[0][key], rel=1e-6), key


# dapo where an optimizer step takes two generation batches (--steps_per_generation 2 at accumulation 4) and
# where a generation batch straddles two optimizer steps (3 at accumulation 2: its third micro-batch shares a
# step with the next batch's first); one prompt group per micro-batch, one process, one epoch each
DAPO_LAYOUTS = {"dapo_spg2_ga4": (2, 4), "dapo_spg3_ga2": (3, 2)}
DAPO_RUNS = {name: ["--loss_type", "dapo", "--beta", "0", "--per_device_train_batch_size", str(NUM_GENERATIONS),
                    "--steps_per_generation", str(spg), "--gradient_accumulation_steps", str(ga),
                    "--max_steps", str(len(PROMPTS) // spg * spg // ga)]
             for name, (spg, ga) in DAPO_LAYOUTS.items()}


@pytest.fixture(scope="module")
def dapo_runs(tmp_path_factory):
    """{"cut" | "uncut": (the recorded rollouts, the worker's results)}: rollouts of different lengths, and of
    one length (where TRL's normaliser is exact too)."""
    base = tmp_path_factory.mktemp("dapo")
    dataset = base / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"messages": [{"role": "user", "content": p}]}) + "\n" for p in PROMPTS))
    out = {}
    for kind in ("cut", "uncut"):
        rollouts, results = base / f"{kind}.json", base / kind
        record_rollouts(rollouts, cut=kind == "cut")
        results.mkdir()
        launch(results, rollouts, dataset, 1, DAPO_RUNS)
        out[kind] = json.loads(rollouts.read_text()), results
    return out


def hand_advantages(texts: list[str]) -> list[float]:
    """text_length rewards, minus the group mean, over the group's Bessel std + 1e-4."""
    rewards = [len(t) / 100 for t in texts]
    mean = sum(rewards) / len(rewards)
    std = (sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1)) ** 0.5
    return [(r - mean) / (std + 1e-4) for r in rewards]


@pytest.mark.parametrize("kind", ["cut", "uncut"])
@pytest.mark.parametrize("name", list(DAPO_LAYOUTS))
def test_dapo_divides_by_the_tokens_of_the_whole_optimizer_step(dapo_runs, name, kind):
    recorded, results = dapo_runs[kind]
    spg, ga = DAPO_LAYOUTS[name]
    result = json.loads((results / f"{name}.rank0.json").read_text())
    prompts, micro = result["prompts"], result["micro_steps"]  # one prompt per micro-batch, in training order
    tokens = [sum(len(c["completion_ids"]) for c in recorded[p]) for p in prompts]
    assert len(micro) == len(tokens) == len(PROMPTS) // spg * spg and [m["tokens"] for m in micro] == tokens
    steps = [range(s, min(s + ga, len(tokens))) for s in range(0, len(tokens), ga)]
    assert [m["step"] for m in micro] == [i for i, step in enumerate(steps) for _ in step]
    exact = [sum(tokens[k] for k in step) for step in steps for _ in step]
    assert [m["normaliser"] for m in micro] == exact
    # TRL 1.16 (GRPOTrainer.compute_loss, dapo) divides by its generation batch's tokens x GA / spg
    trl = [sum(tokens[k - k % spg:k - k % spg + spg]) * ga / spg for k in range(len(tokens))]
    if kind == "uncut":
        assert trl == exact
    else:  # it estimates the step's count from the generation batch: off where lengths differ
        assert trl != exact
    # the first step's loss by hand: every ratio is 1, so each token carries minus its completion's advantage
    # (0 up to fp32 rounding where every completion has the same length: a group's advantages sum to 0)
    first = [c for k in steps[0] for c in recorded[prompts[k]]]
    advantages = [a for k in steps[0] for a in hand_advantages([c["text"] for c in recorded[prompts[k]]])]
    hand = -sum(a * len(c["completion_ids"]) for a, c in zip(advantages, first)) / exact[0]
    assert sum(m["loss"] for m in micro if m["step"] == 0) == pytest.approx(hand, rel=1e-5, abs=2e-6)
    print(f"{name} {kind}: step tokens {exact[::ga]}, TRL's {trl[::ga]}, first loss {hand:.6f}")


def test_cli_relaunches_under_torchrun_and_rank_0_writes_the_run(tmp_path):
    """`NPROC_PER_NODE=2 swiftlike rlhf` end to end: dapo on the pt engine, real sampling, 2 steps."""
    plugin = tmp_path / "plugin.py"
    plugin.write_text("from swiftlike.rl.rewards.functions import register_reward\n\n"
                      "@register_reward('text_length')\ndef text_length(completions, **kwargs):\n"
                      "    return [len(c) / 100 for c in completions]\n")
    # in this process, which starts torchrun's two ranks as a user's shell would see it do
    result = run_cli("rlhf", "--rlhf_type", "grpo", "--model", TINY, "--dataset", "swiftlike/arithmetic#16",
                     "--reward_funcs", "format_hash", "text_length", "--external_plugins", plugin, "--loss_type",
                     "dapo", "--num_generations", "4", "--per_device_train_batch_size", "4",
                     "--gradient_accumulation_steps", "2", "--max_completion_length", "8", "--max_steps", "2",
                     "--logging_steps", "1", "--save_steps", "2", "--report_to", "none", "--gradient_checkpointing",
                     "false", "--torch_dtype", "float32", "--use_vllm", "false", "--output_dir", tmp_path / "out",
                     env={"NPROC_PER_NODE": "2", "OMP_NUM_THREADS": "1",
                          "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])})
    assert "torch.distributed.run" in result.stderr and result.stdout.count("training finished") == 1
    (run_dir,) = (tmp_path / "out").iterdir()  # one run directory, named by rank 0
    steps = [e for e in read_log(run_dir) if "loss" in e]
    assert [e["step"] for e in steps] == [1, 2]
    assert all(e["grad_norm"] > 0 and "reward" in steps[0] and "kl" in e for e in steps)
    (ckpt,) = run_dir.glob("checkpoint-*")
    assert (ckpt / "rng_state_0.pth").is_file() and (ckpt / "rng_state_1.pth").is_file()
    state = json.loads((ckpt / "trainer_state.json").read_text())
    # a step is 2 ranks x 2 prompts (8 completions each): 2 steps covered 8 of the 16 prompts
    assert state["global_step"] == 2 and state["log_history"][-1]["epoch"] == pytest.approx(0.5)


# ---------------------------------------------------------------- multi-turn trajectories over two processes
# Trajectories of 1-3 turns (the row says how many), a user observation inserted as ids between turns, and one
# whose environment raises in turn 2 (dropped: no loss, no tokens counted). The trainers run in multi-turn mode
# (a scheduler flag); the recorded trajectories stand in for its rollouts, as the one-turn rollouts do above.
MULTI_TURN = ["--multi_turn_scheduler", "math_tip_trick", "--max_turns", "3"]
MULTI_TURN_RUNS = {"mt_dapo": ["--loss_type", "dapo", "--beta", "0.04", *MULTI_TURN],
                   "mt_bnpo": ["--loss_type", "bnpo", "--beta", "0", *MULTI_TURN]}
FAILING = (4, 1)  # (prompt, generation) whose environment raises


def record_trajectories(path: Path) -> None:
    """NUM_GENERATIONS real pt-engine trajectories per prompt, rolled out by the multi-turn loop."""
    import torch

    from swiftlike.arguments import RlhfArguments
    from swiftlike.model import load_model, load_tokenizer, resolve_model
    from swiftlike.rl.online.rollout_worker import RolloutWorker
    from swiftlike.rollout.multi_turn import MultiTurnScheduler
    from swiftlike.rollout.multi_turn.scheduler import EnvFailure
    from swiftlike.template import get_template

    class TurnsFromRow(MultiTurnScheduler):
        def check_finished(self, request, choice, current_turn):
            return current_turn >= request.data_dict["turns"]

        def step(self, request, choice, current_turn):
            if request.data_dict["fail"] and current_turn == 2:
                raise EnvFailure("the probe environment broke on purpose")
            request.messages.append({"role": "user", "content": f"Observation {current_turn}: go on."})
            return {"infer_request": request}

    resolved = resolve_model(TINY)
    template = get_template(resolved.meta.template, load_tokenizer(resolved))
    args = RlhfArguments(rlhf_type="grpo", model=TINY, dataset=["unused"], reward_funcs=["format"],
                         num_generations=NUM_GENERATIONS, per_device_train_batch_size=NUM_GENERATIONS,
                         max_completion_length=12, use_vllm=False, multi_turn_scheduler="math_tip_trick",
                         max_turns=3)
    worker = RolloutWorker(args.rollout_options(), args.sampling_options(), args.vllm_options(), resolved, template,
                           load_model(resolved, "float32", "cpu"), multi_turn=args.multi_turn_options(),
                           scheduler=TurnsFromRow(template, max_turns=3))
    rows = [{"messages": [{"role": "user", "content": p}], "turns": 1 + (i + g) % 3, "fail": (i, g) == FAILING}
            for i, p in enumerate(PROMPTS) for g in range(NUM_GENERATIONS)]
    torch.manual_seed(0)
    recorded: dict[str, list[dict]] = {p: [] for p in PROMPTS}
    for rollout in worker.generate(rows):
        record = asdict(rollout)
        del record["row"]
        recorded[rollout.row["messages"][0]["content"]].append(record)
    path.write_text(json.dumps(recorded))


@pytest.fixture(scope="module")
def multi_turn_runs(tmp_path_factory):
    """(the recorded trajectories, {processes: directory of the worker's results})."""
    base = tmp_path_factory.mktemp("multi_turn")
    rollouts, dataset = base / "trajectories.json", base / "prompts.jsonl"
    record_trajectories(rollouts)
    dataset.write_text("".join(json.dumps({"messages": [{"role": "user", "content": p}]}) + "\n" for p in PROMPTS))
    out = {}
    for processes in (1, 2):  # bnpo's normaliser is checked on two processes only (one run less)
        out[processes] = base / f"p{processes}"
        out[processes].mkdir()
        launch(out[processes], rollouts, dataset, processes,
               MULTI_TURN_RUNS if processes == 2 else {"mt_dapo": MULTI_TURN_RUNS["mt_dapo"]})
    return json.loads(rollouts.read_text()), out


def sampled_tokens(trajectory: dict) -> int:
    return 0 if trajectory["env_error"] else sum(trajectory["loss_mask"])


def test_multi_turn_trajectories_are_what_the_test_says(multi_turn_runs):
    """The recording itself: 1-3 turns as the rows say, observations inserted with mask 0, one dropped."""
    recorded, _ = multi_turn_runs
    for i, prompt in enumerate(PROMPTS):
        for g, t in enumerate(recorded[prompt]):
            turns = 1 + (i + g) % 3
            assert (t["turns"], bool(t["env_error"])) == ((2, True) if (i, g) == FAILING else (turns, False))
            assert 0 < sum(t["loss_mask"]) < len(t["completion_ids"]) or t["turns"] == 1


def test_multi_turn_two_processes_match_one_process(multi_turn_runs):
    """Each rank trains on its own trajectories: the same losses, gradient norms and parameter update as one
    process on the same global batch."""
    import torch
    _, runs = multi_turn_runs
    name = "mt_dapo"
    one, two = train_logs(runs[1], name), train_logs(runs[2], name)
    assert [e["step"] for e in one] == [e["step"] for e in two] == [1, 2]
    for a, b in zip(one, two):
        # the first step's loss is a near-cancelling sum (every ratio 1, a group's advantages summing to 0):
        # ~1e-4 from terms of ~1, so fp32 rounding of the two summation orders shows in it at ~1e-8 absolute
        assert abs(a["loss"] - b["loss"]) <= RTOL * max(abs(a["loss"]), abs(b["loss"])) + 1e-7, (name, a, b)
        assert rel_diff(a["grad_norm"], b["grad_norm"]) < RTOL, (name, a["step"], a["grad_norm"], b["grad_norm"])
    assert one[0]["grad_norm"] > 0
    p1, p2 = torch.load(runs[1] / f"{name}.params.pt"), torch.load(runs[2] / f"{name}.params.pt")
    updates = [(p1["after"][n] - p1["before"][n], p2["after"][n] - p2["before"][n]) for n in p1["after"]]
    worst = max(float((d1 - d2).norm() / d1.norm()) for d1, d2 in updates if d1.any())
    assert worst < UPDATE_RTOL, (name, worst)


def test_dapo_counts_the_sampled_tokens_of_the_whole_step_across_ranks(multi_turn_runs):
    """Two ranks, one prompt group per micro-batch: each micro-batch counts its trajectories' loss-mask-1 ids (the
    dropped trajectory none), and every micro-batch of an optimizer step on either rank divides by the sum over
    both ranks' micro-batches of that step, the single process's count of the same step."""
    recorded, runs = multi_turn_runs
    ranks = [json.loads((runs[2] / f"mt_dapo.rank{r}.json").read_text()) for r in (0, 1)]
    step_tokens: dict[int, int] = {}
    for rank in ranks:
        assert len(rank["micro_steps"]) == len(rank["prompts"]) == 4
        for prompt, micro in zip(rank["prompts"], rank["micro_steps"]):
            expected = sum(sampled_tokens(t) for t in recorded[prompt])
            assert micro["tokens"] == expected < sum(len(t["completion_ids"]) for t in recorded[prompt])
            step_tokens[micro["step"]] = step_tokens.get(micro["step"], 0) + expected
    for rank in ranks:
        assert [m["normaliser"] for m in rank["micro_steps"]] == [step_tokens[m["step"]] for m in rank["micro_steps"]]
    one = json.loads((runs[1] / "mt_dapo.rank0.json").read_text())["micro_steps"]
    assert sorted({m["step"]: m["normaliser"] for m in one}.items()) == sorted(step_tokens.items())
    # bnpo: the micro-batch's tokens over both ranks
    bnpo = [json.loads((runs[2] / f"mt_bnpo.rank{r}.json").read_text())["micro_steps"] for r in (0, 1)]
    assert [a["normaliser"] for a in bnpo[0]] == [a["tokens"] + b["tokens"] for a, b in zip(*bnpo)]
