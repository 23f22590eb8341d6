"""Where a test run's time goes, beyond what `--durations` shows: the seconds each fixture's setup took.

`--durations=0` and the JUnit XML give each test's setup, call and teardown, but a session fixture's cost lands
on whichever test first asked for it, so a slow engine start reads as a slow test. This plugin records every
fixture setup (name, scope, the test that triggered it, seconds) and writes them as JSON to the path in
`$SWIFTLIKE_FIXTURE_TIMES` at the session's end; `scripts/test_times.py` sums them beside the per-file table.
"""
from __future__ import annotations

import json
import os
import time

import pytest

_SETUPS: list[dict] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    start = time.perf_counter()
    yield
    node = getattr(request, "node", None)
    _SETUPS.append({"fixture": fixturedef.argname, "scope": fixturedef.scope,
                    "nodeid": getattr(node, "nodeid", ""), "seconds": round(time.perf_counter() - start, 3)})


def pytest_sessionfinish(session):
    path = os.environ.get("SWIFTLIKE_FIXTURE_TIMES")
    if not path:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:  # one file per xdist worker, merged by the report
        path = f"{path}.{worker}"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(_SETUPS, f)
    os.replace(path + ".tmp", path)
