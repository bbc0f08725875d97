"""Loading a checkpoint never runs code from it; checkpoints hold tensors and plain values."""

from __future__ import annotations

import builtins
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from locomotion.config import load_config
from locomotion.evaluation.policies import PolicyLoadError, load_policy
from locomotion.multitask import training_hooks
from locomotion.rl.checkpoint import (
    FORMAT,
    VERSION,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from locomotion.rl.runner import Runner
from locomotion.tasks import make_env

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = [ROOT / "robots" / "go1" / "pretrained" / "checkpoint.pt",
           ROOT / "robots" / "go1" / "pretrained_nominal" / "checkpoint.pt"]
SMALL = ["num_envs=16", "algo.num_steps=8", "task.episode_length_s=0.5", "reset=sync",
         "algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]",
         "logging.tensorboard=false", "logging.save_interval=2"]


class RunsCode:
    """Unpickling this runs ``exec``: it writes ``marker``."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (builtins.exec, (f"open({self.marker!r}, 'w').write('ran')",))


def crafted_checkpoint(path: Path, marker: Path) -> Path:
    """A shipped policy checkpoint with an object inside that runs code when unpickled."""
    data = load_checkpoint(SHIPPED[0])
    data["config"]["note"] = RunsCode(marker)
    torch.save(data, path)
    return path


def make_runner(tmp: Path, overrides: list[str] = ()) -> Runner:
    cfg = load_config("train", SMALL + list(overrides))
    env = make_env(cfg)
    return Runner(env, cfg, log_dir=tmp, hooks=training_hooks(env, cfg, None))


@pytest.fixture
def crafted(tmp_path):
    marker = tmp_path / "marker.txt"
    path = crafted_checkpoint(tmp_path / "crafted.pt", marker)
    yield path
    assert not marker.exists(), "loading the crafted checkpoint ran its code"


def test_the_crafted_checkpoint_would_run_code_if_loaded_unsafely(tmp_path):
    """The file the other tests refuse is a real threat: an unsafe load runs its code."""
    marker = tmp_path / "control.txt"
    path = crafted_checkpoint(tmp_path / "crafted.pt", marker)
    torch.load(path, weights_only=False)
    assert marker.read_text() == "ran"


def test_load_checkpoint_refuses_code(crafted):
    with pytest.raises(CheckpointError, match=r"refused.*builtins\.exec"):
        load_checkpoint(crafted)


def test_evaluator_refuses_code(crafted):
    with pytest.raises(PolicyLoadError, match="refused"):
        load_policy(crafted)


def test_export_refuses_code(crafted, tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from locomotion.export import export_checkpoint

    with pytest.raises(CheckpointError, match="refused"):
        export_checkpoint(crafted, tmp_path / "exported")
    assert not (tmp_path / "exported").exists()


def test_resume_refuses_code(crafted, tmp_path):
    runner = make_runner(tmp_path / "run")
    try:
        with pytest.raises(CheckpointError, match="refused"):
            runner.load(crafted)
    finally:
        runner.env.close()


@pytest.mark.subprocess
@pytest.mark.slow
def test_play_command_refuses_code(crafted, tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "play.py"),
                           f"checkpoint={crafted}", "video=false", "num_envs=2",
                           f"hydra.run.dir={tmp_path / 'play'}"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode != 0
    assert "refused" in done.stderr, done.stderr[-2000:]


def test_checkpoints_from_before_safe_loading_are_a_clear_error(tmp_path):
    """Training checkpoints once held numpy arrays of physics state: refused, not unpickled."""
    data = load_checkpoint(SHIPPED[0])
    data["env"] = {"sim": {"state": np.zeros((4, 3))}}
    old = tmp_path / "old.pt"
    torch.save(data, old)
    with pytest.raises(CheckpointError,
                       match="predates safe checkpoints.*policy-only export.*re-train"):
        load_checkpoint(old)


def test_save_refuses_what_safe_loading_could_not_read(tmp_path):
    with pytest.raises(TypeError, match=r"\['env'\]\['state'\] is a numpy.ndarray"):
        save_checkpoint(tmp_path / "x.pt", {"env": {"state": np.zeros(3)}})
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("overrides", [[], ["task=multitask"],
                                       ["task=rough", "randomization=robust"]],
                         ids=["flat", "multitask", "rough-robust"])
def test_training_checkpoints_load_with_weights_only(tmp_path, overrides):
    """Everything a run saves (physics, randomizer, curriculum, subtasks, scheduler, RNG
    states, config) is a tensor or a plain value, and resuming from it still works."""
    runner = make_runner(tmp_path / "run", overrides)
    try:
        runner.learn(2)
    finally:
        runner.env.close()
    data = torch.load(runner.checkpoint_path, weights_only=True)
    assert data["format"] == FORMAT and data["version"] == VERSION
    assert isinstance(data["env"]["sim"]["state"], torch.Tensor)
    assert data["env"]["sim"]["state"].dtype == torch.float64
    resumed = make_runner(tmp_path / "resumed", overrides)
    try:
        resumed.load(runner.checkpoint_path)
        assert resumed.iteration == 2
        assert torch.equal(torch.from_numpy(resumed.env.sim.state), data["env"]["sim"]["state"])
    finally:
        resumed.env.close()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.parent.name)
def test_shipped_checkpoints_load_with_weights_only(path):
    data = torch.load(path, weights_only=True)
    assert data["format"] == FORMAT and data["inference_only"]
    load_policy(path)


def test_stale_temporary_checkpoints_are_removed_when_a_run_starts(tmp_path):
    """``kill -9`` while saving leaves ``.latest.pt.<random>.tmp``: the next start deletes it."""
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    stale = [folder / ".latest.pt.k3j_x9a1.tmp", folder / ".best.pt.abcdefgh.tmp"]
    for p in stale:
        p.write_bytes(b"half a checkpoint")
    kept = [folder / "latest.pt.bak", folder / "notes.tmp"]
    for p in kept:
        p.write_text("mine")
    runner = make_runner(tmp_path / "run")
    try:
        assert not any(p.exists() for p in stale)
        assert all(p.exists() for p in kept)
        runner.learn(1)
    finally:
        runner.env.close()
    assert load_checkpoint(runner.checkpoint_path)["iteration"] == 1
