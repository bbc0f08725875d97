"""Checkpoints move between devices and backends: a CPU run continues on a GPU and back.

Random states are saved per device kind (a CUDA generator's state is 16 bytes, a CPU one's
5056); the GPU sides are checked here with torch.cuda's functions replaced, the physics
hand-over between the native and the Warp backend on Warp's CPU device.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from locomotion.config import load_config
from locomotion.envs.generators import restore_generator
from locomotion.rl.checkpoint import load_checkpoint, save_checkpoint
from locomotion.rl.runner import Runner, restore_rng_states, rng_states
from locomotion.tasks import make_env

SMALL = ["num_envs=8", "algo.num_steps=8", "task.episode_length_s=0.5", "reset=sync",
         "algo.policy.actor_hidden_dims=[32]", "algo.policy.critic_hidden_dims=[32]",
         "logging.tensorboard=false", "randomization=robust"]
CUDA_STATE = torch.arange(16, dtype=torch.uint8)  # what a CUDA generator's state looks like


def runner(tmp, *overrides: str) -> Runner:
    cfg = load_config("train", [*SMALL, *overrides])
    return Runner(make_env(cfg), cfg, log_dir=tmp)


def test_rng_payload_on_the_cpu(tmp_path):
    """A CPU run saves torch's CPU state and the mini-batch generator's, nothing for a GPU;
    the checkpoint loads with weights_only (load_checkpoint)."""
    r = runner(tmp_path)
    r.train_iteration()
    path = r.save()
    rng = load_checkpoint(path)["rng"]
    assert set(rng) == {"torch", "ppo"}
    assert all(isinstance(v, torch.Tensor) and v.dtype == torch.uint8 for v in rng.values())
    r.env.close()


def test_rng_payload_on_a_gpu(monkeypatch):
    """On CUDA the device generator (the policy's action noise) is saved and restored; a
    CPU checkpoint on CUDA seeds it from the saved CPU state, with a note."""
    saved, seeds = [], []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: CUDA_STATE.clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, device: saved.append(s))
    monkeypatch.setattr(torch.cuda, "manual_seed", seeds.append)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    gpu, gen = torch.device("cuda", 0), torch.Generator().manual_seed(1)
    states = rng_states(gpu, gen)
    assert set(states) == {"torch", "ppo", "cuda"} and torch.equal(states["cuda"], CUDA_STATE)
    assert restore_rng_states(states, gpu, gen) == [] and torch.equal(saved[0], CUDA_STATE)
    cpu_states = rng_states(torch.device("cpu"), gen)
    notes = restore_rng_states(cpu_states, gpu, gen)
    assert len(notes) == 1 and "CPU run" in notes[0] and len(seeds) == 1
    restore_rng_states(cpu_states, gpu, gen)
    assert seeds[1] == seeds[0]  # the same stream on every resume of one checkpoint
    assert restore_rng_states(states, torch.device("cpu"), gen) == []  # GPU state unused


def test_generator_state_of_another_device():
    """A state that fits continues exactly; one saved on another kind of device seeds the
    generator from its bytes, the same way every time."""
    gen = torch.Generator().manual_seed(5)
    state = gen.get_state()
    expected = torch.rand(3, generator=gen)
    assert restore_generator(gen, state) and torch.equal(torch.rand(3, generator=gen), expected)
    a, b = torch.Generator(), torch.Generator()
    assert not restore_generator(a, CUDA_STATE) and not restore_generator(b, CUDA_STATE)
    assert torch.equal(torch.rand(3, generator=a), torch.rand(3, generator=b))


def test_gpu_env_state_resumes_on_the_cpu(tmp_path):
    """A checkpoint whose env and noise generators were CUDA's resumes on the CPU with a note
    per stream, and trains on."""
    r = runner(tmp_path / "a")
    r.train_iteration()
    data = r.state_dict()
    data["env"]["generator"] = CUDA_STATE.clone()
    data["env"]["randomizer"]["noise_gen"] = CUDA_STATE.clone()
    data["rng"]["cuda"] = CUDA_STATE.clone()
    path = save_checkpoint(tmp_path / "gpu.pt", data)
    r.env.close()
    resumed = runner(tmp_path / "b")
    resumed.load(path)
    assert len(resumed.resume_notes) == 2
    assert all("another kind of device than cpu" in n for n in resumed.resume_notes)
    assert resumed.train_iteration()["iteration"] == 2
    resumed.env.close()


@pytest.mark.warp
@pytest.mark.slow
@pytest.mark.parametrize("first, then", [("native", "warp"), ("warp", "native")])
def test_resume_on_the_other_backend(tmp_path, first, then):
    """A native (CPU) run continues on sim=warp, and a Warp run on native MuJoCo: the
    physics state is carried over (within float32) and training goes on."""
    a = runner(tmp_path / "a", f"sim={first}")
    a.train_iteration()
    path = a.save()
    qpos = a.env.sim.qpos.double().clone()
    a.env.close()
    b = runner(tmp_path / "b", f"sim={then}")
    b.load(path)
    torch.testing.assert_close(b.env.sim.qpos.double(), qpos, rtol=0, atol=1e-6)
    assert b.resume_notes == []  # both on the CPU: every random stream continues
    stats = b.train_iteration()
    assert stats["iteration"] == 2 and torch.isfinite(b.env.obs["policy"]).all()
    b.env.close()
