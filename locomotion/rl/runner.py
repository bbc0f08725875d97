"""The training loop: collect K steps from the batched env, update with PPO, log, checkpoint.

One iteration = ``num_steps`` env steps under ``torch.inference_mode`` (timed as sim and
policy), then GAE and the PPO epochs (timed as learn). With the env in its masked step
mode (a GPU's) collecting never reads the device from the host: time-outs are bootstrapped
for every env by mask and episode statistics are summed on the device and read once per
iteration. Truncated episodes are bootstrapped
from the critic's value of their final observation. Checkpoints are atomic and hold
everything needed to continue the run bit for bit: weights, optimizer, normalizers, the
env's physics and counters, the reset schedule and every RNG state.

Under torchrun (``locomotion.rl.distributed``) every rank runs this loop on its own envs;
gradients, the KL and normalizer statistics are averaged across ranks, rank 0 alone logs,
and checkpoints are collective: rank 0 gathers every rank's env state and RNG states into
one file, and on resume reads it and hands each rank its share.

A run whose physics keeps diverging stops (``divergence`` in configs/train.yaml): after
``patience`` iterations in a row in which more than ``max_fraction`` of the env steps
diverged, the runner writes its checkpoint and raises ``DivergenceError``.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Protocol

import torch
from omegaconf import DictConfig, OmegaConf

from locomotion.config_checks import ConfigError
from locomotion.envs.generators import seed_from
from locomotion.envs.vec_env import LocomotionEnv
from locomotion.rl.actor_critic import build_policy
from locomotion.rl.checkpoint import (
    CheckpointError,
    load_checkpoint,
    remove_stale_temporary_files,
    save_checkpoint,
)
from locomotion.rl.distributed import Distributed, to_cpu
from locomotion.rl.ppo import PPO, PPOConfig
from locomotion.rl.storage import RolloutStorage, bootstrap_truncated
from locomotion.rl.training_log import TrainingLog
from locomotion.robots import resolve_policy_path
from locomotion.sim.threads import ThreadPlan
from locomotion.tasks import make_env
from locomotion.tasks.symmetry import Mirror

SIGN_OF_LIFE_S = 10.0  # seconds without a line that a run never goes when not on a terminal


class Every:
    """True once every ``seconds`` (wall clock) when called; ``reset()`` restarts the wait."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.reset()

    def reset(self) -> None:
        self._last = time.monotonic()

    def __call__(self) -> bool:
        if time.monotonic() - self._last < self.seconds:
            return False
        self.reset()
        return True


class DivergenceError(RuntimeError):
    """Training stopped because the physics of most envs kept diverging (non-finite state)."""


class DivergenceGuard:
    """Stops a run whose physics keeps blowing up (``divergence`` in configs/train.yaml).

    An iteration counts as diverging when more than ``max_fraction`` of its env steps
    diverged: a world's physics went non-finite (or MuJoCo's instability guard reset it)
    during a step, after which that env is reset; an env that diverges at every step counts
    once per step. ``patience`` such iterations in a row stop the run; ``max_fraction: 1.0``
    never does.
    """

    KEYS = ("max_fraction", "patience")

    def __init__(self, max_fraction: float = 0.5, patience: int = 5):
        if isinstance(max_fraction, bool) or not isinstance(max_fraction, int | float) \
                or not 0.0 <= max_fraction <= 1.0:
            raise ValueError(f"divergence.max_fraction must be a number in [0, 1] (the share "
                             f"of an iteration's env steps that may diverge), got "
                             f"{max_fraction!r}")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"divergence.patience must be an integer >= 1 (iterations in a "
                             f"row above divergence.max_fraction), got {patience!r}")
        self.max_fraction = float(max_fraction)
        self.patience = patience
        self.streak = 0  # diverging iterations in a row so far

    @classmethod
    def from_config(cls, cfg: DictConfig | Mapping | None) -> DivergenceGuard:
        """The guard of a config's ``divergence`` section (defaults when there is none)."""
        if cfg is None:
            return cls()
        given = dict(cfg)
        unknown = sorted(set(given) - set(cls.KEYS))
        if unknown:
            raise ValueError(f"divergence has no setting {unknown}; valid: {list(cls.KEYS)}")
        return cls(**given)

    def update(self, diverged: int, steps: int) -> bool:
        """Record an iteration; True when the run should stop."""
        over = self.max_fraction < 1.0 and diverged > self.max_fraction * max(steps, 1)
        self.streak = self.streak + 1 if over else 0
        return self.streak >= self.patience

    def error(self, stats: dict, checkpoint: Path | None) -> DivergenceError:
        """The error that stops the run after ``stats``' iteration, naming the checkpoint."""
        warned = stats.get("physics_warnings") or {}
        mujoco = "; MuJoCo warned " + ", ".join(
            f"{n} x '{kind}'" for kind, n in Counter(warned).most_common(3)) if warned else ""
        where = (f"checkpoint of iteration {stats['iteration']}: {checkpoint}"
                 if checkpoint is not None else "no checkpoint (the runner has no log_dir)")
        return DivergenceError(
            f"training stopped at iteration {stats['iteration']}: the physics diverged in "
            f"{stats['diverged_fraction']:.0%} of the env steps ({stats['diverged']} of "
            f"{stats['steps']}) for {self.streak} iterations in a row "
            f"(divergence.max_fraction={self.max_fraction:g}, "
            f"divergence.patience={self.patience}){mujoco}. Likely causes: PD gains too stiff "
            "for the time step (the robot spec's kp/kd and torque_limits), unrealistic masses "
            "or inertias in the MJCF, solver settings (solver.timestep, "
            "solver.integrator, solver.iterations), or on sim=warp contact or constraint "
            f"buffers too small (sim.nconmax, sim.njmax). {where}")


