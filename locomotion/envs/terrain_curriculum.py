"""Which terrain tile each env walks on, and the level moves that follow its progress.

Envs are spread evenly over the grid's columns (terrain types) and start on random levels
in [0, max_init_level]. When an env's episode ends it moves up a level if it walked farther
than ``promote_distance`` tile sides from its spawn point, down if it walked less than
``demote_ratio`` times its commanded speed times the episode duration (common practice in
legged-robot training); envs that pass the top level go to a random level so that the
hardest tiles never hoard the batch. All of it is batched over env ids.
"""

from __future__ import annotations

import torch
from omegaconf import DictConfig

from locomotion.config_checks import ConfigError
from locomotion.sim.terrain import TerrainGrid


class TerrainCurriculum:
    """Per-env terrain level and column [N], moved at resets."""

    def __init__(self, terrain: TerrainGrid, cfg: DictConfig, num_envs: int,
                 generator: torch.Generator, device: torch.device | str = "cpu"):
        """``generator`` (on ``device``) draws the initial and wrap-around levels."""
        self.terrain = terrain
        self.gen = generator
        self.device = torch.device(device)
        self.enabled = bool(cfg.enabled)
        top = terrain.levels - 1
        max_init = cfg.max_init_level
        if not isinstance(max_init, int) or not 0 <= max_init <= top:
            raise ConfigError(f"terrain.curriculum.max_init_level must be an integer in "
                              f"[0, {top}] (levels - 1), got {max_init!r}")
        self.promote_distance = float(cfg.promote_distance) * terrain.tile_size
        self.demote_ratio = float(cfg.demote_ratio)
        self.levels = torch.randint(0, max_init + 1, (num_envs,), generator=generator,
                                    device=generator.device).to(self.device)
        self.columns = torch.div(torch.arange(num_envs, device=self.device) * terrain.num_columns,
                                 num_envs, rounding_mode="floor")

    def origins(self, env_ids: torch.Tensor) -> torch.Tensor:
        """Spawn points [n, 3] of ``env_ids``: the origins of their current tiles."""
        return self.terrain.origins[self.levels[env_ids], self.columns[env_ids]]

    def place(self, env_ids: torch.Tensor, columns: torch.Tensor, levels: torch.Tensor) -> None:
        """Put ``env_ids`` on the tiles (``levels``, ``columns``); they spawn there at reset."""
        env_ids = env_ids.to(self.device)
        self.columns[env_ids] = columns.to(self.device)
        self.levels[env_ids] = levels.to(self.device)

    def update(self, env_ids: torch.Tensor, distance: torch.Tensor, command_speed: torch.Tensor,
               episode_s: float) -> None:
        """Move ``env_ids`` whose episodes just ended up or down a level.

        ``distance``: metres each walked from its spawn point; ``command_speed``: its planar
        command speed, m/s; ``episode_s``: the full episode duration.
        """
        if self.enabled:
            up = distance > self.promote_distance
            down = (distance < self.demote_ratio * command_speed * episode_s) & ~up
            levels = self.levels[env_ids] + up.long() - down.long()
            top = self.terrain.levels
            wrap = torch.randint(0, top, (len(env_ids),), generator=self.gen,
                                 device=self.gen.device).to(self.device)
            self.levels[env_ids] = torch.where(levels >= top, wrap, levels.clamp(min=0))

    def update_where(self, mask: torch.Tensor, distance: torch.Tensor,
                     command_speed: torch.Tensor, episode_s: float) -> None:
        """``update`` of the envs where ``mask`` [N] is set, from rows of every env (no host
        read)."""
        if self.enabled:
            up = distance > self.promote_distance
            down = (distance < self.demote_ratio * command_speed * episode_s) & ~up
            levels = self.levels + up.long() - down.long()
            top = self.terrain.levels
            wrap = torch.randint(0, top, (len(levels),), generator=self.gen,
                                 device=self.gen.device)
            levels = torch.where(levels >= top, wrap, levels.clamp(min=0))
            self.levels.copy_(torch.where(mask, levels, self.levels))

    def place_where(self, mask: torch.Tensor, columns: torch.Tensor,
                    levels: torch.Tensor) -> None:
        """``place`` the envs where ``mask`` [N] is set, from rows of every env."""
        self.columns.copy_(torch.where(mask, columns, self.columns))
        self.levels.copy_(torch.where(mask, levels, self.levels))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"levels": self.levels.clone(), "columns": self.columns.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor] | None) -> None:
        if state is None:
            raise ValueError("the env state has no terrain levels (saved on the ground plane); "
                             "it cannot resume on a terrain grid")
        if state["levels"].shape != self.levels.shape:
            raise ValueError(f"terrain curriculum state is for {len(state['levels'])} envs, "
                             f"this env has {len(self.levels)}")
        self.levels.copy_(state["levels"])
        self.columns.copy_(state["columns"])
