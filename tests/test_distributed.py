"""Data-parallel training: statistics merging, and a real 2-process gloo group that trains,
checkpoints and resumes.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessExitedException

from locomotion.config import load_config
from locomotion.rl import PPO, ActorCritic, PPOConfig, RolloutStorage
from locomotion.rl.checkpoint import load_checkpoint
from locomotion.rl.distributed import (
    RANK_SEED_STRIDE,
    Distributed,
    merge_rank_statistics,
    run_dir_overrides,
)
from locomotion.rl.normalizer import EmpiricalNormalizer, combine_stats
from locomotion.rl.runner import Runner, run_training
from locomotion.tasks import make_env

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["num_envs=8", "algo.num_steps=8", "task.episode_length_s=0.5",
         "algo.policy.actor_hidden_dims=[16,16]", "algo.policy.critic_hidden_dims=[16,16]",
         "algo.ppo.num_learning_epochs=2", "algo.ppo.num_mini_batches=2",
         "logging.tensorboard=false", "logging.save_interval=2", "export=false"]
WORLD = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flat_params(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in module.parameters()])


# ---------------------------------------------------------------------------- no processes
def test_combined_statistics_are_those_of_the_union():
    gen = torch.Generator().manual_seed(0)
    chunks = [torch.randn(n, 5, generator=gen) * (i + 1) + 3 * i
              for i, n in enumerate((40, 7, 0, 113))]
    probe = EmpiricalNormalizer(5)
    count, mean, m2 = combine_stats([probe.batch_stats(c) for c in chunks])
    union = torch.cat(chunks)
    assert int(count) == len(union)
    torch.testing.assert_close(mean, union.mean(0))
    torch.testing.assert_close(m2 / count, union.var(0, unbiased=False))
    # Merged into running statistics it equals updating with the union.
    merged, direct = EmpiricalNormalizer(5), EmpiricalNormalizer(5)
    for n in (merged, direct):
        n.update(torch.randn(30, 5, generator=torch.Generator().manual_seed(1)))
    merged.merge(count, mean, m2)
    direct.update(union)
    for name in ("mean", "var", "count"):
        torch.testing.assert_close(getattr(merged, name), getattr(direct, name))


def test_group_statistics_weight_ranks_by_their_data():
    ranks = [
        {"losses": {"value_loss": 1.0}, "episodes": {"return": 2.0, "length": 10.0, "count": 1.0},
         "histogram": [1.0, 0.0], "steps": 100, "diverged": 1},
        {"losses": {"value_loss": 3.0}, "episodes": {"return": 5.0, "length": 40.0, "count": 3.0},
         "histogram": [0.0, 1.0], "steps": 300, "diverged": 2},
        {"losses": {"value_loss": 5.0}, "episodes": {}, "histogram": [0.5, 0.5], "steps": 0,
         "diverged": 0},
    ]
    group = merge_rank_statistics(ranks)
    assert group["losses"]["value_loss"] == pytest.approx(3.0)
    assert group["episodes"]["return"] == pytest.approx((2.0 + 15.0) / 4)
    assert group["episodes"]["length"] == pytest.approx((10.0 + 120.0) / 4)
    assert group["episodes"]["count"] == 4
    assert group["histogram"].tolist() == pytest.approx([0.25, 0.75])
    assert group["steps"] == 400 and group["diverged"] == 3
    assert 0.0 < group["uniformity"] < 1.0


def test_run_directory_is_fixed_per_launch():
    launch = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1",
              "TORCHELASTIC_RUN_ID": "0b5a1c6e-3f7d-4b8e-9a2c-5d6e7f8a9b0c"}
    assert run_dir_overrides(["num_envs=8"], {}) == []  # a plain run keeps Hydra's directory
    assert run_dir_overrides(["run_dir=runs/x"], {}) == ["hydra.run.dir=${run_dir}"]
    derived = run_dir_overrides(["num_envs=8"], launch)
    assert derived == ["run_dir=runs/torchrun_0b5a1c6e_${robot_name:}_${task.name}",
                       "hydra.run.dir=${run_dir}"]
    assert run_dir_overrides(["num_envs=8"], {**launch, "TORCHELASTIC_RUN_ID": "job 7"})[0] \
        .startswith("run_dir=runs/torchrun_job-7_")
    assert run_dir_overrides(["num_envs=8"], {**launch, "TORCHELASTIC_RUN_ID": "none"}) == []
    assert run_dir_overrides(["hydra.run.dir=/tmp/r"], launch) == []


def test_each_rank_gets_its_seed_and_a_share_of_the_cores():
    cfg = load_config("train", ["seed=5"])
    rank1 = Distributed(1, 4, 1, 2, torch.device("cpu"), "gloo").rank_config(cfg)
    assert rank1.seed == 5 + RANK_SEED_STRIDE
    assert rank1.sim.nthread >= 1 and rank1.torch_threads == rank1.sim.nthread
    assert cfg.seed == 5 and cfg.sim.nthread is None  # the run's config is left alone
    pinned = load_config("train", ["sim.nthread=3", "torch_threads=2"])
    pinned = Distributed(0, 2, 0, 2, torch.device("cpu"), "gloo").rank_config(pinned)
    assert (pinned.seed, pinned.sim.nthread, pinned.torch_threads) == (0, 3, 2)


def _filled_storage(policy: ActorCritic) -> RolloutStorage:
    gen = torch.Generator().manual_seed(3)
    storage = RolloutStorage(4, 8, 3, 3, 1)
    for _ in range(4):
        obs = torch.randn(8, 3, generator=gen)
        act = policy.act(obs)
        storage.add(obs=obs, critic_obs=obs, actions=act.actions,
                    rewards=torch.randn(8, generator=gen), dones=torch.zeros(8, dtype=torch.bool),
                    values=act.values, log_probs=act.log_prob, action_mean=act.action_mean,
                    action_std=act.action_std)
    storage.compute_returns(torch.zeros(8), 0.99, 0.95, normalize_advantages=True)
    return storage


def test_kl_travels_with_the_gradients_in_one_reduction():
    torch.manual_seed(0)
    policy = ActorCritic(3, 1, actor_hidden_dims=[8], critic_hidden_dims=[8])
    storage = _filled_storage(policy)
    config = PPOConfig(num_learning_epochs=1, num_mini_batches=2, learning_rate=1e-3)
    results = {}
    for name, scale_kl in (("plain", None), ("identity", 1.0), ("zero_kl", 0.0)):
        model = copy.deepcopy(policy)
        calls: list[list[torch.Tensor]] = []

        def reduce(tensors: list[torch.Tensor], scale=scale_kl, calls=calls) -> None:
            calls.append([t.shape for t in tensors])
            tensors[-1].mul_(scale)

        ppo = PPO(model, config, grad_reduce=None if scale_kl is None else reduce,
                  kl_with_grads=scale_kl is not None, generator=torch.Generator().manual_seed(1))
        results[name] = (ppo.update(storage), flat_params(model), calls)
    plain, identity, zero_kl = results["plain"], results["identity"], results["zero_kl"]
    assert len(identity[2]) == 2  # one reduction per mini-batch step...
    assert identity[2][0][-1] == (1,)  # ...carrying the KL after the gradients
    assert len(identity[2][0]) == 1 + sum(1 for _ in policy.parameters())
    assert torch.equal(plain[1], identity[1]) and plain[0]["kl"] == identity[0]["kl"]
    # The learning rate adapts to the reduced KL: zero KL grows it at every step.
    assert zero_kl[0]["kl"] == 0.0 and zero_kl[0]["learning_rate"] == pytest.approx(1e-3 * 1.5**2)
    with pytest.raises(ValueError, match="kl_with_grads"):
        PPO(policy, config, kl_with_grads=True)


# ---------------------------------------------------------------------------- 2-process group
def _rank_main(rank: int, port: int, tmp: Path) -> None:
    """One rank: merge normalizer batches, train straight, train in two legs, save results."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(WORLD))
    group = Distributed.from_environment("cpu", timeout_s=60)
    out: dict = {}
    finished = False
    try:
        # Normalizer merge: ranks hold different amounts of differently distributed data.
        gen = torch.Generator().manual_seed(100 + rank)
        data = torch.randn(20 + 35 * rank, 3, generator=gen) * (1 + rank) + 2 * rank
        normalizer = EmpiricalNormalizer(3)
        normalizer.update(torch.linspace(-1, 1, 12).reshape(4, 3))  # same history on all ranks
        group.merge_batches([(normalizer, data)])
        out["data"] = data
        out["normalizer"] = {k: v.clone() for k, v in normalizer.state_dict().items()}

        # Straight 4 iterations through the Runner.
        cfg = group.rank_config(load_config("train", [*SMALL, "max_iterations=4"]))
        env = make_env(cfg)
        straight = Runner(env, cfg, log_dir=tmp / "straight", dist=group)
        out["initial"] = flat_params(straight.policy)
        straight.learn(4)
        env.close()
        out["straight"] = flat_params(straight.policy)
        out["straight_norm"] = straight.policy.obs_normalizer.state_dict()
        out["straight_obs"] = straight.env.obs["critic"].clone()

        # The train entry twice in one run directory: 2 iterations, then on to 4.
        legs = tmp / "legs"
        first = run_training(load_config("train", [*SMALL, "max_iterations=2"]), legs, group,
                             resume_latest=True)
        out["first"] = flat_params(first.policy)
        second = run_training(load_config("train", [*SMALL, "max_iterations=4"]), legs, group,
                              resume_latest=True)
        out["second"] = flat_params(second.policy)
        out["second_obs"] = second.env.obs["critic"].clone()
        out["second_iteration"] = second.iteration
        finished = True
    finally:
        group.close(finished)  # a finished rank waits for its peer's last collective
    torch.save(out, tmp / f"rank{rank}.pt")