class TrainingHook(Protocol):
    """Code that rides along with training, e.g. the multitask scheduler: it sees every
    step's finished episodes, returns scalars to log after each iteration and is saved in
    checkpoints under its name."""

    episode_keys: tuple[str, ...]  # keys of info["episode"] it alone reads (not averaged)

    def record(self, episode: dict) -> None: ...
    def end_iteration(self, iteration: int, rollout_s: float) -> dict[str, float]: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


HookFactory = Callable[[LocomotionEnv, DictConfig, "Distributed | None"],
                       Mapping[str, TrainingHook]]
"""Builds the training hooks of a run from its env, config and rank
(``locomotion.multitask.training_hooks`` is one)."""


class Runner:
    """Trains an actor-critic on a ``LocomotionEnv`` with PPO.

    With ``dist`` (one rank of a torchrun group) the env is this rank's, ``cfg`` this rank's
    config (``Distributed.rank_config``) and ``log_dir`` the run directory all ranks share.
    ``hooks`` ride along with training (see ``TrainingHook``).
    """

    def __init__(self, env: LocomotionEnv, cfg: DictConfig, log_dir: str | Path | None = None,
                 dist: Distributed | None = None,
                 hooks: Mapping[str, TrainingHook] | None = None):
        self.env = env
        self.cfg = cfg
        self.dist = dist
        self.is_main = dist is None or dist.is_main
        algo = cfg.algo
        if cfg.get("torch_threads"):
            # e.g. 1 when other jobs share the cores: oversubscribed OpenMP threads crawl.
            torch.set_num_threads(int(cfg.torch_threads))
        torch.manual_seed(int(cfg.seed))
        sizes = env.observation_sizes
        self.policy = build_policy(algo.policy, sizes, env.num_actions).to(env.device)
        if dist is not None:
            dist.broadcast_module(self.policy)  # every rank starts from rank 0's weights
        self.ppo = PPO(self.policy, PPOConfig(**algo.ppo),
                       grad_reduce=dist.reduce_gradients if dist else None,
                       kl_with_grads=dist is not None,  # one all-reduce per step
                       generator=torch.Generator().manual_seed(int(cfg.seed)),
                       mirror=symmetry_mirror(env, algo.get("symmetry", False),
                                              say=self.is_main))
        self.num_steps = int(algo.num_steps)
        self.storage = RolloutStorage(self.num_steps, env.num_envs, sizes["policy"],
                                      sizes["critic"], env.num_actions, device=env.device)
        self.iteration = 0
        self.env_steps = 0
        self.train_wall_s = 0.0
        self.log_dir = Path(log_dir) if log_dir else None
        self.log = (TrainingLog(self.log_dir, cfg.logging)
                    if self.log_dir and self.is_main else None)
        self.hooks: dict[str, TrainingHook] = dict(hooks or {})
        self.divergence = DivergenceGuard.from_config(cfg.get("divergence"))
        self.resume_notes: list[str] = []  # what a resume could not continue exactly
        self._started = False
        if self.log_dir and self.is_main:  # left by a process killed while saving
            remove_stale_temporary_files(self.checkpoint_path.parent)

    # ------------------------------------------------------------------ checkpoints
    @property
    def checkpoint_path(self) -> Path:
        if self.log_dir is None:
            raise ValueError("this runner has no log_dir to write checkpoints into")
        return self.log_dir / "checkpoints" / "latest.pt"

    def state_dict(self, shard: dict | None = None) -> dict:
        """The checkpoint payload; ``shard`` is this rank's env and RNG state if already taken."""
        shard = shard or self._shard()
        return {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "train_wall_s": self.train_wall_s,
            "config": OmegaConf.to_container(self.cfg, resolve=True),
            "robot": self.env.spec.name,
            "observation_sizes": self.env.observation_sizes,
            "num_actions": self.env.num_actions,
            "ppo": self.ppo.state_dict(),
            "hooks": {name: hook.state_dict() for name, hook in self.hooks.items()},
            "env": shard["env"],
            "rng": shard["rng"],
        }

    def _shard(self) -> dict:
        """What differs between ranks: the env (physics, counters, its RNG) and our RNGs."""
        return {"env": self.env.state_dict(),
                "rng": rng_states(self.env.device, self.ppo.generator)}

    def save(self, path: str | Path | None = None) -> Path:
        """Write a checkpoint (atomically) to ``path`` or the run's ``latest.pt``.

        Distributed: every rank must call this together. Rank 0 gathers each rank's env and
        RNG state and writes one file holding them all under ``distributed.ranks`` (rank
        0's also as ``env``/``rng``, so single-process tools read it unchanged).
        """
        path = Path(path or self.checkpoint_path)
        if self.dist is None:
            return save_checkpoint(path, self.state_dict())
        shards = self.dist.gather_to_main(to_cpu(self._shard()))
        if self.dist.is_main:
            payload = self.state_dict(shards[0])
            payload["distributed"] = {"world_size": self.dist.world_size, "ranks": shards}
            save_checkpoint(path, payload)
        return path

    def load(self, path: str | Path) -> None:
        """Continue from a checkpoint of a run with the same robot, task and batch size.

        Distributed: every rank calls this together; rank 0 alone reads ``path`` (other
        machines need not see it) and sends each rank the learner state and its own env
        and RNG state. The checkpoint must come from a group of the same size.
        """
        if self.dist is None:
            data = load_checkpoint(path)
            self._check_checkpoint(data, path)
            self._restore(data, data["env"], data["rng"])
            return
        payloads: list[dict] | None = None
        error: Exception | None = None
        if self.dist.is_main:
            try:
                payloads = self._rank_payloads(load_checkpoint(path), path)
            except Exception as e:  # tell the other ranks before raising here
                error = e
                payloads = [{"error": f"rank 0 could not resume from {path}: {e}"}
                            ] * self.dist.world_size
        mine = self.dist.scatter_from_main(payloads)
        if error is not None:
            raise error
        if "error" in mine:
            raise CheckpointError(mine["error"])
        self._restore(mine, mine["env"], mine["rng"])

    def init_policy(self, path: str | Path) -> None:
        """Start this (new) run from the policy of another run's checkpoint or of a
        policy-only export: actor, critic, action noise and normalizers; the optimizer, env,
        randomization and counters stay this run's own (how a walking policy moves to a
        wider randomization preset, which resuming refuses). Distributed: every rank starts
        from rank 0's copy."""
        if self.dist is None or self.dist.is_main:
            data = load_checkpoint(resolve_policy_path(path))
            mine = (self.env.spec.name, self.env.observation_sizes, self.env.num_actions)
            theirs = (data["robot"], data["observation_sizes"], data["num_actions"])
            if mine != theirs:
                raise CheckpointError(f"init_policy {path} is for robot/observations/actions "
                                      f"{theirs}; this run has {mine}")
            self._check_network(data, path)
            self.policy.load_state_dict(data["ppo"]["policy"])
        if self.dist is not None:
            self.dist.broadcast_module(self.policy)

    def _check_checkpoint(self, data: dict, path: str | Path) -> None:
        if data.get("inference_only"):
            raise CheckpointError(f"{path} holds only a policy (an export); training cannot "
                                  "resume from it: use the run's checkpoints/latest.pt")
        mine = (self.env.spec.name, self.env.observation_sizes, self.env.num_actions)
        theirs = (data["robot"], data["observation_sizes"], data["num_actions"])
        if mine != theirs:
            raise CheckpointError(
                f"checkpoint {path} is for robot/observations/actions {theirs}; "
                f"this run has {mine}"
            )
        trained = data.get("config") or {}
        preset = (trained.get("randomization") or {}).get("name")
        if preset is not None and preset != self.cfg.randomization.get("name"):
            raise CheckpointError(  # the env state holds the randomizer's draws and timers
                f"checkpoint {path} was trained with randomization={preset}; this run has "
                f"randomization={self.cfg.randomization.get('name')}: resume with "
                f"randomization={preset}")
        self._check_network(data, path)

    def _check_network(self, data: dict, path: str | Path) -> None:
        """The checkpoint's policy has this run's layer shapes; else name the settings."""
        shapes = {k: tuple(v.shape) for k, v in self.policy.state_dict().items()}
        if {k: tuple(v.shape) for k, v in data["ppo"]["policy"].items()} == shapes:
            return
        keys = ("actor_hidden_dims", "critic_hidden_dims")
        sizes = ((data.get("config") or {}).get("algo") or {}).get("policy") or {}
        theirs, ours = ({k: "[" + ",".join(map(str, c[k])) + "]" for k in keys if k in c}
                        for c in (sizes, self.cfg.algo.policy))
        other = {k: v for k, v in theirs.items() if ours.get(k) != v}
        if not other:
            raise CheckpointError(f"checkpoint {path} has a network of another shape than "
                                  "this run's: use the algo.policy settings it was trained "
                                  "with")
        raise CheckpointError(
            f"checkpoint {path} has "
            + ", ".join(f"{k} {v} (this run: {ours[k]})" for k, v in other.items())
            + ": use " + " ".join(f"algo.policy.{k}={v}" for k, v in other.items()))

    def _rank_payloads(self, data: dict, path: str | Path) -> list[dict]:
        """Split a loaded checkpoint into what each rank of this group restores."""
        self._check_checkpoint(data, path)
        ranks = data.get("distributed", {}).get("ranks") or [{"env": data["env"],
                                                                "rng": data["rng"]}]
        if len(ranks) != self.dist.world_size:
            raise CheckpointError(
                f"checkpoint {path} was written by {len(ranks)} process(es); this run has "
                f"{self.dist.world_size}: resume with the same number of processes "
                "(--nnodes x --nproc_per_node), each rank continues its own envs")
        common = {k: data.get(k) for k in ("ppo", "hooks", "scheduler", "iteration", "env_steps",
                                           "train_wall_s", "config")}
        return [{**common, **shard} for shard in ranks]

    def _changed_learning(self, trained: dict | None) -> list[str]:
        """How this run learns differently from the checkpoint's (a setting a resume may
        change: the mirror); a config saved before ``algo.symmetry`` existed had it off."""
        if trained is None:
            return []
        before = str((trained.get("algo") or {}).get("symmetry", False)).lower()
        now = str(self.cfg.algo.get("symmetry", False)).lower()  # as typed: true, auto
        if before == now:
            return []
        return [f"the checkpoint was trained with algo.symmetry={before}, this run has "
                f"algo.symmetry={now}; pass algo.symmetry={before} to learn as it did"]

    def _restore(self, data: dict, env_state: dict, rng: dict) -> None:
        self.ppo.load_state_dict(data["ppo"])
        # checkpoints written before hooks were named held the scheduler's state alone
        saved = data.get("hooks") or {"scheduler": data.get("scheduler")}
        for name, hook in self.hooks.items():
            if saved.get(name) is None:
                raise CheckpointError(f"the checkpoint holds no {name!r} state: it comes from "
                                      f"a run without one")
            hook.load_state_dict(saved[name])
        try:
            notes = self.env.load_state_dict(env_state) or []
        except (KeyError, ValueError, TypeError, RuntimeError) as e:  # e.g. a terrain grid,
            # saved on the plane, or another robot's physics state
            raise CheckpointError(f"the checkpoint's env state does not fit this run's env "
                                  f"({type(e).__name__}: {e}); resume with the config it was "
                                  "trained with") from e
        self.resume_notes = (notes + restore_rng_states(rng, self.env.device, self.ppo.generator)
                             + self._changed_learning(data.get("config")))
        self.iteration = data["iteration"]
        self.env_steps = data["env_steps"]
        self.train_wall_s = data["train_wall_s"]
        self._started = True
        if self.log is not None:
            self.log.rewind(self.iteration, self.env_steps)

    # ------------------------------------------------------------------ training
    def start(self) -> None:
        """Reset the env through its reset schedule (the staggered warm-up happens here)."""
        progress = None
        if self.is_main and self.env.schedule.prewarm:
            due = Every(SIGN_OF_LIFE_S)

            def progress(done: int, total: int) -> None:
                if done == 0 or due():
                    print(f"warm-up: step {done}/{total} of the staggered start "
                          f"({self.env.num_envs} envs)", flush=True)

        self.env.reset(warmup_policy=lambda obs: self.policy.act_inference(obs["policy"]),
                       progress=progress)
        self._started = True

    def learn(self, num_iterations: int,
              should_stop: Callable[[Runner, dict], bool] | None = None) -> None:
        """Run ``num_iterations`` more iterations; checkpoint periodically and on any exit.

        Ctrl-C (or SIGTERM) stops after writing a checkpoint, then re-raises.
        ``should_stop(runner, stats)`` may end training early (e.g. once a goal is met).
        Physics that keeps diverging (``DivergenceGuard``) stops after writing a checkpoint
        and raises ``DivergenceError``.
        Distributed, the exit checkpoint is written only when training ends normally (a
        checkpoint is collective and a failing group may have lost a rank): an interrupted
        or failed group loses at most ``logging.save_interval`` iterations.
        """
        if not self._started:
            self.start()
        save_every = int(self.cfg.logging.save_interval)
        target = self.iteration + num_iterations
        finished = False
        diverged: DivergenceError | None = None
        self.divergence.streak = 0
        with sigterm_as_interrupt(), self._progress(num_iterations) as progress:
            try:
                while self.iteration < target:
                    stats = self.train_iteration()
                    progress(stats)
                    if self.log_dir and self.iteration % save_every == 0:
                        self.save()
                    # the group's statistics: every rank stops at the same iteration
                    if self.divergence.update(stats["diverged"], stats["steps"]):
                        diverged = self.divergence.error(
                            stats, self.checkpoint_path if self.log_dir else None)
                        break
                    if should_stop is not None and should_stop(self, stats):
                        break
                finished = True
            finally:
                if self.log_dir and (self.dist is None or finished):
                    self.save()
        if diverged is not None:
            raise diverged

    def train_iteration(self) -> dict:
        """Collect one rollout and update; returns the iteration's statistics."""
        start, cpu_start = time.perf_counter(), time.process_time()
        diverged_before = self.env.diverged_count
        warned_before = Counter(getattr(self.env, "physics_warnings", {}))
        timing, episodes = self._collect()
        cpu_share = (time.process_time() - cpu_start) / (time.perf_counter() - start)
        if getattr(self.env, "masked", False):
            self.env.check_actions_seen()  # masked steps count bad actions, raised here
        t0 = time.perf_counter()
        with learner_threads(getattr(self.env, "threads", None), cpu_share):
            self.ppo.compute_returns(self.storage, self.env.obs["critic"])
            losses = self.ppo.update(self.storage)
            # Normalizers move between iterations only, so the policy that collected a batch
            # is exactly the one PPO's ratios and KL compare against.
            if self.dist is None:
                self.policy.update_normalizers(self.storage.obs, self.storage.critic_obs)
            else:
                self.dist.update_normalizers(self.policy, self.storage.obs,
                                             self.storage.critic_obs)
        self.storage.clear()
        timing["learn"] = time.perf_counter() - t0
        steps = self.num_steps * self.env.num_envs
        histogram, uniformity = self.env.phase.pop()
        diverged = self.env.diverged_count - diverged_before
        # MuJoCo's warnings in this iteration, by kind (counted by the backend, not printed)
        warned = Counter(getattr(self.env, "physics_warnings", {}))
        warned.subtract(warned_before)
        warned = {k: n for k, n in warned.items() if n > 0}
        warnings = sum(warned.values())
        comm = {}
        if self.dist is not None:  # the group's statistics, identical on every rank
            comm = {"comm_s": self.dist.pop_comm_time()}
            group = self.dist.reduce_statistics({
                "losses": losses, "episodes": episodes, "histogram": histogram,
                "steps": steps, "diverged": diverged, "warnings": warnings})
            losses = {**losses, **group["losses"]}
            episodes, histogram, uniformity = (group["episodes"], group["histogram"],
                                               group["uniformity"])
            steps, diverged = group["steps"], group["diverged"]
            warnings = group.get("warnings", warnings)
        hooked = {k: v for hook in self.hooks.values()
                  for k, v in hook.end_iteration(self.iteration, timing["sim"]).items()}
        wall = time.perf_counter() - start
        self.train_wall_s += wall
        self.iteration += 1
        self.env_steps += steps
        stats = {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "wall_s": self.train_wall_s,
            "steps_per_s": steps / wall,
            "time": timing,
            "losses": losses,
            "episodes": episodes,
            "phase_histogram": histogram,
            "phase_uniformity": uniformity,
            "steps": steps,  # env steps of this iteration (the group's, distributed)
            "diverged": diverged,  # env steps of this iteration that diverged
            "diverged_fraction": diverged / max(steps, 1),
            "physics_warnings": warned,  # by kind, this rank's
            "warnings": warnings,  # MuJoCo's warnings in this iteration (the group's)
            "hooks": hooked,
            **comm,
        }
        if self.log is not None:
            self.log.write(stats)
        return stats

    def _collect(self) -> tuple[dict[str, float], dict[str, float]]:
        env, policy, gamma = self.env, self.policy, self.ppo.config.gamma
        sim_s = 0.0
        start = time.perf_counter()
        finished: dict[str, list[torch.Tensor]] = defaultdict(list)
        private = {k for hook in self.hooks.values() for k in hook.episode_keys}
        tally = EpisodeTally(private) if getattr(env, "masked", False) else None
        with torch.inference_mode(), self.ppo.autocast():
            obs = {k: v.clone() for k, v in env.obs.items()}
            for _ in range(self.num_steps):
                act = policy.act(obs["policy"], obs["critic"])
                t0 = time.perf_counter()
                next_obs, reward, terminated, truncated, info = env.step(act.actions)
                sim_s += time.perf_counter() - t0
                if tally is not None:  # masked: every env, every step, no host read
                    final_values = policy.value(info["final_obs"]["critic"])
                    reward = bootstrap_truncated(reward, truncated, final_values, gamma)
                    tally.add(info["episode"])
                    for hook in self.hooks.values():
                        hook.record(info["episode"])
                elif "final_obs" in info:
                    if truncated.any():
                        final_values = policy.value(info["final_obs"]["critic"])
                        reward = bootstrap_truncated(reward, truncated, final_values, gamma)
                    for k, v in whole_episodes(info["episode"], private).items():
                        finished[k].append(v)
                    for hook in self.hooks.values():
                        hook.record(info["episode"])
                self.storage.add(obs=obs["policy"], critic_obs=obs["critic"],
                                 actions=act.actions, rewards=reward,
                                 dones=terminated | truncated, values=act.values,
                                 log_probs=act.log_prob, action_mean=act.action_mean,
                                 action_std=act.action_std)
                obs = next_obs
        total = time.perf_counter() - start
        if tally is not None:
            return {"sim": sim_s, "policy": total - sim_s}, tally.means()
        episodes: dict[str, float] = {}
        count = sum(len(v) for v in finished["length"])
        if count:
            episodes = {k: float(torch.cat(v).mean()) for k, v in finished.items()}
            episodes["count"] = float(count)
        return {"sim": sim_s, "policy": total - sim_s}, episodes

    @contextlib.contextmanager
    def _progress(self, total: int):
        """A progress bar with ETA on a terminal; plain log lines otherwise; rank 0 only."""
        every = int(self.cfg.logging.print_interval)
        if not self.is_main:
            yield lambda stats: None
        elif sys.stdout.isatty():
            from tqdm import tqdm

            bar = tqdm(total=total, unit="it", dynamic_ncols=True)

            def show(stats: dict) -> None:
                bar.update(1)
                bar.set_postfix_str(summary_line(stats, short=True))

            try:
                yield show
            finally:
                bar.close()
        else:  # a line for the first iteration, then every ``every`` or SIGN_OF_LIFE_S seconds
            due, first_iteration = Every(SIGN_OF_LIFE_S), self.iteration + 1

            def show(stats: dict) -> None:
                first = stats["iteration"] == first_iteration
                if first or stats["iteration"] % every == 0 or due():
                    due.reset()
                    print(summary_line(stats), flush=True)

            yield show


