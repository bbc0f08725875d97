"""A grid of terrain tiles as one MuJoCo heightfield: rows are difficulty levels, columns types.

The heights are generated here with numpy from a seed at start-up (nothing is read or
written at run time), handed to the model builder as the ``hfield`` of the geom named
"ground", and kept as a torch tensor so the task can sample the ground under the robots
(``heights_at``) without asking the simulator.

Layout: level ``i`` (0 = easiest) spans x, column ``j`` spans y; the whole grid is centred
on the world origin and ringed by a flat border. Every tile has a flat square platform at
its centre where envs spawn; "up" and "down" name what a robot meets walking away from it
(``stairs_up``: it spawns in a pit and climbs out; ``stairs_down``: it spawns on top of a
pyramid and descends). Difficulty grows linearly from each type's first to its last value
over the levels.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf

from locomotion.config_checks import ConfigError

FLAT = "flat"  # the terrain name that means no grid: the ground plane


@dataclass(frozen=True)
class Tile:
    """One tile being generated: its size in vertices, its difficulty and its random stream."""

    n: int  # vertices per side
    resolution: float  # m between vertices
    platform: int  # half-width of the flat spawn platform at the centre, vertices
    difficulty: float  # 0 on level 0, 1 on the top level
    rng: np.random.Generator

    def ring(self) -> np.ndarray:
        """Chebyshev distance of every vertex from the tile centre, in vertices [n, n]."""
        k = np.abs(np.arange(self.n) - self.n // 2)
        return np.maximum(k[:, None], k[None, :])

    def lerp(self, first_last) -> float:
        """A difficulty-scaled value between the level-0 and top-level ends of a range."""
        first, last = float(first_last[0]), float(first_last[1])
        return first + (last - first) * self.difficulty

    def vertices(self, metres: float) -> int:
        """A length in whole vertex steps (at least one)."""
        return max(1, round(metres / self.resolution))


def _flat(t: Tile, p: Mapping) -> np.ndarray:
    return np.zeros((t.n, t.n))


def _rough(t: Tile, p: Mapping) -> np.ndarray:
    """Uniform noise of ``noise`` m peak to peak on a ``cell``-m lattice, bilinear between."""
    amp, cell = t.lerp(p["noise"]), t.vertices(float(p["cell"]))
    m = (t.n - 1) // cell + 2
    lattice = t.rng.uniform(-0.5 * amp, 0.5 * amp, size=(m, m))
    f = np.arange(t.n) / cell
    i = np.minimum(f.astype(int), m - 2)
    w = f - i
    rows = lattice[i] * (1 - w)[:, None] + lattice[i + 1] * w[:, None]
    return rows[:, i] * (1 - w) + rows[:, i + 1] * w


def _pyramid_distance(t: Tile) -> np.ndarray:
    """Metres from the tile edge toward the platform, constant on the platform [n, n]."""
    return (t.n // 2 - np.maximum(t.ring(), t.platform)) * t.resolution


def _slope(sign: float) -> Callable[[Tile, Mapping], np.ndarray]:
    def make(t: Tile, p: Mapping) -> np.ndarray:
        """Pyramid of ``slope`` rad faces: centre high (sign +1) or low (-1)."""
        return sign * math.tan(t.lerp(p["slope"])) * _pyramid_distance(t)
    return make


def _stairs(sign: float) -> Callable[[Tile, Mapping], np.ndarray]:
    def make(t: Tile, p: Mapping) -> np.ndarray:
        """Pyramid of ``step_width``-m steps of ``step_height`` m: centre high (+1) or low (-1).

        Step edges fall on vertices (integer arithmetic), so every step is exactly as wide
        as configured once rounded to the resolution.
        """
        width = t.vertices(float(p["step_width"]))
        steps = (t.n // 2 - np.maximum(t.ring(), t.platform)) // width
        return sign * t.lerp(p["step_height"]) * steps
    return make


def _obstacles(t: Tile, p: Mapping) -> np.ndarray:
    """``count`` raised blocks of side ``size`` m and height up to ``height`` m; clear platform."""
    h = np.zeros((t.n, t.n))
    top = t.lerp(p["height"])
    lo, hi = (t.vertices(float(s)) for s in p["size"])
    count = int(p["count"])
    sides = t.rng.integers(lo, hi + 1, size=(count, 2))
    corners = t.rng.integers(0, t.n, size=(count, 2))
    heights = t.rng.uniform(0.5 * top, top, size=count)
    for (sy, sx), (y, x), z in zip(sides, corners, heights, strict=True):
        block = h[y:y + sy, x:x + sx]
        np.maximum(block, z, out=block)
    h[t.ring() <= t.platform] = 0.0
    return h


# name -> (tile generator, parameter names besides ``proportion``)
TERRAIN_TYPES: dict[str, tuple[Callable[[Tile, Mapping], np.ndarray], tuple[str, ...]]] = {
    "flat": (_flat, ()),
    "rough": (_rough, ("noise", "cell")),
    "slope_up": (_slope(-1.0), ("slope",)),
    "slope_down": (_slope(1.0), ("slope",)),
    "stairs_up": (_stairs(-1.0), ("step_height", "step_width")),
    "stairs_down": (_stairs(1.0), ("step_height", "step_width")),
    "obstacles": (_obstacles, ("height", "size", "count")),
}


@dataclass(frozen=True)
class Heightfield:
    """The ``hfield`` asset and geom placement the model builder adds (MuJoCo conventions)."""

    nrow: int  # vertices along y
    ncol: int  # vertices along x
    size: tuple[float, float, float, float]  # half x, half y, elevation range, base depth
    pos: tuple[float, float, float]  # geom position: grid centre at the lowest height
    data: np.ndarray  # [nrow, ncol] heights normalized to [0, 1]


class TerrainGrid:
    """The terrain heights, tile origins and height lookup of one configured grid."""

    def __init__(self, cfg: DictConfig | Mapping, device: torch.device | str = "cpu"):
        cfg = OmegaConf.create(dict(cfg)) if not isinstance(cfg, DictConfig) else cfg
        self.levels = _positive_int(cfg, "levels")
        self.num_columns = _positive_int(cfg, "columns")
        self.tile_size = _positive(cfg, "tile_size")
        self.resolution = _positive(cfg, "resolution")
        self.border = float(cfg.border)
        if self.border < 0:
            raise ConfigError(f"terrain.border must be >= 0 m, got {self.border}")
        self.seed = int(cfg.seed)
        self.bounds_margin = float(cfg.bounds_margin)
        self.params = _check_types(cfg.types)
        self.column_types = _columns_of(self.params, self.num_columns)
        n = round(self.tile_size / self.resolution)
        if n < 4 or abs(n * self.resolution - self.tile_size) > 1e-6 * self.tile_size:
            raise ConfigError(f"terrain.tile_size {self.tile_size} must be a multiple (>= 4) of "
                              f"terrain.resolution {self.resolution}")
        self._n = n
        self._platform = round(0.5 * float(cfg.platform) / self.resolution)
        self.heights = self._generate()  # [ny, nx] m, float32
        self.half_extent = (0.5 * (self.heights.shape[1] - 1) * self.resolution,
                            0.5 * (self.heights.shape[0] - 1) * self.resolution)
        self.device = torch.device(device)
        self._heights_t = torch.as_tensor(self.heights, device=self.device)
        self._half_extent_t = torch.tensor(self.half_extent, device=self.device)
        self.origins = torch.as_tensor(self._origins(float(cfg.spawn_patch)),
                                       dtype=torch.float32, device=self.device)

    # ------------------------------------------------------------------ generation
    def _generate(self) -> np.ndarray:
        n, b = self._n, round(self.border / self.resolution)
        heights = np.zeros((2 * b + self.num_columns * n + 1, 2 * b + self.levels * n + 1))
        for level in range(self.levels):
            for col, kind in enumerate(self.column_types):
                tile = Tile(n, self.resolution, self._platform, self.difficulty(level),
                            np.random.default_rng([self.seed, level, col]))
                y, x = b + col * n, b + level * n
                heights[y:y + n, x:x + n] = TERRAIN_TYPES[kind][0](tile, self.params[kind])
        return heights.astype(np.float32)

    def _origins(self, patch: float) -> np.ndarray:
        """Tile centres [levels, columns, 3]; z is the highest ground within ``patch`` m."""
        out = np.zeros((self.levels, self.num_columns, 3))
        b, n, r = round(self.border / self.resolution), self._n, round(patch / self.resolution)
        for level in range(self.levels):
            for col in range(self.num_columns):
                x, y = b + level * n + n // 2, b + col * n + n // 2
                out[level, col] = (x * self.resolution - self.half_extent[0],
                                   y * self.resolution - self.half_extent[1],
                                   self.heights[max(y - r, 0):y + r + 1,
                                                max(x - r, 0):x + r + 1].max())
        return out

    def difficulty(self, level: int) -> float:
        """0 on level 0, 1 on the top level (0 when there is one level)."""
        return level / (self.levels - 1) if self.levels > 1 else 0.0

    # ------------------------------------------------------------------ queries
    def heights_at(self, xy: torch.Tensor) -> torch.Tensor:
        """Ground height [...] under world points ``xy`` [..., 2], bilinear between vertices.

        One ``grid_sample`` call (the grid is centred on the origin, so x / half extent is
        its normalized coordinate); points outside the grid read the nearest edge (border).
        """
        h = self._heights_t
        grid = (xy.to(h.dtype) / self._half_extent_t).reshape(1, -1, 1, 2)
        out = F.grid_sample(h[None, None], grid, mode="bilinear", padding_mode="border",
                            align_corners=True)
        return out.reshape(xy.shape[:-1])

    def inside(self, xy: torch.Tensor, margin: float = 0.0) -> torch.Tensor:
        """Whether points ``xy`` [..., 2] are at least ``margin`` m inside the grid's edge."""
        return ((xy[..., 0].abs() <= self.half_extent[0] - margin)
                & (xy[..., 1].abs() <= self.half_extent[1] - margin))

    def out_of_bounds(self, xy: torch.Tensor) -> torch.Tensor:
        """Whether points ``xy`` [..., 2] are within ``bounds_margin`` of the edge or beyond."""
        return ~self.inside(xy, self.bounds_margin)

    def heightfield(self, base_depth: float = 1.0) -> Heightfield:
        """The grid as a MuJoCo heightfield whose surface is exactly ``heights``."""
        low, high = float(self.heights.min()), float(self.heights.max())
        span = high - low
        data = (self.heights - low) / span if span > 0 else np.zeros_like(self.heights)
        return Heightfield(nrow=self.heights.shape[0], ncol=self.heights.shape[1],
                           size=(*self.half_extent, max(span, 1e-3), base_depth),
                           pos=(0.0, 0.0, low), data=data.astype(np.float32))


