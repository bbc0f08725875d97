"""Subtasks: named combinations of terrain, command range, gait and perturbation.

A subtask (``configs/multitask/*.yaml``) says where an env walks (terrain types and a
level range of the terrain grid), what it is asked (command ranges, a gait) and what
hits it (pushes or not), and when an episode of it counts as a success. ``SubtaskSet``,
an episode hook of the env, applies an env slot's subtask when the slot resets, gives the
policy a one-hot of it, and judges each finished episode; the scheduler
(``locomotion.multitask``) sizes the subtasks from those verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from locomotion.config_checks import ConfigError
from locomotion.tasks.gaits import FREE
from locomotion.tasks.slots import SubtaskSlots

FLAT = "flat"
CHECKS = ("survived", "tracked", "on_gait")  # what an episode must pass to be a success


@dataclass(frozen=True)
class Subtask:
    name: str
    terrain: tuple[str, ...]            # terrain types it walks on
    levels: tuple[int, int]             # lowest and highest terrain level
    commands: torch.Tensor              # [3, 2]: vx, vy, yaw-rate ranges
    gait: str                           # "free" or a gait of task.gaits
    push: bool                          # the push event may fire on it
    max_lin_vel_error: float            # success: mean planar tracking error, m/s
    min_gait_match: float               # success: share of feet on schedule (gaits only)


def episode_checks(episode: dict, max_lin_vel_error, min_gait_match) -> torch.Tensor:
    """The ``CHECKS`` of finished episodes [n, 3] (1 passed, 0 failed): survived to the
    time-out, mean planar tracking error at most ``max_lin_vel_error`` (m/s), share of foot
    contacts on the gait schedule at least ``min_gait_match`` (thresholds: one per episode
    [n], or one for all)."""
    return torch.stack((episode["timeout"] > 0,
                        episode["lin_vel_error"] <= max_lin_vel_error,
                        episode["gait_match"] >= min_gait_match), dim=1).float()


def parse_subtasks(cfg, default_commands, terrain, gaits) -> list[Subtask]:
    """Subtasks of ``cfg.subtasks``, checked against the terrain grid and the gait table."""
    if not cfg.get("subtasks"):
        raise ConfigError("multitask.subtasks is empty; name at least one subtask")
    terrain_types = sorted(set(terrain.column_types)) if terrain is not None else [FLAT]
    gait_names = ["free", *(gaits.names if gaits is not None else [])]
    top = terrain.levels - 1 if terrain is not None else 0
    out = []
    for name, s in cfg.subtasks.items():
        where = f"multitask.subtasks.{name}"
        types = tuple(s.get("terrain", [FLAT]))
        bad = sorted(set(types) - set(terrain_types))
        if bad:
            raise ConfigError(f"{where}: unknown terrain {bad}; this run's terrain grid has "
                              f"columns of {terrain_types}")
        gait = s.get("gait", "free")
        if gait not in gait_names:
            raise ConfigError(f"{where}: unknown gait {gait!r}; valid: {gait_names}")
        levels = tuple(int(v) for v in s.get("levels", [0, top]))
        if not 0 <= levels[0] <= levels[1] <= top:
            raise ConfigError(f"{where}: levels {list(levels)} must satisfy 0 <= low <= high "
                              f"<= {top}")
        commands = {**default_commands, **s.get("commands", {})}
        success = s.get("success", {})
        out.append(Subtask(
            name=name, terrain=types, levels=levels,
            commands=torch.tensor([list(commands[k]) for k in
                                   ("lin_vel_x", "lin_vel_y", "ang_vel_yaw")]),
            gait=gait, push=bool(s.get("push", False)),
            max_lin_vel_error=float(success.get("max_lin_vel_error", 0.25)),
            min_gait_match=float(success.get("min_gait_match", 0.8))))
    return out


class SubtaskSet:
    """The subtasks of one env batch, the slot each env runs, and per-episode success."""

    def __init__(self, cfg, env):
        """``cfg``: the run's ``multitask`` config; ``env``: the batch it rides on."""
        task, self.env = env.task, env
        self.subtasks = parse_subtasks(cfg, dict(env.cfg.task.commands), env.terrain,
                                       task.gait)
        self.names = [s.name for s in self.subtasks]
        s, n = len(self.subtasks), env.num_envs
        counts = torch.full((s,), n // s) + (torch.arange(s) < n % s)
        self.slots = SubtaskSlots(n, counts, env.device)
        self.onehot = torch.zeros(n, s, device=env.device)
        self._commands = torch.stack([t.commands for t in self.subtasks])
        self._gait = torch.tensor([FREE if t.gait == "free" else task.gait.index(t.gait)
                                   for t in self.subtasks])
        self._push = torch.tensor([t.push for t in self.subtasks], device=env.device)
        self._max_err = torch.tensor([t.max_lin_vel_error for t in self.subtasks],
                                     device=env.device)
        self.has_gait = [t.gait != "free" for t in self.subtasks]
        self._min_match = torch.tensor([t.min_gait_match if g else 0.0 for t, g in
                                        zip(self.subtasks, self.has_gait, strict=True)],
                                       device=env.device)
        self._levels = torch.tensor([t.levels for t in self.subtasks], device=env.device)
        if env.terrain is not None:
            types = env.terrain.column_types
            self._columns = [torch.tensor([c for c, kind in enumerate(types) if kind in t.terrain],
                                          device=env.device) for t in self.subtasks]
            # the same as a padded table [S, most columns] and counts, for masked resets
            self._column_count = torch.tensor([len(c) for c in self._columns],
                                              device=env.device)
            self._column_table = torch.nn.utils.rnn.pad_sequence(self._columns,
                                                                 batch_first=True)
        self._commands_dev = self._commands.to(env.device)
        self._gait_dev = self._gait.to(env.device)
        if env.terrain is not None:  # every slot enters its first subtask
            env.curriculum.levels.copy_(self._entry_levels(self.slots.current))
        task.observe_subtasks(self.onehot)

    def _entry_levels(self, sub: torch.Tensor) -> torch.Tensor:
        """Levels [n] for slots entering subtasks ``sub`` [n]: uniform over each one's range.

        A slot keeps its level while it stays in a subtask; one that enters a subtask has
        earned nothing there, so it does not carry over a level earned elsewhere (flat-ground
        slots climb the grid with distance and would land on the top of every range)."""
        low, high = self._levels[sub].unbind(1)
        u = torch.rand(len(sub), generator=self.env.gen, device=self.env.gen.device)
        span = high - low + 1
        return low + torch.minimum((u * span).long(), span - 1)

    def before_reset(self, env_ids: torch.Tensor) -> None:
        """Envs ``env_ids`` are resetting: switch them to their target subtask and set it up
        (command ranges, gait, pushes, terrain tile) before the task spawns them."""
        entering = self.slots.target[env_ids] != self.slots.current[env_ids]
        self.slots.adopt(env_ids)
        sub = self.slots.current[env_ids]
        env, cpu = self.env, sub.cpu()
        env.task.set_command_ranges(env_ids, self._commands[cpu])
        if env.task.gait is not None:
            env.task.gait.assign(env_ids, self._gait[cpu])
        env.randomizer.enable("push", env_ids, self._push[sub])
        self.onehot[env_ids] = torch.nn.functional.one_hot(sub, len(self.subtasks)).float()
        if env.terrain is not None:
            self._place_on_terrain(env_ids, sub, entering)

    def before_reset_where(self, mask: torch.Tensor) -> None:
        """``before_reset`` of the envs where ``mask`` [N] is set (the env's masked step
        mode: no host read)."""
        entering = mask & (self.slots.target != self.slots.current)
        self.slots.adopt_where(mask)
        sub, env = self.slots.current, self.env
        env.task.set_command_ranges_where(mask, self._commands_dev[sub])
        if env.task.gait is not None:
            env.task.gait.assign_where(mask, self._gait_dev[sub])
        env.randomizer.enable_where("push", mask, self._push[sub])
        onehot = torch.nn.functional.one_hot(sub, len(self.subtasks)).float()
        self.onehot.copy_(torch.where(mask[:, None], onehot, self.onehot))
        if env.terrain is not None:
            cur, count = env.curriculum, self._column_count[sub]
            u = torch.rand(len(sub), generator=env.gen, device=env.gen.device)
            pick = torch.minimum((u * count).long(), count - 1)
            levels = self._levels[sub]
            kept = torch.maximum(torch.minimum(cur.levels, levels[:, 1]), levels[:, 0])
            level = torch.where(entering, self._entry_levels(sub), kept)
            cur.place_where(mask, self._column_table[sub, pick], level)

    def _place_on_terrain(self, env_ids: torch.Tensor, sub: torch.Tensor,
                          entering: torch.Tensor) -> None:
        """A column of the subtask's terrain types and a level in its range: the slot's own,
        clamped, or an entry level where it is ``entering`` the subtask (batched per subtask)."""
        cur = self.env.curriculum
        for k in torch.unique(sub).tolist():
            here = sub == k
            ids = env_ids[here]
            cols = self._columns[k]
            pick = torch.randint(len(cols), (len(ids),), generator=self.env.gen,
                                 device=self.env.gen.device).to(cols.device)
            low, high = self._levels[k].tolist()
            level = torch.where(entering[here], self._entry_levels(sub[here]),
                                cur.levels[ids].clamp(low, high))
            cur.place(ids, cols[pick], level)

    def on_episodes_end(self, env_ids: torch.Tensor | slice, episode: dict) -> None:
        """Judge the finished episodes of ``env_ids``: adds to ``episode`` their ``subtask``
        id [n], the checks of ``CHECKS`` [n, 3] (``episode_checks``), ``gait_match`` [n]
        (the env's share of foot contacts on schedule; 0 without gait commands) and
        ``success`` [n] (all three checks passed)."""
        sub = self.slots.current[env_ids]
        episode.setdefault("gait_match", torch.zeros_like(episode["timeout"]))
        checks = episode_checks(episode, self._max_err[sub], self._min_match[sub])
        episode.update(subtask=sub, checks=checks, success=checks.min(dim=1).values)

    def on_episodes_end_where(self, mask: torch.Tensor, episode: dict) -> None:
        """``on_episodes_end`` with every env's rows [N] (the env's masked step mode)."""
        self.on_episodes_end(slice(None), episode)

    def state_dict(self) -> dict:
        return {"slots": self.slots.state_dict(), "onehot": self.onehot.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.slots.load_state_dict(state["slots"])
        self.onehot.copy_(state["onehot"])
