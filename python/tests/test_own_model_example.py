"""examples/own_model.py end to end: a PyTorch module defined there is exported with PyTorch's
exporter, compiled by straitc for a 2-host cluster in 2 pipeline stages, trained by one
strait-run launcher per host, and its saved parameters are loaded back into the module by name;
PyTorch's forward on the held-out digits must then classify far above chance (10 %)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from jobutil import ROOT, needs_gpt2_tiny

pytestmark = needs_gpt2_tiny()  # straitc and strait-run built


def test_own_model_round_trip(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "own_model.py"),
                        "--steps", "250", "--min-accuracy", "0.8", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    m = re.search(r"own_model: (\d+) parameters loaded into PyTorch; final training loss (\S+); "
                  r"held-out accuracy \(PyTorch forward\) (\S+)", p.stdout)
    assert m, p.stdout[-3000:]
    assert int(m.group(1)) == 19  # every parameter of the module, by its state_dict name
    assert float(m.group(3)) >= 0.8
    # Each launcher started only its host's ranks.
    assert "rank 0 pid" in p.stdout and "rank 3 pid" in p.stdout
    # The export kept every parameter: straitc did not warn about folded ones.
    assert "not initializers of the graph" not in p.stdout + p.stderr
