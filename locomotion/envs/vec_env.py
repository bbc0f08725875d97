"""The batched locomotion environment: N quadrupeds, one task, autoreset, reset schedules.

``step(actions) -> obs, reward, terminated, truncated, info`` on [N, ...] tensors.
Failures (``terminated``) are kept apart from time-outs (``truncated``) so the learner can
bootstrap the latter from ``info["final_obs"]``, the observation of the last state of
every episode that ended this step, taken before the autoreset. An env that restarts gets
the time-out counter its reset schedule gives (0, or its group's phase under
``phase_locked``); an episode begun with an advanced counter is ``partial`` in its
statistics (``info["episode"]``), which learners and adapters leave out of their means.

Two step modes (``step_mode``), the same env otherwise:

- ``indexed`` (the CPU's): the envs that ended are found by index and only they are
  respawned and drawn for; ``info`` has ``final_obs``, ``episode`` and ``diverged`` only
  on steps where some episode ended.
- ``masked`` (a GPU's): a step never reads the device from the host. Every env is drawn
  for and respawned, and a mask [N] keeps the rows of the envs that ended; commands and
  interval events resample the same way. ``info`` has ``final_obs`` (every env), an
  ``EpisodeBatch`` under ``episode`` (every env's statistics and the mask; reading its
  rows is one host read) and ``diverged`` (a device scalar) on every step.

``step_mode: auto`` is ``masked`` on a GPU and ``indexed`` on the CPU, where the indexed
mode draws fewer numbers and a host read costs nothing.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

import torch
from omegaconf import DictConfig

from locomotion.config_checks import ConfigError
from locomotion.envs.generators import restore_generator
from locomotion.envs.randomization import Randomizer
from locomotion.envs.reset_schedule import PhaseHistogram, ResetSchedule
from locomotion.envs.terrain_curriculum import TerrainCurriculum
from locomotion.sim.backend import SimBackend, make_backend, resolve_device
from locomotion.sim.model_builder import SolverProfile, build_model
from locomotion.sim.robot_spec import RobotSpec, load_robot_spec
from locomotion.sim.terrain import TerrainGrid, make_terrain
from locomotion.sim.threads import plan_threads

Obs = dict[str, torch.Tensor]
STEP_MODES = ("auto", "indexed", "masked")


def step_mode(name: str | None, device: torch.device) -> str:
    """``indexed`` or ``masked``: ``auto`` (or None) is masked on a GPU, indexed on the CPU."""
    name = name or "auto"
    if name not in STEP_MODES:
        raise ConfigError(f"unknown step_mode {name!r}; valid: {list(STEP_MODES)}")
    if name == "auto":
        return "indexed" if device.type == "cpu" else "masked"
    return name


class EpisodeBatch(Mapping):
    """The episodes that ended in a masked step: ``values`` holds every env's statistics
    (key -> [N, ...]) and ``mask`` [N] which envs ended. As a mapping it holds the rows of
    the envs that ended, in env order, as an indexed step's ``info["episode"]`` does;
    the first read of a row is one host read (finding the envs), later ones reuse it."""

    def __init__(self, values: dict[str, torch.Tensor], mask: torch.Tensor):
        self.values = values
        self.mask = mask
        self._rows: dict[str, torch.Tensor] | None = None

    @property
    def rows(self) -> dict[str, torch.Tensor]:
        if self._rows is None:
            ids = self.mask.nonzero().squeeze(1)
            self._rows = {k: v[ids] for k, v in self.values.items()}
        return self._rows

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.rows[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.values)


class Task(Protocol):
    """What the env asks of a task (``locomotion.tasks`` implements it): commands, the
    world read from the backend, observation groups, rewards and terminations."""

    commands: torch.Tensor  # [N, 3] (vx, vy, yaw rate)
    reward_weights: dict[str, float]
    obs_scales: dict[str, dict[str, torch.Tensor]]

    def world(self, sim: SimBackend, env_ids: torch.Tensor | None = None): ...
    def initial_state(self, env_ids: torch.Tensor, nq: int,
                      nv: int) -> tuple[torch.Tensor, torch.Tensor]: ...
    def reset(self, env_ids: torch.Tensor) -> None: ...
    def reset_where(self, mask: torch.Tensor) -> None: ...
    def advance_commands(self, world) -> None: ...
    def set_commands(self, commands: torch.Tensor,
                     env_ids: torch.Tensor | None = None) -> None: ...
    def observations(self, world, actions: torch.Tensor,
                     env_ids: torch.Tensor | None = None) -> Obs: ...
    def observation_layout(self, world, actions: torch.Tensor) -> dict[str, dict[str, slice]]: ...
    def rewards(self, world, actions: torch.Tensor,
                last_actions: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...
    def episode_metrics(self, world) -> dict[str, torch.Tensor]: ...
    def terminations(self, world) -> torch.Tensor: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


TaskFactory = Callable[..., Task]
"""Builds a task: ``factory(task_cfg, spec, layout, num_envs, control_dt, generator, device=,
terrain=, masked=)``; a masked task resamples commands by mask, without host reads."""


class EpisodeHook(Protocol):
    """Code that rides along with the env's episodes (e.g. the subtasks of a multitask run):
    set up envs before they respawn and annotate finished episodes (whose statistics hold
    the task's per-step ``episode_metrics`` averaged over the episode).

    In the masked step mode the env calls ``before_reset_where(mask)`` and
    ``on_episodes_end_where(mask, values)`` (every env's rows) where a hook has them, and
    else the indexed methods with the envs found by a host read.
    """

    def before_reset(self, env_ids: torch.Tensor) -> None: ...
    def on_episodes_end(self, env_ids: torch.Tensor, episode: dict) -> None: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


class LocomotionEnv:
    """N envs of one robot and task, stepped together on one backend."""

    def __init__(self, cfg: DictConfig, task_factory: TaskFactory,
                 hooks: Callable[[LocomotionEnv], Mapping[str, EpisodeHook]] | None = None):
        """The env of ``cfg`` running the task ``task_factory`` builds; ``hooks(env)`` names
        the episode hooks to attach (``locomotion.tasks.make_env`` chooses both from cfg)."""
        if cfg.num_envs < 1:
            raise ConfigError(f"num_envs must be >= 1, got {cfg.num_envs}")
        self.cfg = cfg
        self.num_envs = int(cfg.num_envs)
        self.spec: RobotSpec = load_robot_spec(cfg.robot.spec)
        self.solver = SolverProfile(**cfg.solver)
        # Terrain grid (None: the ground plane); its heights live on the env's device.
        self.terrain: TerrainGrid | None = make_terrain(
            cfg.get("terrain"), resolve_device(cfg.get("device", "cpu")))
        self.model, self.layout = build_model(self.spec, self.solver, self.terrain)
        self.control_dt = float(cfg.task.control_dt)
        self.decimation = round(self.control_dt / self.solver.timestep)
        if abs(self.decimation * self.solver.timestep - self.control_dt) > 1e-9:
            raise ConfigError(f"control_dt {self.control_dt} is not a multiple of the solver "
                              f"timestep {self.solver.timestep}")
        self.max_episode_length = round(cfg.task.episode_length_s / self.control_dt)
        self.device = device = resolve_device(cfg.get("device", "cpu"))
        # Every draw of the batch (commands, spawns, randomization, curriculum) comes from
        # one generator on the env's device: a seed gives the same run on one device, and a
        # GPU draws without copies from the host.
        self.gen = torch.Generator(device=device).manual_seed(int(cfg.seed))
        self.step_mode = step_mode(cfg.get("step_mode"), device)
        self.masked = self.step_mode == "masked"
        self._all_ids = torch.arange(self.num_envs, device=device)
        self.task = task_factory(cfg.task, self.spec, self.layout, self.num_envs,
                                 self.control_dt, self.gen, device=device, terrain=self.terrain,
                                 **({"masked": True} if self.masked else {}))
        # Terrain: each env's tile (level, column), moved at its resets by the curriculum.
        self.curriculum = None if self.terrain is None else TerrainCurriculum(
            self.terrain, cfg.terrain.curriculum, self.num_envs, self.gen, device)
        # Episode hooks (e.g. the subtasks of configs/multitask), called in this order.
        self.hooks: dict[str, EpisodeHook] = dict(hooks(self)) if hooks else {}
        self.schedule = ResetSchedule(cfg.reset.schedule, self.num_envs, self.max_episode_length,
                                      int(cfg.rollout_length), cfg.reset.get("num_groups"),
                                      cfg.reset.get("warmup", "zero"))
        self.phase = PhaseHistogram(device=device)
        # Thread counts before the backend starts its pool (sim.nthread, torch_threads: null
        # chooses); a user's settings that oversubscribe the cores get a warning.
        self.threads = plan_threads(cfg.sim.get("nthread"), cfg.get("torch_threads"),
                                    cpu_physics=cfg.sim.backend == "native",
                                    learner_threads=cfg.get("learner_threads"))
        if self.threads.warning:
            warnings.warn(self.threads.warning, stacklevel=2)
        torch.set_num_threads(self.threads.torch)
        self.sim = make_backend(cfg.sim, self.model, self.num_envs, device,  # last: owns threads
                                nthread=self.threads.physics or None)
        self.num_actions = self.spec.num_actions
        self.action_clip = float(cfg.task.action_clip)
        self._actuator_ids = torch.as_tensor(self.layout.actuator_ids, device=device)
        f64 = {"dtype": torch.float64, "device": device}
        self._ctrl = torch.tensor(self.layout.default_ctrl, **f64).repeat(self.num_envs, 1) \
            if self.spec.actuation == "pd" else torch.zeros(self.num_envs, self.model.nu, **f64)
        self._default_ctrl = torch.as_tensor(self.layout.default_ctrl, dtype=torch.float32,
                                             device=device)
        self._action_bounds = self._bounds_of_actions()
        self._warmed_up = False
        self.episode_length = torch.zeros(self.num_envs, dtype=torch.long, device=device)
        self.actions = torch.zeros(self.num_envs, self.num_actions, device=device)
        world = self.task.world(self.sim)
        # the task's per-step values that episode statistics average (tracking errors, ...)
        self._metrics = tuple(self.task.episode_metrics(world))
        # Buffers live as long as the env and are updated in place, so stepping under
        # torch.inference_mode and resetting outside it both work.
        self._episode_sums = {k: torch.zeros(self.num_envs, device=device) for k in (
            "return", *self._metrics, *self.task.reward_weights)}
        # steps summed into _episode_sums: fewer than the episode's counter when the episode
        # began with an advanced counter (a staggered or random start, or a phase-locked
        # restart after a fall), i.e. it is partial
        self._summed_steps = torch.zeros(self.num_envs, device=device)
        self.diverged_count = 0  # env steps that diverged since the last reset()
        self._nonfinite_actions = torch.zeros((), dtype=torch.long, device=device)
        self._sim_count: int | None = None  # physics steps only this prefix (warm-up)
        self._start_xy = torch.zeros(self.num_envs, 2, device=device)
        self.obs: Obs = {}
        self.randomizer = Randomizer(
            cfg.get("randomization"), self.sim, self.model, self.spec, self.layout,
            self.control_dt, self.gen, self.task.observation_layout(world, self.actions),
            self.task.obs_scales.get("policy", {}), int(cfg.seed), masked=self.masked)
        self.randomizer.startup()
        self._reset_envs(torch.arange(self.num_envs, device=device))  # obs exist from the start

    # ------------------------------------------------------------------ api
    @property
    def ctrl(self) -> torch.Tensor:
        """Actuator controls applied by the last step [N, nu]."""
        return self._ctrl

    @property
    def observation_sizes(self) -> dict[str, int]:
        return {k: v.shape[1] for k, v in self.obs.items()}

    @property
    def physics_warnings(self) -> dict[str, int]:
        """The physics engine's warnings since the env was made, by kind: MuJoCo's ("Nan,
        Inf or huge value in QACC") on native, mujoco_warp's buffer overflows on Warp (one
        host read there)."""
        return dict(getattr(self.sim, "warnings", {}))

    @property
    def diverged_count(self) -> int:
        """Env steps that diverged since the last ``reset()`` (masked: one host read)."""
        return int(self._diverged_count)

    @diverged_count.setter
    def diverged_count(self, value: int) -> None:
        if not self.masked:
            self._diverged_count = int(value)
        elif isinstance(getattr(self, "_diverged_count", None), torch.Tensor):
            self._diverged_count.fill_(int(value))  # in place: fine under inference_mode
        else:
            self._diverged_count = torch.tensor(int(value), device=self.device)

    def check_actions_seen(self) -> None:
        """Masked mode: raise the ``ValueError`` that an indexed step raises at once if any
        step since the last call got non-finite actions (one host read; call it once per
        rollout). Indexed mode checks every step and this does nothing."""
        if self.masked:
            bad = int(self._nonfinite_actions)
            self._nonfinite_actions.zero_()
            if bad:
                raise ValueError(f"actions contain NaN or inf ({bad} env steps since the "
                                 "last check)")

    @property
    def action_bounds(self) -> torch.Tensor:
        """The actions [num_actions, (low, high)] that span what the actuators accept: for
        position actuators their joint ranges, mapped through the default pose and the action
        scale; ``±task.action_clip`` where an actuator is unlimited."""
        return self._action_bounds

    def reset(self, warmup_policy: Callable[[Obs], torch.Tensor] | None = None,
              progress: Callable[[int, int], None] | None = None,
              warm_up: bool | None = None) -> Obs:
        """Reset every env and apply the reset schedule; returns (a copy of) the first obs.

        ``staggered`` steps the batch with the warm-up policy so that each group enters
        training ``offset`` steps into an episode; ``warmup_policy`` is used when the
        schedule's warm-up is ``policy``; ``progress(done, total)`` hears of every warm-up step.
        The warm-up runs on the first reset (``warm_up=None``) or when ``warm_up`` is true;
        other resets respawn every env at once and give the counters the schedule's starting
        offsets (episodes begun that way are marked ``partial``), in milliseconds.
        """
        all_ids = torch.arange(self.num_envs, device=self.device)
        self._reset_envs(all_ids)
        if self.schedule.prewarm and (not self._warmed_up if warm_up is None else warm_up):
            # counters advance with the states (and restart on falls as the schedule says)
            self._prewarm(warmup_policy, progress)
            self._warmed_up = True
        else:
            self.episode_length[:] = self.schedule.initial_counters(self.gen)
        for v in self._episode_sums.values():
            v.zero_()
        self._summed_steps.zero_()
        self.diverged_count = 0
        self.phase.pop()
        return {k: v.clone() for k, v in self.obs.items()}

    def step(self, actions: torch.Tensor):
        """Apply ``actions`` [N, num_actions] for one control step; autoreset finished envs.

        Returns fresh observation tensors; ``self.obs`` is a persistent copy of the latest.
        """
        actions = self._check_actions(actions)
        applied = self.randomizer.delayed(actions)
        self._ctrl[:, self._actuator_ids] = (
            self._default_ctrl + self.spec.action_scale * applied).double()
        self.randomizer.before_physics()
        self.sim.step(self._ctrl, self.decimation, self._sim_count)
        self.episode_length += 1
        self.phase.record(self.episode_length - 1, self.max_episode_length)
        world = self.task.world(self.sim)
        self.task.advance_commands(world)
        diverged = self.sim.diverged.clone()
        terminated = self.task.terminations(world) | diverged
        truncated = (self.episode_length >= self.max_episode_length) & ~terminated
        if self.terrain is not None:  # near the grid's edge: cut the episode short, not failed
            truncated |= self.terrain.out_of_bounds(world.base_pos[:, :2]) & ~terminated
        reward, terms = self.task.rewards(world, actions, self.actions)
        reward = torch.where(diverged, 0.0, reward)
        self._accumulate(reward, terms, self.task.episode_metrics(world))
        self.actions.copy_(actions)
        obs = self.randomizer.observe(self.task.observations(world, actions))
        if self.masked:
            info = self._end_episodes_masked(obs, terminated, truncated, diverged)
        else:
            info = self._end_episodes(obs, terminated, truncated, diverged)
        for k, v in obs.items():
            self.obs[k].copy_(v)
        return obs, reward, terminated, truncated, info

    def _end_episodes(self, obs: Obs, terminated: torch.Tensor, truncated: torch.Tensor,
                      diverged: torch.Tensor) -> dict:
        """Indexed mode: report and respawn the envs that ended (``obs`` gets their first
        observations); the info of the step."""
        info: dict = {}
        done = terminated | truncated
        done_ids = done.nonzero().squeeze(1)
        if len(done_ids):
            n_div = int(diverged.sum())
            info["final_obs"] = {k: torch.nan_to_num(v, 0.0, 0.0, 0.0) if n_div else v.clone()
                                 for k, v in obs.items()}
            info["episode"] = self._finish_episodes(done_ids, truncated)
            if self.curriculum is not None:  # terrain levels move before the envs respawn
                ep = info["episode"]
                whole = ep["partial"] == 0  # a partial episode says little of the policy
                self.curriculum.update(done_ids[whole], ep["distance"][whole],
                                       self.task.commands[done_ids[whole], :2].norm(dim=1),
                                       self.max_episode_length * self.control_dt)
                ep["terrain_level"] = self.curriculum.levels[done_ids].float()
            for hook in self.hooks.values():
                hook.on_episodes_end(done_ids, info["episode"])
            self._diverged_count += n_div
            info["diverged"] = n_div
            self._reset_envs(done_ids, obs,
                             self.schedule.restart_counters(self.episode_length[done_ids]))
        return info

    def _end_episodes_masked(self, obs: Obs, terminated: torch.Tensor, truncated: torch.Tensor,
                             diverged: torch.Tensor) -> dict:
        """Masked mode: ``_end_episodes`` without host reads (every env's rows, kept where
        its episode ended)."""
        done = terminated | truncated
        final_obs = {k: torch.nan_to_num(v, 0.0, 0.0, 0.0) for k, v in obs.items()}
        ep = self._episode_values(truncated)
        whole = done & (ep["partial"] == 0)  # a partial episode says little of the policy
        self._clear_sums(done)
        if self.curriculum is not None:  # terrain levels move before the envs respawn
            self.curriculum.update_where(whole, ep["distance"],
                                         self.task.commands[:, :2].norm(dim=1),
                                         self.max_episode_length * self.control_dt)
            ep["terrain_level"] = self.curriculum.levels.float()
        batch = EpisodeBatch(ep, done)
        for hook in self.hooks.values():
            if hasattr(hook, "on_episodes_end_where"):
                hook.on_episodes_end_where(done, ep)
            else:  # a host read: the envs that ended, and their rows
                ids = done.nonzero().squeeze(1)
                rows = {k: v[ids] for k, v in ep.items()}
                hook.on_episodes_end(ids, rows)
                for k, v in rows.items():  # what the hook added, back into every env's rows
                    if k not in ep:
                        ep[k] = v.new_zeros((self.num_envs, *v.shape[1:])).index_copy_(
                            0, ids, v)
        n_div = diverged.sum()
        self._diverged_count += n_div
        self._reset_where(done, obs)
        return {"final_obs": final_obs, "episode": batch, "diverged": n_div}

    def restart(self, env_ids: torch.Tensor) -> Obs:
        """Respawn ``env_ids`` now, dropping their running episodes unreported (what a
        next-step autoreset does); returns (a copy of) every env's observation.

        The respawn takes over the counter its dropped episode began with, one step ago (so
        under ``phase_locked`` an episode begun at a time-out stays whole); the step that
        episode took is not counted."""
        begun = (self.episode_length[env_ids] - 1).clamp(min=0)
        self._reset_envs(env_ids, counters=self.schedule.restart_counters(begun))
        for v in self._episode_sums.values():
            v[env_ids] = 0.0
        self._summed_steps[env_ids] = 0.0
        return {k: v.clone() for k, v in self.obs.items()}

    def set_commands(self, commands: torch.Tensor) -> Obs:
        """Replace every env's command [N, 3] (e.g. an evaluator's fixed commands) and return
        (a copy of) the observations, which now show it."""
        self.task.set_commands(commands)
        ids = torch.arange(self.num_envs, device=self.device)
        fresh = self.randomizer.observe(
            self.task.observations(self.task.world(self.sim, ids), self.actions, ids), ids)
        for k, v in fresh.items():
            self.obs[k].copy_(v)
        return {k: v.clone() for k, v in fresh.items()}

    def close(self) -> None:
        self.sim.close()

    def state_dict(self) -> dict:
        """Everything needed to continue this batch exactly: physics, counters, task, RNG."""
        return {
            "num_envs": self.num_envs,
            "robot": self.spec.name,
            "sim": self.sim.state_dict(),
            "episode_length": self.episode_length.clone(),
            "actions": self.actions.clone(),
            "ctrl": self._ctrl.clone(),
            "obs": {k: v.clone() for k, v in self.obs.items()},
            "episode_sums": {k: v.clone() for k, v in self._episode_sums.items()},
            "summed_steps": self._summed_steps.clone(),
            "start_xy": self._start_xy.clone(),
            "task": self.task.state_dict(),
            "randomizer": self.randomizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "terrain": None if self.curriculum is None else self.curriculum.state_dict(),
            "hooks": {name: hook.state_dict() for name, hook in self.hooks.items()},
            "generator": self.gen.get_state(),
            "diverged_count": self.diverged_count,
        }

    def load_state_dict(self, state: dict) -> list[str]:
        """Continue from ``state_dict()``'s state (of either backend, on any device).
        Returns notes on what does not continue exactly: random streams saved on another
        kind of device start afresh (seeded from the saved state)."""
        if state["num_envs"] != self.num_envs or state["robot"] != self.spec.name:
            raise ValueError(
                f"env state is for {state['num_envs']} envs of robot {state['robot']!r}; this env "
                f"has {self.num_envs} envs of robot {self.spec.name!r}"
            )
        self.sim.load_state_dict(state["sim"])
        self.episode_length.copy_(state["episode_length"])
        self.actions.copy_(state["actions"])
        self._ctrl.copy_(state["ctrl"])
        for k, v in state["obs"].items():
            self.obs[k].copy_(v)
        for k, v in state["episode_sums"].items():
            self._episode_sums[k].copy_(v)
        # states saved before partial episodes were told apart: count every episode as whole
        self._summed_steps.copy_(state.get("summed_steps", self.episode_length.float()))
        self._start_xy.copy_(state["start_xy"])
        self.task.load_state_dict(state["task"])
        self.randomizer.load_state_dict(state["randomizer"])
        self.schedule.load_state_dict(state["schedule"])
        if self.curriculum is not None:
            self.curriculum.load_state_dict(state.get("terrain"))
        # states saved before hooks were named held the subtasks under "multitask"
        saved = state.get("hooks", {"subtasks": state.get("multitask")})
        for name, hook in self.hooks.items():
            if saved.get(name) is None:
                raise ValueError(f"the env state has no {name!r} state: it was saved by an env "
                                 "that ran without it")
            hook.load_state_dict(saved[name])
        notes = []
        if not restore_generator(self.gen, state["generator"]):
            notes.append(f"the env's random draws were saved on another kind of device than "
                         f"{self.device.type}: they continue from a new stream")
        if not self.randomizer.noise_exact:
            notes.append("the observation noise was saved on another kind of device than "
                         f"{self.device.type}: it continues from a new stream")
        self.diverged_count = state["diverged_count"]
        return notes

    # ------------------------------------------------------------------ internals
    def _check_actions(self, actions: torch.Tensor) -> torch.Tensor:
        actions = torch.as_tensor(actions, dtype=torch.float32, device=self.device)
        if actions.shape != (self.num_envs, self.num_actions):
            raise ValueError(f"actions must have shape ({self.num_envs}, {self.num_actions}) "
                             f"(num_envs, num_actions), got {tuple(actions.shape)}")
        if self.masked:  # counted here, raised by check_actions_seen (no host read)
            self._nonfinite_actions += (~torch.isfinite(actions)).any(1).sum()
        elif not torch.isfinite(actions).all():
            bad = (~torch.isfinite(actions)).any(1).nonzero().squeeze(1)[:10].tolist()
            raise ValueError(f"actions contain NaN or inf (envs {bad}...)")
        return actions.clamp(-self.action_clip, self.action_clip)

    def _bounds_of_actions(self) -> torch.Tensor:
        ids = self.layout.actuator_ids
        clip = self.action_clip
        limited = torch.as_tensor(self.model.actuator_ctrllimited[ids] > 0)
        ctrl = torch.as_tensor(self.model.actuator_ctrlrange[ids], dtype=torch.float32)
        default = torch.as_tensor(self.layout.default_ctrl, dtype=torch.float32)[:, None]
        bounds = ((ctrl - default) / self.spec.action_scale).clamp(-clip, clip)
        unlimited = torch.tensor([-clip, clip]).expand_as(bounds)
        return torch.where(limited[:, None], bounds, unlimited).to(self.device)

    def _reset_envs(self, env_ids: torch.Tensor, obs: Obs | None = None,
                    counters: torch.Tensor | int = 0) -> None:
        """Respawn ``env_ids`` with these time-out ``counters`` and write their first
        observation into ``obs`` (or self.obs)."""
        for hook in self.hooks.values():  # e.g. switch subtask (terrain tile, commands, gait)
            hook.before_reset(env_ids)
        qpos, qvel = self.task.initial_state(env_ids, self.model.nq, self.model.nv)
        if self.curriculum is not None:  # terrain: spawn on the env's tile origin
            qpos[:, 0:3] += self.curriculum.origins(env_ids).to(qpos.dtype)
        self.randomizer.reset(env_ids, qpos, qvel)
        self.sim.reset(env_ids, qpos, qvel)
        self.task.reset(env_ids)
        self.episode_length[env_ids] = counters
        self.actions[env_ids] = 0.0
        self._start_xy[env_ids] = qpos[:, 0:2]
        fresh = self.randomizer.observe(
            self.task.observations(self.task.world(self.sim, env_ids), self.actions, env_ids),
            env_ids)
        if obs is None:
            if not self.obs:
                self.obs = {k: torch.zeros(self.num_envs, v.shape[1], device=self.device)
                            for k, v in fresh.items()}
            obs = self.obs
        for k, v in fresh.items():
            obs[k][env_ids] = v

    def _reset_where(self, mask: torch.Tensor, obs: Obs) -> None:
        """``_reset_envs`` of the envs where ``mask`` is set, whose episodes ended (counters
        as the schedule restarts them), without host reads: spawn states, draws and first
        observations are made for every env and kept by mask."""
        ids = self._all_ids
        for hook in self.hooks.values():
            if hasattr(hook, "before_reset_where"):
                hook.before_reset_where(mask)
            else:
                hook.before_reset(mask.nonzero().squeeze(1))
        qpos, qvel = self.task.initial_state(ids, self.model.nq, self.model.nv)
        if self.curriculum is not None:
            qpos[:, 0:3] += self.curriculum.origins(ids).to(qpos.dtype)
        self.randomizer.reset_where(mask, qpos, qvel)
        self.sim.reset_where(mask, qpos, qvel)
        self.task.reset_where(mask)
        self.episode_length.copy_(torch.where(
            mask, self.schedule.restart_counters(self.episode_length), self.episode_length))
        rows = mask[:, None]
        self.actions.masked_fill_(rows, 0.0)
        self._start_xy.copy_(torch.where(rows, qpos[:, 0:2], self._start_xy))
        fresh = self.randomizer.observe(
            self.task.observations(self.task.world(self.sim, ids), self.actions, ids), ids)
        for k, v in fresh.items():
            obs[k].copy_(torch.where(rows, v, obs[k]))

    def _prewarm(self, warmup_policy: Callable[[Obs], torch.Tensor] | None,
                 progress: Callable[[int, int], None] | None = None) -> None:
        """Run the reset schedule's warm-up, simulating only the groups that have started."""
        shape = (self.num_envs, self.num_actions)

        def step(started: int) -> None:
            actions = self.schedule.warmup_actions(self.obs, shape, self.gen, warmup_policy)
            self._sim_count = started
            try:
                self.step(actions)
            finally:
                self._sim_count = None

        self.schedule.warm_up(self._reset_envs, step, self.device, progress)

    def _accumulate(self, reward, terms, metrics) -> None:
        sums = self._episode_sums
        sums["return"] += reward
        self._summed_steps += 1
        for k, v in (*metrics.items(), *terms.items()):
            sums[k] += v

    def _episode_values(self, truncated: torch.Tensor,
                        rows: torch.Tensor | slice = slice(None)) -> dict[str, torch.Tensor]:
        """The statistics of the episodes of ``rows`` as they stand (every env [N] by default:
        masked mode keeps the rows of the envs that ended)."""
        length = self.episode_length[rows].float()
        summed = self._summed_steps[rows]
        travelled = self.sim.qpos[rows, 0:2].float() - self._start_xy[rows]
        out = {"length": length, "timeout": truncated[rows].float(),
               "distance": travelled.norm(dim=1), "partial": (summed < length).float()}
        for k, v in self._episode_sums.items():
            out[k] = v[rows] / summed.clamp(min=1) if k in self._metrics else v[rows].clone()
        return out

    def _clear_sums(self, mask: torch.Tensor) -> None:
        for v in self._episode_sums.values():
            v.masked_fill_(mask, 0.0)
        self._summed_steps.masked_fill_(mask, 0.0)

    def _finish_episodes(self, ids: torch.Tensor, truncated: torch.Tensor) -> dict:
        """Per-episode statistics of the envs ``ids`` that just ended ([len(ids)] each)."""
        out = self._episode_values(truncated, ids)
        for v in self._episode_sums.values():
            v[ids] = 0.0
        self._summed_steps[ids] = 0.0
        return out
