"""Env steps/s with random actions against the raw physics limit, for several N.

The raw limit is bare ``mujoco.rollout`` calls on the same model, N, substeps and thread
count with no Python work around them; the ratio says what the env costs on top of the
physics. The env steps under ``torch.inference_mode`` as the trainer's rollout steps it
(``inference_mode=false``: as a library stepping it with autograd on, which costs the env
a little more). Each env step is replayed raw right after it is taken (its start states
and controls), so both sides time the same work at the same moment. ``rounds`` rounds of
``measure_steps`` such pairs give the median ratio and the rounds' range. Prints a table;
the last line is one JSON object.

    python scripts/benchmark_env.py
    python scripts/benchmark_env.py num_envs=4096 robot=dmc_quadruped
    python scripts/benchmark_env.py terrain=rough task=rough   # on the terrain grid
    python scripts/benchmark_env.py num_envs=1024 \
        'variants=["randomization=robust","task=rough","task=rough randomization=robust"]'

Each variant (overrides on top of the command line's) is timed at the same N in the same
run, alternating with the base env for ``variant_rounds`` rounds, and reported as the
median ratio to the base env's steps/s (with the rounds' range): the cost of that feature.

``work_alone`` splits the env's own work (its step less the backend's: actions in,
observations, rewards, terminations, respawns) two ways, in ``rounds`` more rounds: as it
runs, between physics steps, and alone, replayed from the same start with each step's
physics result written back instead of computed. The difference is what running after the
physics costs that work (most likely the caches the physics threads filled), not what its
operations cost.
"""

from __future__ import annotations

import contextlib
import copy
import json
import resource
import time

import hydra
import mujoco
import numpy as np
import torch
from hydra import compose
from hydra.core.hydra_config import HydraConfig
from mujoco import rollout
from omegaconf import DictConfig, OmegaConf, open_dict

from locomotion.config import CONFIG_DIR
from locomotion.envs import LocomotionEnv
from locomotion.sim.model_builder import SolverProfile, build_model
from locomotion.tasks import make_env


class RawPhysics:
    """Bare ``mujoco.rollout`` calls of one control step of ``model`` for N worlds on the
    env's thread count, with no Python work around them: the physics limit."""

    def __init__(self, model: mujoco.MjModel, num_envs: int, nsubsteps: int, nthread: int):
        self.models, self.nsubsteps = [model] * num_envs, nsubsteps
        self.datas = [mujoco.MjData(model) for _ in range(max(nthread, 1))]
        nstate = mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_FULLPHYSICS)
        self.out = np.empty((num_envs, nsubsteps, nstate))
        self.sensors = np.empty((num_envs, nsubsteps, model.nsensordata))
        self.warmstart = np.zeros((num_envs, model.nv))  # as the backend: a zero warm start
        self.pool = rollout.Rollout(nthread=nthread if nthread > 1 else 0)

    def seconds(self, state: np.ndarray, ctrl: np.ndarray) -> float:
        """Time to step worlds from ``state`` [N, nstate] holding ``ctrl`` [N, nu]."""
        ctrl = np.repeat(ctrl[:, None], self.nsubsteps, axis=1)
        start = time.perf_counter()
        self.pool.rollout(self.models, self.datas, state, ctrl, skip_checks=True,
                          nstep=self.nsubsteps, initial_warmstart=self.warmstart,
                          state=self.out, sensordata=self.sensors)
        return time.perf_counter() - start

    def close(self) -> None:
        self.pool.close()


@contextlib.contextmanager
def backend_step_timed(env: LocomotionEnv, stand_in=None):
    """Meanwhile the env's backend step (or ``stand_in``, called in its place) is timed: the
    yielded list holds its total seconds. The class's own method is back afterwards."""
    step, seconds = stand_in or env.sim.step, [0.0]

    def timed(*args, **kwargs):
        start = time.perf_counter()
        step(*args, **kwargs)
        seconds[0] += time.perf_counter() - start

    env.sim.step = timed
    try:
        yield seconds
    finally:
        del env.sim.step


def paired_seconds(env: LocomotionEnv, raws: list[RawPhysics], steps: int,
                   gen: torch.Generator) -> list[float]:
    """Seconds inside ``env.step`` over ``steps`` random-action steps, inside the backend's
    step within them, then each raw physics' seconds replaying those steps, every step
    right after the env took it: the same work, timed moments apart, so neither what the
    robots did nor a slow spell of the machine differs between the sides."""
    totals = [0.0] * (2 + len(raws))
    with backend_step_timed(env) as backend:
        for _ in range(steps):
            state = env.sim.state.copy()
            action = torch.randn((env.num_envs, env.num_actions), generator=gen)
            start = time.perf_counter()
            env.step(action)
            totals[0] += time.perf_counter() - start
            ctrl = env.ctrl.numpy()
            for i, raw in enumerate(raws, start=2):
                totals[i] += raw.seconds(state, ctrl)
    totals[1] = backend[0]
    return totals


