"""Where things are, for tests at any depth of tests/ (unit/<package>/, e2e/, repo/)."""
from pathlib import Path

HELPERS = Path(__file__).resolve().parent
TESTS = HELPERS.parent
REPO = TESTS.parent
