"""The registry tables in docs/ are generated; a registry change without regenerating fails here."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_docs_tables_match_registries():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs_tables.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