def work_seconds(env: LocomotionEnv, actions: list[torch.Tensor]) -> tuple[float, float, bool]:
    """Seconds of the env's own work (``env.step`` less the backend's step) over ``actions``,
    first with the physics, then again from the same start with each step's physics result
    written back instead of computed. Also whether the second pass ended in the first's
    observations, as it must: same start, actions and physics results."""
    sim, start = env.sim, copy.deepcopy(env.state_dict())
    backend_step, results = sim.step, []

    def recorded(*args, **kwargs):
        backend_step(*args, **kwargs)
        results.append((sim.state.copy(), sim.substep_sensordata.clone(), sim.diverged.clone()))

    def written_back(*args, **kwargs):
        state, sensors, diverged = next(replay)
        sim.state[:] = state
        sim.substep_sensordata.copy_(sensors)
        sim.diverged.copy_(diverged)

    def own_work(stand_in) -> tuple[float, dict[str, torch.Tensor]]:
        with backend_step_timed(env, stand_in) as inside:
            begin = time.perf_counter()
            for action in actions:
                env.step(action)
            seconds = time.perf_counter() - begin - inside[0]
        return seconds, {k: v.clone() for k, v in env.obs.items()}

    between, first_end = own_work(recorded)
    env.load_state_dict(start)
    replay = iter(results)
    alone, second_end = own_work(written_back)
    return between, alone, all(torch.equal(first_end[k], second_end[k]) for k in first_end)


def env_steps_per_s(env: LocomotionEnv, steps: int, gen: torch.Generator) -> float:
    shape = (env.num_envs, env.num_actions)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(torch.randn(shape, generator=gen))
    return steps * env.num_envs / (time.perf_counter() - start)


def started_env(cfg: DictConfig, n: int) -> tuple[LocomotionEnv, torch.Generator]:
    """An env of ``cfg`` with ``n`` envs, reset and stepped ``warmup_steps`` untimed steps."""
    run_cfg = cfg.copy()
    with open_dict(run_cfg):
        run_cfg.num_envs = n
    env = make_env(run_cfg)
    env.reset()
    gen = torch.Generator().manual_seed(int(cfg.seed))
    env_steps_per_s(env, cfg.warmup_steps, gen)
    return env, gen


