"""Runner: exact resume, checkpoint validation, interruption safety, the train command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from locomotion.config import load_config
from locomotion.rl.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from locomotion.rl.runner import Runner, learner_threads
from locomotion.sim.threads import plan_threads
from locomotion.tasks import make_env

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["num_envs=16", "algo.num_steps=8", "task.episode_length_s=0.5",
         "algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]",
         "logging.tensorboard=false", "logging.save_interval=2"]


def make_runner(tmp: Path, overrides: list[str] = ()) -> Runner:
    cfg = load_config("train", SMALL + list(overrides))
    return Runner(make_env(cfg), cfg, log_dir=tmp)


def params(runner: Runner) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in runner.policy.parameters()])


@pytest.mark.parametrize("reset", ["staggered", "sync"])
def test_resume_continues_bit_for_bit(tmp_path, reset):
    straight = make_runner(tmp_path / "a", [f"reset={reset}"])
    straight.learn(4)
    first = make_runner(tmp_path / "b", [f"reset={reset}"])
    first.learn(2)
    resumed = make_runner(tmp_path / "c", [f"reset={reset}"])
    resumed.load(first.checkpoint_path)
    assert resumed.iteration == 2
    resumed.learn(2)
    assert torch.equal(params(straight), params(resumed))
    assert torch.equal(straight.env.obs["critic"], resumed.env.obs["critic"])
    assert straight.env_steps == resumed.env_steps


def test_corrupt_and_foreign_checkpoints_are_refused(tmp_path):
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"\x80\x04 this is not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint(corrupt)
    foreign = tmp_path / "foreign.pt"
    torch.save({"model_state_dict": {}}, foreign)
    with pytest.raises(CheckpointError, match="not a locomotion checkpoint"):
        load_checkpoint(foreign)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")
    runner = make_runner(tmp_path / "run")
    other = runner.state_dict()
    other["observation_sizes"] = {"policy": 7, "critic": 9}
    save_checkpoint(tmp_path / "other.pt", other)
    with pytest.raises(CheckpointError, match="this run has"):
        runner.load(tmp_path / "other.pt")


def test_interrupt_leaves_a_loadable_checkpoint(tmp_path):
    runner = make_runner(tmp_path)

    def interrupt(r: Runner, stats: dict) -> bool:
        if r.iteration == 3:
            raise KeyboardInterrupt
        return False

    with pytest.raises(KeyboardInterrupt):
        runner.learn(10, should_stop=interrupt)
    data = load_checkpoint(runner.checkpoint_path)
    assert data["iteration"] == 3
    assert not list(runner.checkpoint_path.parent.glob(".*.tmp"))


@pytest.mark.subprocess
@pytest.mark.slow
def test_train_command_survives_ctrl_c(tmp_path):
    """The real command: SIGINT mid-run still writes a checkpoint that resumes."""
    base = [sys.executable, str(ROOT / "scripts" / "train.py"), *SMALL, "reset=sync",
            "logging.print_interval=1"]
    cmd = [*base, "max_iterations=1000", f"hydra.run.dir={tmp_path}"]
    # A shell's background job inherits SIGINT ignored, and Python then never raises
    # KeyboardInterrupt; a terminal's Ctrl-C reaches a process with the default disposition.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("it ") and int(line.split()[1]) >= 3:
            proc.send_signal(signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=120)
    ckpt = tmp_path / "checkpoints" / "latest.pt"
    assert ckpt.is_file(), "".join(lines)
    assert load_checkpoint(ckpt)["iteration"] >= 3
    # Two lines, no traceback: where the checkpoint and logs are, and how to continue.
    assert proc.returncode == 130 and "Traceback" not in rest, rest
    tail = rest.strip().splitlines()[-2:]
    assert tail[0].startswith(f"interrupted: checkpoint {ckpt}, logs: tensorboard --logdir")
    assert tail[1].startswith("continue with: locomotion-train ") and \
        tail[1].endswith(f"run_dir={tmp_path}")
    # resume= continues in the checkpoint's own run folder
    resumed = subprocess.run([*base, "max_iterations=6", f"resume={ckpt}"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert load_checkpoint(ckpt)["iteration"] == 6
    assert not (tmp_path / "runs").exists()


@pytest.mark.subprocess
@pytest.mark.slow
def test_a_quiet_run_shows_signs_of_life_from_the_first_iteration(tmp_path):
    """Not on a terminal: a line when the env is built, the warm-up's first step, and the
    first iteration's line without waiting for logging.print_interval."""
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), *SMALL,
                          "reset=staggered", "max_iterations=2", "logging.print_interval=50",
                          "export=false", f"run_dir={tmp_path}"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("env: 16 envs of go1 on flat_velocity, native physics on cpu (")
    assert "torch threads" in lines[0] and "usable cores)" in lines[0]
    assert lines[1].startswith("warm-up: step 0/")
    assert lines[2].startswith("it     1 ")