@pytest.fixture(scope="module")
def group_results(tmp_path_factory) -> tuple[Path, list[dict]]:
    """One group run. A rank killed by a signal (a native abort, which the design meets with
    a torchrun restart) gets one fresh group, with a warning; a Python error fails at once."""
    for attempt in (1, 2):
        tmp = tmp_path_factory.mktemp("group")
        try:
            mp.spawn(_rank_main, args=(free_port(), tmp), nprocs=WORLD, join=True)
            break
        except ProcessExitedException as e:
            if attempt == 2 or e.signal_name is None:
                raise
            warnings.warn(f"rank {e.error_index} died of {e.signal_name}; a fresh group runs "
                          "once more (its Python stack is in the captured stderr)", stacklevel=1)
    return tmp, [torch.load(tmp / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


def test_ranks_hold_identical_weights_that_training_changed(group_results):
    _, ranks = group_results
    r0, r1 = ranks
    assert torch.equal(r0["initial"], r1["initial"])  # broadcast despite different seeds
    assert torch.equal(r0["straight"], r1["straight"])
    assert not torch.equal(r0["initial"], r0["straight"])
    for k, v in r0["straight_norm"].items():
        assert torch.equal(v, r1["straight_norm"][k]), k
    assert r0["straight_norm"]["count"] == 2 * 4 * 8 * 8  # ranks x iterations x envs x steps
    assert not torch.equal(r0["straight_obs"], r1["straight_obs"])  # each rank its own envs


def test_normalizer_merges_the_union_of_rank_batches(group_results):
    _, ranks = group_results
    for k in ("mean", "var", "count"):
        assert torch.equal(ranks[0]["normalizer"][k], ranks[1]["normalizer"][k]), k
    reference = EmpiricalNormalizer(3)
    reference.update(torch.linspace(-1, 1, 12).reshape(4, 3))
    reference.update(torch.cat([r["data"] for r in ranks]))
    for k in ("mean", "var", "count"):
        torch.testing.assert_close(ranks[0]["normalizer"][k], getattr(reference, k))


def test_restarted_group_resumes_every_rank_exactly(group_results):
    tmp, ranks = group_results
    for r in ranks:
        assert r["second_iteration"] == 4
        assert not torch.equal(r["first"], r["second"])
        assert torch.equal(r["second"], r["straight"])  # 2 + 2 iterations == 4 straight
        assert torch.equal(r["second_obs"], r["straight_obs"])  # rank 1's envs restored too
    data = load_checkpoint(tmp / "legs" / "checkpoints" / "latest.pt")
    assert data["iteration"] == 4 and data["distributed"]["world_size"] == WORLD
    shards = data["distributed"]["ranks"]
    assert not torch.equal(shards[0]["env"]["obs"]["critic"], shards[1]["env"]["obs"]["critic"])
    rows = [json.loads(line) for line in (tmp / "legs" / "progress.jsonl").open()]
    assert [row["iteration"] for row in rows] == [1, 2, 3, 4]  # rank 0 alone logs
    assert rows[-1]["env_steps"] == WORLD * 4 * 8 * 8


def test_torchrun_command_restarts_into_its_run_directory(tmp_path):
    """The real command twice with one run_dir: the second launch continues the first."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={WORLD}",
           str(ROOT / "scripts" / "train.py"), *SMALL, f"run_dir={tmp_path / 'run'}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = subprocess.run([*cmd, "max_iterations=2"], capture_output=True, text=True,
                           timeout=240, env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    second = subprocess.run([*cmd, "max_iterations=3"], capture_output=True, text=True,
                            timeout=240, env=env, cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "at iteration 2" in second.stdout
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "latest.pt")["iteration"] == 3
    assert (tmp_path / "run" / ".hydra" / "config.yaml").is_file()  # Hydra wrote there too
    assert not (tmp_path / "runs").exists()


def test_two_node_launch_meets_at_one_endpoint(tmp_path):
    """Two torchrun agents (one per "node") rendezvous at a c10d endpoint and train as one
    group; launched again with the same id, the group continues the run."""
    port, run_id = free_port(), "two_nodes"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}",
           str(ROOT / "scripts" / "train.py"), *SMALL]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    def launch(iterations: int) -> str:
        agents = [subprocess.Popen([*cmd, f"max_iterations={iterations}"], cwd=tmp_path, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                  for _ in range(2)]
        outputs = [agent.communicate(timeout=240)[0] for agent in agents]
        for agent, out in zip(agents, outputs, strict=True):
            assert agent.returncode == 0, out
        return "".join(outputs)

    first = launch(2)
    run_dir = tmp_path / "runs" / f"torchrun_{run_id}_go1_flat_velocity"
    assert f"2 processes (gloo), run directory {run_dir}" in first
    data = load_checkpoint(run_dir / "checkpoints" / "latest.pt")
    assert data["iteration"] == 2 and data["distributed"]["world_size"] == 2
    assert "at iteration 2" in launch(3)
    assert load_checkpoint(run_dir / "checkpoints" / "latest.pt")["iteration"] == 3