def make_terrain(cfg: DictConfig | None, device: torch.device | str = "cpu") -> TerrainGrid | None:
    """The grid of a ``terrain`` config, or None for the ground plane (absent or ``flat``)."""
    if cfg is None or cfg.get("name", FLAT) == FLAT:
        return None
    return TerrainGrid(cfg, device)


# ---------------------------------------------------------------------- validation
def _positive(cfg: DictConfig, key: str) -> float:
    value = float(cfg[key])
    if not value > 0:
        raise ConfigError(f"terrain.{key} must be > 0, got {value}")
    return value


def _positive_int(cfg: DictConfig, key: str) -> int:
    value = cfg[key]
    if not isinstance(value, int) or value < 1:
        raise ConfigError(f"terrain.{key} must be an integer >= 1, got {value!r}")
    return value


def _check_types(types: DictConfig) -> dict[str, dict]:
    """Each configured type's parameters; a bad name, share or missing key is an error."""
    unknown = sorted(set(types) - set(TERRAIN_TYPES))
    if unknown:
        raise ConfigError(f"unknown terrain types {unknown}; valid: {list(TERRAIN_TYPES)}")
    params = {}
    for name, p in types.items():
        p = {} if p is None else dict(p)
        share = p.pop("proportion", None)
        if isinstance(share, bool) or not isinstance(share, (int, float)) \
                or not math.isfinite(share) or share < 0:
            raise ConfigError(f"terrain.types.{name}.proportion must be a number >= 0, "
                              f"got {share!r}")
        needed = TERRAIN_TYPES[name][1]
        if sorted(p) != sorted(needed):
            raise ConfigError(f"terrain.types.{name} takes parameters {['proportion', *needed]},"
                              f" got {['proportion', *p]}")
        params[name] = {"proportion": float(share), **p}
    if sum(p["proportion"] for p in params.values()) <= 0:
        raise ConfigError("terrain.types: at least one proportion must be > 0, got "
                          f"{ {k: p['proportion'] for k, p in params.items()} }")
    return params


def _columns_of(params: dict[str, dict], columns: int) -> list[str]:
    """Type of each column: column j takes the type whose cumulative share covers (j + 0.5)/C."""
    names = list(params)
    shares = np.array([params[k]["proportion"] for k in names])
    bounds = np.cumsum(shares / shares.sum())
    centres = (np.arange(columns) + 0.5) / columns
    picks = np.minimum(np.searchsorted(bounds, centres, side="right"), len(names) - 1)
    return [names[i] for i in picks]