def measure(cfg: DictConfig, n: int) -> dict:
    env, gen = started_env(cfg, n)
    raws = [RawPhysics(env.model, n, env.decimation, env.sim.nthread)]
    if cfg.compare_solver:
        solver = OmegaConf.load(CONFIG_DIR / "solver" / f"{cfg.compare_solver}.yaml")
        profile = SolverProfile(**solver)
        model, _ = build_model(env.spec, profile, env.terrain)
        raws.append(RawPhysics(model, n, round(env.control_dt / profile.timestep),
                               env.sim.nthread))
    steps = int(cfg.measure_steps)
    seconds = np.array([paired_seconds(env, raws, steps, gen) for _ in range(int(cfg.rounds))])
    for raw in raws:
        raw.close()
    if cfg.work_alone:
        shape = (n, env.num_actions)
        split = [work_seconds(env, [torch.randn(shape, generator=gen) for _ in range(steps)])
                 for _ in range(int(cfg.rounds))]
    rates = n * steps / seconds  # env steps/s of each round: env, backend, each raw physics
    env_runs, raw_runs = rates[:, 0], rates[:, 2]
    ratios = env_runs / raw_runs
    raw_sps = float(np.median(raw_runs))
    ms = np.median(seconds[:, :3], axis=0) / steps * 1e3
    row = {"num_envs": n, "env_steps_per_s": float(np.median(env_runs)),
           "raw_env_steps_per_s": raw_sps, "ratio": float(np.median(ratios)),
           "ratio_range": [float(ratios.min()), float(ratios.max())],
           "physics_steps_per_s": raw_sps * env.decimation,
           # where a step's time goes: the env, the backend's step inside it, the raw replay
           "ms_per_step": dict(zip(("env", "backend", "raw"), ms.tolist(), strict=True))}
    if cfg.work_alone:
        # the env's own work: between physics steps as it runs, and alone (physics written back)
        between, alone = np.median([s[:2] for s in split], axis=0) / steps * 1e3
        row["ms_per_step"].update(work=float(between), work_alone=float(alone))
        row["replay_exact"] = all(s[2] for s in split)
    if cfg.compare_solver:
        other = float(np.median(rates[:, 3]))
        row[f"raw_env_steps_per_s_{profile.name}"] = other
        row[f"raw_speedup_over_{profile.name}"] = raw_sps / other
        row[f"physics_steps_per_s_{profile.name}"] = other * raws[1].nsubsteps
    row["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if cfg.variants:
        row["variants"] = compare_variants(cfg, env, gen, n)
    env.close()
    return row


def compare_variants(cfg: DictConfig, base: LocomotionEnv, base_gen: torch.Generator,
                     n: int) -> dict[str, dict[str, float]]:
    """Each variant's steps/s as a ratio to the base env's, timed in alternation.

    Base and variants are timed one after the other in each of ``variant_rounds`` rounds and
    the ratio is the median of the rounds' ratios, so a slow spell of the machine lands on
    both sides of a ratio instead of on one variant.
    """
    envs = {v: started_env(variant_config(v), n) for v in cfg.variants}
    ratios: dict[str, list[float]] = {v: [] for v in envs}
    speeds: dict[str, list[float]] = {v: [] for v in envs}
    try:
        for _ in range(int(cfg.variant_rounds)):
            base_sps = env_steps_per_s(base, cfg.measure_steps, base_gen)
            for v, (env, gen) in envs.items():
                speeds[v].append(env_steps_per_s(env, cfg.measure_steps, gen))
                ratios[v].append(speeds[v][-1] / base_sps)
    finally:
        for env, _ in envs.values():
            env.close()
    return {v: {"env_steps_per_s": float(np.median(speeds[v])),
                "vs_base": float(np.median(ratios[v])),
                "vs_base_range": [min(ratios[v]), max(ratios[v])]} for v in envs}


def variant_config(variant: str) -> DictConfig:
    """This run's config with a variant's overrides (space-separated) applied on top."""
    base = [o for o in HydraConfig.get().overrides.task if not o.startswith("variants=")]
    return compose(config_name="benchmark_env", overrides=base + variant.split())


@hydra.main(config_path="../configs", config_name="benchmark_env", version_base="1.3")
def main(cfg: DictConfig) -> None:
    sizes = [cfg.num_envs] if cfg.num_envs else list(cfg.num_envs_list)
    for flag in ("inference_mode", "work_alone"):
        if not isinstance(cfg[flag], bool):
            raise ValueError(f"{flag} must be true or false, got {cfg[flag]!r}")
    rows = []
    print(f"robot={cfg.robot.spec} task={cfg.task.name} terrain={cfg.terrain.name} "
          f"solver={cfg.solver.name} threads={cfg.sim.nthread or 'all'} "
          f"inference_mode={cfg.inference_mode}")
    header = (f"{'N':>6} {'env steps/s':>12} {'raw steps/s':>12} {'ratio':>6} {'range':>11}"
              f" {'physics/s':>11} {'ms: env':>8} {'backend':>7} {'raw':>6}")
    if cfg.work_alone:
        header += f" {'work':>6} {'alone':>6}"
    if cfg.compare_solver:
        header += f" {'raw ' + cfg.compare_solver + '/s':>14} {'speedup':>8}"
    print(header + f" {'max RSS MB':>10}")
    for n in sizes:
        with torch.inference_mode(cfg.inference_mode):
            r = measure(cfg, int(n))
        rows.append(r)
        line = (f"{r['num_envs']:>6} {r['env_steps_per_s']:>12.0f}"
                f" {r['raw_env_steps_per_s']:>12.0f} {r['ratio']:>6.3f}"
                f" {r['ratio_range'][0]:>5.3f}-{r['ratio_range'][1]:.3f}"
                f" {r['physics_steps_per_s']:>11.0f} {r['ms_per_step']['env']:>8.2f}"
                f" {r['ms_per_step']['backend']:>7.2f} {r['ms_per_step']['raw']:>6.2f}")
        if cfg.work_alone:
            line += f" {r['ms_per_step']['work']:>6.2f} {r['ms_per_step']['work_alone']:>6.2f}"
        if cfg.compare_solver:
            name = cfg.compare_solver
            line += (f" {r[f'raw_env_steps_per_s_{name}']:>14.0f}"
                     f" {r[f'raw_speedup_over_{name}']:>8.2f}")
        print(line + f" {r['max_rss_mb']:>10.0f}", flush=True)
        for variant, v in r.get("variants", {}).items():
            low, high = v["vs_base_range"]
            print(f"{'':>6} {v['env_steps_per_s']:>12.0f}  {v['vs_base']:.3f} x base "
                  f"({low:.3f}..{high:.3f}): {variant}", flush=True)
    print(json.dumps({"robot": cfg.robot.spec, "task": cfg.task.name,
                      "terrain": cfg.terrain.name, "solver": cfg.solver.name,
                      "inference_mode": cfg.inference_mode, "results": rows}))


if __name__ == "__main__":
    main()