def run_training(cfg: DictConfig, run_dir: str | Path, dist: Distributed | None = None,
                 resume_latest: bool = False, hooks: HookFactory | None = None) -> Runner:
    """What ``locomotion-train`` does: build env and runner, resume, train to max_iterations.

    The run continues from ``run_dir/checkpoints/latest.pt`` when ``resume_latest`` is set
    and that file exists (a restarted run), else from ``cfg.resume`` if given. Distributed:
    every rank calls this with the run config and the same ``run_dir``; rank 0 decides
    what to resume from and prints. ``hooks(env, cfg, dist)`` names the training hooks.
    """
    if dist is not None:
        cfg = dist.rank_config(cfg)
    start = time.perf_counter()
    env = make_env(cfg)
    if dist is None or dist.is_main:
        print(f"env: {env.num_envs} envs of {env.spec.name} on {cfg.task.name}, "
              f"{cfg.sim.backend} physics on {env.device} ({env.threads.describe()}), built "
              f"in {time.perf_counter() - start:.1f} s", flush=True)
    try:
        runner = Runner(env, cfg, log_dir=run_dir, dist=dist,
                        hooks=hooks(env, cfg, dist) if hooks else None)
        resume = cfg.resume
        if resume_latest and runner.checkpoint_path.is_file():
            resume = str(runner.checkpoint_path)
        if dist is not None:
            resume = dist.broadcast_object(resume)
        if resume:
            runner.load(resume)
            if runner.is_main:
                print(f"resumed from {resume} at iteration {runner.iteration}", flush=True)
                for note in runner.resume_notes:
                    print(f"note: {note} (not bit for bit)", flush=True)
        elif cfg.get("init_policy"):
            runner.init_policy(cfg.init_policy)
            if runner.is_main:
                print(f"policy from {cfg.init_policy}", flush=True)
        runner.learn(max(int(cfg.max_iterations) - runner.iteration, 0))
    finally:
        env.close()
    return runner


