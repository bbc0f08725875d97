"""The base install (no export, no plot extras) trains to a clean exit and evaluates."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HIDDEN = ("onnx", "onnxscript", "onnxruntime", "matplotlib")

# Run a command as if the optional packages were not installed: an import of any of them
# fails exactly as it does when the package is absent.
PROLOGUE = ("import runpy, sys\n"
            "for name in {hidden!r}:\n"
            "    sys.modules[name] = None\n"
            "sys.argv = {argv!r}\n"
            "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")


def run_without_extras(module: str, *args: str, cwd) -> subprocess.CompletedProcess:
    code = PROLOGUE.format(hidden=HIDDEN, argv=[module, *args], module=module)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.subprocess
@pytest.mark.slow
def test_train_and_evaluate_without_export_or_plot_packages(tmp_path):
    train = run_without_extras(
        "locomotion.commands.train", "num_envs=16", "max_iterations=1", "algo.num_steps=8",
        "logging.tensorboard=false", "torch_threads=1", f"run_dir={tmp_path / 'run'}",
        cwd=tmp_path)
    assert train.returncode == 0, train.stdout + train.stderr
    assert "Traceback" not in train.stderr
    assert "export skipped: onnx, onnxscript, onnxruntime not installed" in train.stdout
    assert (tmp_path / "run" / "checkpoints" / "latest.pt").is_file()

    out = tmp_path / "eval"
    evaluate = run_without_extras(
        "locomotion.commands.evaluate", f"policy={tmp_path / 'run/checkpoints/latest.pt'}",
        "suite=quick", "axes=[push]", "episodes_per_level=4", f"out={out}", cwd=tmp_path)
    assert evaluate.returncode == 0, evaluate.stdout + evaluate.stderr
    assert "no figures" in evaluate.stdout
    report = json.loads((out / "report.json").read_text())
    assert "push" in report["sweeps"] and (out / "report.md").is_file()
    assert not list(out.glob("*.png"))
