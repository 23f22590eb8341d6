"""The demo report's statistics (scripts/demo_report.py) on hand-computed cases; no model is loaded."""
import importlib.util
import sys

import pytest
from paths import REPO

ROOT = REPO


@pytest.fixture(scope="module")
def dr():
    spec = importlib.util.spec_from_file_location("demo_report", ROOT / "scripts" / "demo_report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_mean_at_k(dr):
    # prompt 1: 2 of 4 right (0.5), prompt 2: 4 of 4 (1.0), prompt 3: 0 of 4 (0.0) -> 1.5 / 3
    assert dr.mean_at_k([[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]]) == pytest.approx(0.5)
    # per-prompt mean first, then over prompts: not the pooled share when groups differ in size
    assert dr.mean_at_k([[1], [0, 0, 0]]) == pytest.approx(0.5)


def test_percentile_interpolates_like_numpy(dr):
    values = [4.0, 1.0, 3.0, 2.0]  # sorted 1, 2, 3, 4; position q * 3
    assert dr.percentile(values, 0.0) == 1.0
    assert dr.percentile(values, 1.0) == 4.0
    assert dr.percentile(values, 0.5) == pytest.approx(2.5)
    assert dr.percentile(values, 0.25) == pytest.approx(1.75)


def test_bootstrap_ci_constant_scores_is_a_point(dr):
    assert dr.bootstrap_ci([0.25] * 10, n_boot=200) == (pytest.approx(0.25), pytest.approx(0.25))


def test_bootstrap_ci_two_prompts(dr):
    # scores 0 and 1: a resample's mean is 0 (p 1/4), 0.5 (p 1/2) or 1 (p 1/4), so the 2.5% and 97.5%
    # quantiles of the bootstrap distribution are 0 and 1
    assert dr.bootstrap_ci([0.0, 1.0], n_boot=4000, seed=1) == (0.0, 1.0)


def test_bootstrap_ci_is_deterministic_and_brackets_the_mean(dr):
    scores = [0.0, 0.25, 0.5, 0.75, 1.0, 0.0, 0.0, 0.25]
    lo, hi = dr.bootstrap_ci(scores, n_boot=2000, seed=3)
    assert (lo, hi) == dr.bootstrap_ci(scores, n_boot=2000, seed=3)
    assert lo < dr.mean(scores) < hi


def test_paired_bootstrap_diff(dr):
    # every prompt gains exactly 0.25: the difference and both ends of its interval are 0.25
    before = [0.0, 0.5, 0.25, 0.75]
    diff, lo, hi = dr.paired_bootstrap_diff(before, [b + 0.25 for b in before], n_boot=500)
    assert (diff, lo, hi) == (pytest.approx(0.25), pytest.approx(0.25), pytest.approx(0.25))
    # differences 0 and 1 -> mean 0.5, interval [0, 1] as in the two-prompt case above
    assert dr.paired_bootstrap_diff([0.5, 0.0], [0.5, 1.0], n_boot=4000, seed=1) == (0.5, 0.0, 1.0)
    with pytest.raises(ValueError):
        dr.paired_bootstrap_diff([0.0], [0.0, 1.0])


def test_sparkline(dr):
    assert dr.sparkline([0.0, 0.5, 1.0]) == "▁▅█"
    assert dr.sparkline([0.125, 0.25, 0.375], lo=0.0, hi=0.5) == "▃▅▇"
    assert dr.sparkline([-1.0, 2.0]) == "▁█"  # clipped to the scale