class EpisodeTally:
    """Sums of the statistics of whole episodes over an iteration, kept on the device from
    masked steps' ``EpisodeBatch`` es: ``means()`` is what ``whole_episodes`` averaged over
    the iteration gives, in one host read."""

    def __init__(self, private: Collection[str] = ()):
        self.private = set(private) | {"partial"}
        self.sums: dict[str, torch.Tensor] = {}
        self.elements: dict[str, torch.Tensor] = {}
        self.count: torch.Tensor | None = None

    def add(self, batch) -> None:
        """Fold in the episodes that ended in one masked step (``batch.values`` [N, ...],
        ``batch.mask`` [N])."""
        values = batch.values
        whole = batch.mask & (values["partial"] == 0)
        n = whole.sum()
        self.count = n if self.count is None else self.count + n
        for k, v in values.items():
            if k in self.private:
                continue
            keep = whole.view(-1, *[1] * (v.dim() - 1))
            total = torch.where(keep, v, 0.0).sum(dtype=torch.float64)
            per_env = v[0].numel()
            if k in self.sums:
                self.sums[k] += total
                self.elements[k] += n * per_env
            else:
                self.sums[k], self.elements[k] = total, n * per_env

    def means(self) -> dict[str, float]:
        """Mean of every key over the whole episodes, and their ``count``; {} if none ended."""
        if self.count is None:
            return {}
        keys = list(self.sums)
        read = torch.stack([self.count.double(), *(self.sums[k] for k in keys),
                            *(self.elements[k].double() for k in keys)]).tolist()
        count, sums, elements = read[0], read[1:1 + len(keys)], read[1 + len(keys):]
        if not count:
            return {}
        out = {k: s / e for k, s, e in zip(keys, sums, elements, strict=True)}
        out["count"] = float(count)
        return out


