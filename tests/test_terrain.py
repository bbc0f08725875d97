"""Tests for the terrain grid, its heightfield, spawning on tiles, the curriculum and the scan."""

import math

import mujoco
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from locomotion.config import load_config
from locomotion.envs.terrain_curriculum import TerrainCurriculum
from locomotion.sim.model_builder import SolverProfile, build_model
from locomotion.sim.robot_spec import load_robot_spec
from locomotion.sim.terrain import TERRAIN_TYPES, TerrainGrid
from locomotion.tasks.world import World

TILE, RES, BORDER, PLATFORM = 4.0, 0.1, 1.0, 2.0
N = round(TILE / RES)  # vertices per tile side
B = round(BORDER / RES)
LEVELS = 3
TYPES = list(TERRAIN_TYPES)  # one column each, in this order
# A small rough grid for env tests: 4 levels of 4 m tiles, the configured type shares.
SMALL = ("task=rough", "terrain.levels=4", "terrain.tile_size=4.0", "terrain.border=2.0",
         "terrain.curriculum.max_init_level=3")
CALM = ("task.init_state.base_xy=0.0", "task.init_state.joint_pos_scale=[1.0,1.0]",
        "task.init_state.base_lin_vel=0.0", "task.init_state.base_ang_vel=0.0")


def grid_config(**changes) -> dict:
    """A terrain config with one column per type (equal shares) and small tiles."""
    rough = OmegaConf.to_container(load_config("env", ["terrain=rough"]).terrain)
    for p in rough["types"].values():
        p["proportion"] = 1.0
    rough.update(levels=LEVELS, columns=len(TYPES), tile_size=TILE, resolution=RES,
                 border=BORDER, platform=PLATFORM)
    rough.update(changes)
    return rough


@pytest.fixture(scope="module")
def grid() -> TerrainGrid:
    return TerrainGrid(grid_config())


def tile(grid: TerrainGrid, level: int, kind: str) -> np.ndarray:
    """Heights of one tile [N, N] (rows along y)."""
    col = grid.column_types.index(kind)
    return grid.heights[B + col * N:B + (col + 1) * N, B + level * N:B + (level + 1) * N]


def centre(grid: TerrainGrid, level: int, kind: str) -> torch.Tensor:
    return grid.origins[level, grid.column_types.index(kind), :2]


# ------------------------------------------------------------------ the grid
def test_grid_shape_types_and_origins(grid):
    assert grid.heights.shape == (2 * B + len(TYPES) * N + 1, 2 * B + LEVELS * N + 1)
    assert grid.column_types == TYPES
    assert grid.origins.shape == (LEVELS, len(TYPES), 3)
    assert grid.heights[:B].max() == grid.heights[:B].min() == 0.0  # flat border
    # tile centres step by one tile side: levels along x, columns along y
    assert torch.allclose(grid.origins[1, 0, :2] - grid.origins[0, 0, :2], torch.tensor([TILE, 0]))
    assert torch.allclose(grid.origins[0, 1, :2] - grid.origins[0, 0, :2], torch.tensor([0, TILE]))
    same = TerrainGrid(grid_config())
    assert np.array_equal(same.heights, grid.heights)  # the seed fixes the grid
    assert not np.array_equal(TerrainGrid(grid_config(seed=1)).heights, grid.heights)


