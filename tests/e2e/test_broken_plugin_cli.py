"""The real `swiftlike rlhf` with an `--external_plugins` file that fails to import: the run stops with the file
named and the import's own error, before anything about the model is touched (here the model does not even
exist, so any earlier step would have reported that instead), and writes no run directory."""
from __future__ import annotations

from cli import run_cli


def test_a_plugin_that_fails_to_import_stops_the_run_before_the_model(tmp_path):
    plugin = tmp_path / "my_scheduler_plugin.py"
    plugin.write_text("from swiftlike.rollout.multi_turn import register_scheduler\n"
                      "import sandbox_lib_that_is_not_installed\n")
    out = tmp_path / "out"
    done = run_cli("rlhf", "--rlhf_type", "grpo", "--model", tmp_path / "no_such_model", "--dataset",
                   "swiftlike/calculator-agent#8", "--reward_funcs", "accuracy", "--external_plugins", plugin,
                   "--multi_turn_scheduler", "my_scheduler", "--max_steps", "1", "--output_dir", out, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == (f"swiftlike rlhf: error: --external_plugins {plugin}: importing it failed: "
                                   "ModuleNotFoundError: No module named 'sandbox_lib_that_is_not_installed'")
    assert not out.exists()