def env_mirror(env: LocomotionEnv) -> Mirror:
    """The left-right mirror of ``env``'s observation groups and actions (``algo.symmetry``)."""
    layout = env.task.observation_layout(env.task.world(env.sim), env.actions)
    return Mirror(env.spec, layout, device=env.device)


def symmetry_mirror(env: LocomotionEnv, setting: bool | str, say: bool = True) -> Mirror | None:
    """The mirror PPO learns with under ``algo.symmetry``: ``true`` needs one, ``auto`` uses
    it where the robot spec has a mirror and every observation term a rule, and otherwise
    trains without (saying why), so another robot or task still trains as configured."""
    if setting is False:
        return None
    try:
        return env_mirror(env)
    except ConfigError as e:
        if setting is True:
            raise
        if say:
            print(f"symmetry: off ({e})", flush=True)
        return None


@contextlib.contextmanager
def learner_threads(plan: ThreadPlan | None, rollout_cpu_share: float):
    """Torch on the plan's learner threads for a while, then back to its collecting ones:
    the physics pool idles while PPO learns, so the update may take the cores the rollout
    got (``ThreadPlan.learner_for``; an env without a plan keeps torch as it is)."""
    learner = None if plan is None else plan.learner_for(rollout_cpu_share)
    if learner is None or learner == torch.get_num_threads():
        yield
        return
    collecting = torch.get_num_threads()
    torch.set_num_threads(learner)
    try:
        yield
    finally:
        torch.set_num_threads(collecting)


