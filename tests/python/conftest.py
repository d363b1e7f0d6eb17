"""Shared helpers of the Python package's tests: the reckon binary the results are compared with
(RECKON_BIN, set by ctest; else build/reckon), and the PyTorch twins of the zoo (scripts/torch_models.py)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))


def reckon_bin() -> str:
    return os.environ.get("RECKON_BIN") or os.path.join(ROOT, "build", "reckon")


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Runs the reckon binary; stdout and stderr as text."""
    p = subprocess.run([reckon_bin(), *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"reckon {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


def cli_json(*args: str):
    return json.loads(cli(*args, "--json").stdout)


@pytest.fixture(scope="session")
def torch_models():
    import torch_models as tm  # scripts/torch_models.py
    return tm
