"""`swiftlike eval`: the backends (evalscope, lm-evaluation-harness, ours in builtin.py), the model served to
them (served.py), our sets and their checking (data.py, scoring.py), the one report layout (report.py), the
run (run.py), every checkpoint of a training run (checkpoints.py) and eval during training (during_training.py)."""