def rng_states(device: torch.device, ppo_generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The random states a checkpoint holds besides the env's: torch's CPU generator, the
    PPO mini-batch generator and, on a GPU, the device's generator, which the policy samples
    its actions from."""
    states = {"torch": torch.get_rng_state(), "ppo": ppo_generator.get_state()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def restore_rng_states(rng: dict[str, torch.Tensor], device: torch.device,
                       ppo_generator: torch.Generator) -> list[str]:
    """Restore ``rng_states``' states on this run's ``device``; returns notes on streams that
    do not continue exactly. A checkpoint from a CPU run on a GPU has no device state: the
    policy's sampling starts a stream seeded from the saved CPU state (the same on every
    resume of that checkpoint); a GPU's device state on the CPU is not needed."""
    torch.set_rng_state(rng["torch"])
    ppo_generator.set_state(rng["ppo"])
    if device.type != "cuda":
        return []
    if "cuda" in rng:
        torch.cuda.set_rng_state(rng["cuda"], device)
        return []
    with torch.cuda.device(device):
        torch.cuda.manual_seed(seed_from(rng["torch"]))
    return [f"the checkpoint comes from a CPU run: the policy's action noise on {device} "
            "continues from a new stream"]


def whole_episodes(episode: dict[str, torch.Tensor],
                   private: Collection[str] = ()) -> dict[str, torch.Tensor]:
    """The statistics worth averaging of finished episodes: those begun in training.

    An episode that a staggered or random start entered part-way (``partial``) says little
    of the policy (its return covers a few steps), nor does one that ``phase_locked``
    restarted part-way into the horizon after a fall (it had less than the whole horizon);
    ``private`` keys are what a hook counts on its own (e.g. the scheduler per subtask),
    not statistics of the whole batch.
    """
    keep = episode["partial"] == 0 if "partial" in episode else slice(None)
    return {k: v[keep] for k, v in episode.items() if k != "partial" and k not in private}


