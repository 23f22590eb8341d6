"""Sum a test run's durations per file, per tier and per fixture setup: `make test` writes the inputs.

Reads the JUnit XML (`--junitxml`; each test case's time is its setup, call and teardown together) and the
fixture setups recorded by tests/helpers/timings_plugin.py (`$SWIFTLIKE_FIXTURE_TIMES`, one JSON file per
xdist worker), and prints Markdown tables, largest first, that docs/testing.md quotes.

    python scripts/test_times.py build/test-results/junit.xml build/test-results/fixtures.json [--top 30]
"""
from __future__ import annotations

import argparse
import glob
import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def test_cases(junit_path: str) -> list[tuple[str, str, float]]:
    """(file, test name, seconds) for every test case in the report, skipped ones included (they cost setup)."""
    cases = []
    for case in ET.parse(junit_path).getroot().iter("testcase"):
        classname = case.get("classname", "")
        # pytest writes "tests.e2e.test_x" or "tests.e2e.test_x.TestClass": the file ends at the test_* part
        parts = classname.split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        path = "/".join(parts) + ".py" if parts else classname
        cases.append((path, case.get("name", ""), float(case.get("time", 0.0))))
    return cases


def fixture_setups(pattern: str) -> list[dict]:
    setups = []
    for path in sorted(glob.glob(pattern) + glob.glob(pattern + ".*")):
        setups.extend(json.loads(Path(path).read_text()))
    return setups


def tier(path: str) -> str:
    parts = path.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


def table(rows: list[tuple], header: tuple[str, ...]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", help="the JUnit XML that pytest --junitxml wrote")
    parser.add_argument("fixtures", nargs="?", help="the fixture-setup JSON ($SWIFTLIKE_FIXTURE_TIMES)")
    parser.add_argument("--top", type=int, default=30, help="rows per table")
    args = parser.parse_args()

    cases = test_cases(args.junit)
    per_file: dict[str, list[float]] = defaultdict(list)
    for path, _, seconds in cases:
        per_file[path].append(seconds)
    per_tier: dict[str, list[float]] = defaultdict(list)
    for path, seconds in per_file.items():
        per_tier[tier(path)].extend(seconds)
    total = sum(s for _, _, s in cases)
    print(f"{len(cases)} tests, {total:.0f} s in tests (setup + call + teardown)\n")
    print(table([(t, len(s), f"{sum(s):.0f}") for t, s in sorted(per_tier.items(), key=lambda kv: -sum(kv[1]))],
                ("tier", "tests", "seconds")))
    print()
    files = sorted(per_file.items(), key=lambda kv: -sum(kv[1]))[:args.top]
    print(table([(f, len(s), f"{sum(s):.1f}", f"{max(s):.1f}") for f, s in files], ("file", "tests", "seconds", "slowest")))
    if args.fixtures:
        setups = fixture_setups(args.fixtures)
        per_fixture: dict[tuple[str, str], list[float]] = defaultdict(list)
        for setup in setups:
            per_fixture[setup["fixture"], setup["scope"]].append(setup["seconds"])
        rows = sorted(per_fixture.items(), key=lambda kv: -sum(kv[1]))[:args.top]
        print()
        print(table([(name, scope, len(s), f"{sum(s):.1f}") for (name, scope), s in rows],
                    ("fixture", "scope", "setups", "seconds")))


if __name__ == "__main__":
    main()
