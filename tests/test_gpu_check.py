"""scripts/gpu_check.py --dry-run: every stage of the GPU check runs on the CPU.

Run the way an offline GPU host runs it: the third-party packages on PYTHONPATH (this
environment's site-packages, whose .pth files, an editable install among them, are then
not read), so the check has to install the checkout itself first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU_STAGES = ["cuda_tests", "sync", "benchmark", "train_flat", "train_rough", "resume",
              "torchrun"]


@pytest.mark.slow
@pytest.mark.warp
@pytest.mark.subprocess
def test_dry_run_goes_through_every_stage(tmp_path):
    python = getattr(sys, "_base_executable", sys.executable)
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    run = subprocess.run([python, str(ROOT / "scripts" / "gpu_check.py"), "--dry-run",
                          "--out", str(tmp_path)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["dry_run"] and report["passed"]
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == ["host", "package", *GPU_STAGES]
    assert report["needs_gpu"] == GPU_STAGES
    assert stages["cuda_tests"]["status"] == "needs_gpu"  # they skip without CUDA
    assert stages["cuda_tests"]["skipped"] >= 2
    assert all(stages[s]["status"] == "passed" for s in stages if s != "cuda_tests")
    for config in ("flat", "rough_robust"):
        assert stages["sync"]["configs"][config]["env_step_reads"] == 0
    assert stages["resume"]["resumed"] and stages["resume"]["last_iteration"] == 3
    assert stages["torchrun"]["backend"] == "gloo"
    assert stages["benchmark"]["results"][0]["env_steps_per_s"] > 0
    assert "needs a GPU" in run.stdout and (tmp_path / "gpu_check.log").stat().st_size > 0
