"""`swiftlike eval`: benchmarks (data.py), answer checking and pass@k (scoring.py), the run and its report
(run.py)."""