def summary_line(stats: dict, short: bool = False) -> str:
    """One human-readable line of an iteration's statistics."""
    ep = stats["episodes"]
    t = stats["time"]
    parts = [f"ret {ep['return']:.2f}" if "return" in ep else "ret -",
             f"len {ep['length']:.0f}" if "length" in ep else "len -",
             f"vel_err {ep['lin_vel_error']:.3f}" if "lin_vel_error" in ep else "vel_err -",
             f"{stats['steps_per_s']:.0f} sps"]
    if short:
        return " ".join(parts)
    return (f"it {stats['iteration']:5d} steps {stats['env_steps']:>10d} "
            f"wall {stats['wall_s']:7.1f}s " + " ".join(parts)
            + f" | sim {t['sim']:.2f}s policy {t['policy']:.2f}s learn {t['learn']:.2f}s"
            + (f" (comm {stats['comm_s']:.2f}s)" if "comm_s" in stats else "")
            + f" | lr {stats['losses']['learning_rate']:.1e}"
            + f" std {stats['losses']['action_std']:.2f}"
            + f" phase-unif {stats['phase_uniformity']:.2f}"
            + (f" | diverged {stats['diverged_fraction']:.0%} of steps, "
               f"{stats.get('warnings', 0)} MuJoCo warnings"
               if stats.get("diverged") or stats.get("warnings") else ""))


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Treat SIGTERM like Ctrl-C so a killed run still writes its checkpoint."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