@pytest.mark.subprocess
@pytest.mark.slow
def test_bad_config_values_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="valid"):
        make_runner(tmp_path, ["algo.ppo.schedule=sometimes"])
    with pytest.raises(ValueError, match="activation"):
        make_runner(tmp_path, ["algo.policy.activation=swish"])
    bad_key = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), "num_env=3"],
                             capture_output=True, text=True, timeout=120)
    assert bad_key.returncode == 2 and "num_env" in bad_key.stderr
    bad_group = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"),
                                "reset=sometimes"], capture_output=True, text=True, timeout=120)
    assert bad_group.returncode == 2 and "staggered" in bad_group.stderr


def test_logged_episode_statistics_leave_out_partial_episodes(tmp_path):
    """Staggered starts end many first episodes within the first rollout; those are partial
    (their return covers a few steps) and stay out of the logged means."""
    runner = make_runner(tmp_path, ["reset=staggered", "task.episode_length_s=0.3"])
    runner.start()  # the warm-up: half the envs begin training 7 of 15 steps in
    ended = []
    step = runner.env.step

    def counting_step(actions):
        out = step(actions)
        if "episode" in out[4]:
            ended.append(out[4]["episode"]["partial"])
        return out

    runner.env.step = counting_step
    first = runner.train_iteration()["episodes"]
    assert ended and torch.cat(ended).all()  # only the envs started 7 steps in
    assert first == {}
    later = [runner.train_iteration()["episodes"] for _ in range(3)]
    whole = int(sum((p == 0).sum() for p in ended))
    assert whole > 0 and sum(e.get("count", 0) for e in later) == whole
    assert all("partial" not in e and "subtask" not in e for e in later)


def test_the_update_runs_on_the_learner_threads_and_collecting_on_the_torch_ones(tmp_path):
    runner = make_runner(tmp_path, ["reset=sync", "learner_threads=3"])
    seen = []
    update = runner.ppo.update

    def recording(storage):
        seen.append(torch.get_num_threads())
        return update(storage)

    runner.ppo.update = recording
    runner.train_iteration()
    assert seen == [3]
    assert torch.get_num_threads() == runner.env.threads.torch == 1


def test_learner_threads_auto_takes_the_cores_the_rollout_kept_busy():
    plan = plan_threads(None, None, cpu_physics=True, cores=3, learner_threads="auto")
    torch.set_num_threads(plan.torch)
    with learner_threads(plan, 2.8):  # an idle machine: the rollout had all three cores
        assert torch.get_num_threads() == 3
    with learner_threads(plan, 1.1):  # other jobs took two of them
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 1


def test_init_policy_starts_a_new_run_from_another_runs_policy(tmp_path):
    """A walking policy moves to a wider randomization preset: a new run (its own env,
    optimizer and counters) whose policy starts as the other run's; resume would refuse."""
    first = make_runner(tmp_path / "a")
    first.learn(2)
    source = first.save()
    first.env.close()
    widened = make_runner(tmp_path / "b", ["randomization=robust"])
    with pytest.raises(CheckpointError, match="randomization=none"):
        widened.load(source)
    widened.init_policy(source)
    assert torch.equal(params(widened), params(first)) and widened.iteration == 0
    widened.learn(1)
    assert widened.iteration == 1 and not torch.equal(params(widened), params(first))
    widened.env.close()

    other = make_runner(tmp_path / "c", ["algo.policy.actor_hidden_dims=[16,16]"])
    with pytest.raises(CheckpointError, match=r"actor_hidden_dims \[32,32\] \(this run: "
                                              r"\[16,16\]\): use algo.policy"):
        other.init_policy(source)
    other.env.close()