def test_difficulty_grows_with_level(grid):
    steps, slopes, noise, blocks = [], [], [], []
    for level in range(LEVELS):
        stairs = tile(grid, level, "stairs_down")
        row = stairs[N // 2]  # through the centre, along x
        steps.append(np.abs(np.diff(row)).max())  # one step's rise
        pyramid = tile(grid, level, "slope_down")[N // 2]
        slopes.append(math.atan(np.abs(np.diff(pyramid)).max() / RES))
        noise.append(np.ptp(tile(grid, level, "rough")))
        blocks.append(tile(grid, level, "obstacles").max())
        assert (tile(grid, level, "stairs_up") == -stairs).all()
        assert (tile(grid, level, "flat") == 0).all()
    assert steps == pytest.approx([0.05, 0.125, 0.2], abs=1e-6)  # configured [0.05, 0.2]
    assert slopes == pytest.approx([0.0, 0.2, 0.4], abs=1e-5)    # configured [0, 0.4] rad
    assert noise[0] < noise[1] < noise[2] <= 0.1 + 1e-6
    assert 0 < blocks[0] < blocks[1] < blocks[2] <= 0.15 + 1e-6


def test_heights_at_known_points(grid):
    top = LEVELS - 1
    # tile centres: platforms of pyramids and pits are flat
    n_steps = (N // 2 - PLATFORM / 2 / RES) // round(0.3 / RES)
    h = grid.heights_at(torch.stack([centre(grid, top, k) for k in
                                     ("flat", "stairs_down", "stairs_up", "slope_down")]))
    expect = [0.0, 0.2 * n_steps, -0.2 * n_steps, math.tan(0.4) * (TILE / 2 - PLATFORM / 2)]
    assert h.tolist() == pytest.approx(expect, abs=1e-4)
    # a stair edge: the outermost step rises between two vertices, 0.3 m in from the tile edge
    c = centre(grid, top, "stairs_down")
    edge_x = c[0] - TILE / 2 + 0.3
    pts = torch.tensor([[edge_x - RES - 0.02, c[1]], [edge_x - RES / 2, c[1]], [edge_x, c[1]]])
    assert grid.heights_at(pts).tolist() == pytest.approx([0.0, 0.1, 0.2], abs=1e-4)
    # outside the grid: the border's height; batched over any leading shape
    far = torch.tensor([[[1e3, 0.0], [0.0, -1e3]]])
    assert grid.heights_at(far).shape == (1, 2) and (grid.heights_at(far) == 0).all()


def test_heightfield_in_model_is_the_ground(grid):
    """The compiled hfield is named "ground", plane friction, and has the grid's heights."""
    spec, solver = load_robot_spec("go1"), SolverProfile(**load_config("env").solver)
    plane, _ = build_model(spec, solver)
    model, _ = build_model(spec, solver, grid)
    g_plane, g = plane.geom("ground"), model.geom("ground")
    assert g_plane.type == mujoco.mjtGeom.mjGEOM_PLANE and g.type == mujoco.mjtGeom.mjGEOM_HFIELD
    assert np.array_equal(g.friction, g_plane.friction)
    assert model.ngeom == plane.ngeom and model.nq == plane.nq
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    top = LEVELS - 1
    for kind in ("stairs_down", "slope_up", "rough"):
        xy = centre(grid, top, kind) + torch.tensor([0.73, -0.41])
        hit = np.zeros(1, np.int32)
        dist = mujoco.mj_ray(model, data, np.array([*xy.tolist(), 10.0]), np.array([0, 0, -1.0]),
                             None, 1, -1, hit)
        assert hit[0] == g.id
        # bilinear vs MuJoCo's triangles agree where the surface is planar, and nearly so here
        assert 10.0 - dist == pytest.approx(float(grid.heights_at(xy)), abs=0.02)


# ------------------------------------------------------------------ bad configs
@pytest.mark.parametrize("change, message", [
    ({"types": {"lava": {"proportion": 1.0}}}, "unknown terrain types ['lava']; valid: "),
    ({"types": {"flat": {"proportion": -0.5}}}, "flat.proportion must be a number >= 0, got -0.5"),
    ({"types": {"flat": {"proportion": "many"}}}, "got 'many'"),
    ({"types": {"flat": {"proportion": 0.0}}}, "at least one proportion must be > 0"),
    ({"types": {"stairs_up": {"proportion": 1.0, "step_height": [0.1, 0.2]}}},
     "stairs_up takes parameters ['proportion', 'step_height', 'step_width']"),
    ({"levels": 0}, "terrain.levels must be an integer >= 1, got 0"),
    ({"tile_size": 4.05}, "must be a multiple"),
])
def test_bad_terrain_config_is_a_clear_error(change, message):
    with pytest.raises(ValueError) as err:
        TerrainGrid(grid_config(**change))
    assert message in str(err.value)
    if "valid" in message:
        assert all(k in str(err.value) for k in TERRAIN_TYPES)


def test_bad_max_init_level(grid):
    cfg = OmegaConf.create({"enabled": True, "max_init_level": LEVELS, "promote_distance": 0.5,
                            "demote_ratio": 0.5})
    with pytest.raises(ValueError, match=r"max_init_level must be an integer in \[0, 2\]"):
        TerrainCurriculum(grid, cfg, 4, torch.Generator())


# ------------------------------------------------------------------ curriculum
def test_curriculum_moves_levels(grid):
    cfg = OmegaConf.create({"enabled": True, "max_init_level": 1, "promote_distance": 0.5,
                            "demote_ratio": 0.5})
    cur = TerrainCurriculum(grid, cfg, 6, torch.Generator().manual_seed(0))
    assert cur.levels.max() <= 1 and cur.columns.tolist() == [0, 1, 2, 3, 4, 5]
    cur.levels[:] = torch.tensor([1, 1, 1, 0, 2, 2])
    ids = torch.arange(6)
    # walked: over half a tile | nothing of 20 m asked | 1.5 of 2 m asked | nothing, on level 0
    # | a tile, on the top level | a little, asked to stand
    distance = torch.tensor([TILE / 2 + 0.1, 0.0, 1.5, 0.0, TILE, 0.5])
    speed = torch.tensor([1.0, 1.0, 0.1, 1.0, 0.0, 0.0])
    cur.update(ids, distance, speed, episode_s=20.0)
    new = cur.levels.float()
    assert new.tolist()[:4] == [2.0, 0.0, 1.0, 0.0]  # up, down, stays, floor at 0
    assert 0 <= new[4] < LEVELS  # past the top: a random level
    assert new[5] == 2.0
    assert torch.equal(cur.origins(ids[:2]), grid.origins[[2, 0], [0, 1]])


def test_spawn_curriculum_and_resume_in_env(make_env):
    env = make_env(*SMALL, *CALM, "num_envs=8")
    cur, tile_size = env.curriculum, env.terrain.tile_size
    spawn = cur.origins(torch.arange(8)) + torch.tensor([0.0, 0.0, env.spec.init_height])
    assert torch.allclose(env.sim.qpos[:, :3].float(), spawn, atol=1e-5)
    assert len(set(cur.columns.tolist())) == 8  # spread over the type columns
    assert "terrain" in env.state_dict()

    cur.levels[:] = 1
    env.reset()
    env.task.commands[:] = torch.tensor([1.0, 0.0, 0.0])  # nobody walks: all should drop...
    qpos, qvel = env.sim.qpos.clone(), env.sim.qvel.clone()
    qpos[0, 0] += tile_size  # ...but env 0, "walked" a tile to the next level's centre
    env.sim.reset(torch.tensor([0]), qpos[:1], qvel[:1])
    info = {}
    while "episode" not in info:
        _, _, _, _, info = env.step(torch.zeros(8, env.num_actions))
    assert len(info["episode"]["terrain_level"]) == 8
    assert cur.levels[0] == 2 and (cur.levels[1:] == 0).all(), info["episode"]["distance"]
    respawned = cur.origins(torch.arange(8))[:, :2]
    assert torch.allclose(env.sim.qpos[:, :2].float(), respawned, atol=1e-5)

    # levels are part of the state: a second env continues identically
    state = env.state_dict()
    other = make_env(*SMALL, *CALM, "num_envs=8", "seed=5")
    other.load_state_dict(state)
    assert torch.equal(other.curriculum.levels, cur.levels)
    actions = 0.3 * torch.randn(6, 8, env.num_actions, generator=torch.Generator().manual_seed(0))
    for a in actions:
        assert torch.equal(env.step(a)[0]["critic"], other.step(a)[0]["critic"])


def test_partial_episodes_leave_terrain_levels_alone(make_env):
    env = make_env(*SMALL, *CALM, "num_envs=8", "reset=random_counter")
    env.curriculum.levels[:] = 1
    env.task.commands[:] = torch.tensor([1.0, 0.0, 0.0])  # standing still: a whole episode drops
    info = {}
    while "episode" not in info:
        _, _, _, _, info = env.step(torch.zeros(8, env.num_actions))
    assert (info["episode"]["partial"] == 1).all()  # begun at a random counter
    assert (env.curriculum.levels == 1).all()


# ------------------------------------------------------------------ height scan, standing
def test_height_scan_on_flat_ground_is_base_height(make_env):
    env = make_env("task=rough", "terrain=flat", "num_envs=4",
                   "task.height_scan.in_policy=false")
    assert env.terrain is None and env.model.geom("ground").type == mujoco.mjtGeom.mjGEOM_PLANE
    for _ in range(3):
        env.step(torch.zeros(4, env.num_actions))
    w = env.task.world(env.sim)
    scan = env.task.height_scan(w)
    assert scan.shape == (4, 17 * 11)
    assert torch.equal(scan, w.base_pos[:, 2:3].expand_as(scan))
    assert env.observation_sizes["critic"] == env.observation_sizes["policy"] + 4 + 1 + 187
    in_policy = make_env("task=rough", "terrain=flat", "num_envs=4")
    assert in_policy.observation_sizes["policy"] == env.observation_sizes["policy"] + 187


def test_height_scan_is_yaw_aligned(grid):
    from tasks.velocity import VelocityTask

    cfg = load_config("env", ["task=rough"])
    spec = load_robot_spec("go1")
    _, layout = build_model(spec, SolverProfile(**cfg.solver))
    task = VelocityTask(cfg.task, spec, layout, 2, 0.02, torch.Generator(), terrain=grid)
    c = grid.origins[LEVELS - 1, grid.column_types.index("stairs_down")]
    # half a metre from the centre along +x: ahead of the base (yaw 0) the ground drops away
    pos = (c + torch.tensor([0.5, 0.0, 0.3])).repeat(2, 1)
    quat = torch.tensor([[1.0, 0, 0, 0], [0.0, 0, 0, 1]])  # yaw 0 and yaw pi
    z = torch.zeros(2, 3)
    w = World(pos, quat, z, z, z, None, None, None, None, None, None)
    scan = task.height_scan(w).view(2, 17, 11)  # [env, x (back to front), y]
    assert torch.allclose(scan[0, 0], torch.full((11,), 0.3))  # behind: the platform
    assert (scan[0, -1] > 0.45).all()  # ahead, past the platform edge: a step down
    assert torch.allclose(scan[1, -1], torch.full((11,), 0.3))  # turned round: ahead is flat
    assert (scan[1, 0] > 0.45).all()
    assert torch.allclose(task.base_height(w), torch.full((2, 1), 0.3), atol=1e-5)


def test_robot_stands_on_rough_terrain(make_env):
    """Zero actions for 1 s on every type's hardest spawn platform: no falls, feet on the hfield."""
    env = make_env(*SMALL, *CALM, "num_envs=10", "terrain.curriculum.max_init_level=3",
                   reset=False)
    env.curriculum.levels[:] = env.terrain.levels - 1
    env.reset()
    for _ in range(env.max_episode_length - 1):
        _, _, terminated, truncated, _ = env.step(torch.zeros(10, env.num_actions))
        assert not (terminated | truncated).any()
    w = env.task.world(env.sim)
    height = env.task.base_height(w).squeeze(1)
    assert ((height > 0.22) & (height < 0.36)).all(), height
    assert (w.gravity[:, 2] < -0.95).all()
    ground = env.terrain.heights_at(env.sim.qpos[:, :2].float())
    assert (env.sim.qpos[:, 2].float() > ground + 0.2).all()


def test_replay_on_another_terrain():
    """play.py terrain=...: a flat-ground run's config replayed on the grid; bad names listed."""
    from locomotion.config import replay_config

    trained = OmegaConf.to_container(load_config("train"))
    assert replay_config(trained, 4, 0).terrain.name == "flat"
    assert replay_config(trained, 4, 0, terrain="rough").terrain.levels == 10
    with pytest.raises(ValueError, match=r"unknown terrain option 'lava'; valid: \['flat'"):
        replay_config(trained, 4, 0, terrain="lava")
