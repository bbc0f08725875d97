"""Evaluate policies on a suite: plan the batches, run them, summarize every level.

The result is one plain dict (the content of report.json): the suite, the seed, the
policies, and per sweep / grid the levels with each policy's numbers and margins. Nothing
in it depends on the machine or the time of the run, so the same inputs give the same
file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from locomotion.envs.vec_env import LocomotionEnv
from locomotion.evaluation.metrics import Episodes, robustness_margin, summarize
from locomotion.evaluation.policies import Policy
from locomotion.evaluation.rollouts import BatchRunner
from locomotion.evaluation.suite import AXES, JOINT_AXES, Condition, Suite, plan_batches
from locomotion.sim.model_builder import SolverProfile, build_model
from locomotion.sim.robot_spec import load_robot_spec

log = logging.getLogger(__name__)

REPORT_FORMAT = "locomotion-robustness"
REPORT_VERSION = 1
#: Levels at which an axis leaves the robot as trained (friction and solver: per policy).
CONSTANT_NOMINAL = {"push": 0.0, "payload": 0.0, "strength": 1.0, "latency": 0.0, "noise": 0.0}


def nominal_levels(policy: Policy, suite: Suite) -> dict[str, object]:
    """Each axis's nominal level for ``policy``: what its model and training used, and the
    suite's solver profile (if it names one, every policy is compared on that physics)."""
    cfg = policy.train_config
    solver = suite.cfg.get("solver") or str(cfg.solver.name)
    model, _ = build_model(load_robot_spec(cfg.robot.spec), SolverProfile(**cfg.solver))
    spec = load_robot_spec(cfg.robot.spec)
    # sliding friction of a foot-ground contact: MuJoCo takes the larger of the two geoms
    feet = [model.geom(f).id for f in spec.feet]
    friction = float(max(model.geom_friction[[model.geom("ground").id, *feet], 0]))
    # joint axes: the model's value when every joint has the same (else no level is nominal)
    dofs = model.jnt_dofadr[[model.joint(j).id for j in spec.joints]]
    joint = {}
    for axis, field in JOINT_AXES.items():
        values = getattr(model, field)[dofs]
        joint[axis] = float(values[0]) if (values == values[0]).all() else None
    # a foot-ground contact's time constant: the solmix-weighted mean of the two geoms'
    ground = model.geom("ground").id
    mix = model.geom_solmix[[ground, feet[0]]]
    contact = float((mix * model.geom_solref[[ground, feet[0]], 0]).sum() / mix.sum())
    return {**CONSTANT_NOMINAL, "friction": friction, "solver": str(solver), **joint,
            "contact": round(contact, 6)}


ClipWriter = Callable[[Policy, Condition, LocomotionEnv, torch.Tensor], None]
"""Gets the states [steps, nq] before a condition's first failure and the batch env that ran
it (whose model renders them)."""


def evaluate_policy(policy: Policy, suite: Suite, seed: int, sim: DictConfig, device: str,
                    progress: Callable[[str], None], clips: ClipWriter | None = None,
                    film_s: float = 3.0) -> tuple[dict, dict[str, object], float]:
    """Per-level summaries of one policy, its nominal levels and the seconds it took;
    ``clips`` gets the last ``film_s`` seconds before each level's first failure."""
    start = time.perf_counter()
    nominal = nominal_levels(policy, suite)
    where = suite.conditions(nominal)
    episodes: dict[Condition, Episodes] = {}
    for batch in plan_batches(where.values(), str(nominal["solver"])):
        runner = BatchRunner(policy, batch, suite, seed, sim, device, progress,
                             film_s if clips else 0.0)
        try:
            episodes.update(runner.run())
            for condition, states in runner.clips().items():
                clips(policy, condition, runner.env, states)
        finally:
            runner.close()
    summaries = {c: summarize(ep, suite.reach) for c, ep in episodes.items()}
    return {key: summaries[c] for key, c in where.items()}, nominal, time.perf_counter() - start


def evaluate(policies: Sequence[Policy], suite: Suite, seed: int, sim: DictConfig,
             device: str = "cpu", progress: Callable[[str], None] | None = None,
             clips: ClipWriter | None = None) -> tuple[dict, dict[str, float]]:
    """The report of ``policies`` on ``suite`` and the wall-clock seconds per policy
    (``clips``: see ``evaluate_policy``)."""
    progress = progress or log.info
    per_policy, nominals, seconds = {}, {}, {}
    for p in policies:
        progress(f"evaluating {p.label} ({p.path})")
        per_policy[p.label], nominals[p.label], seconds[p.label] = evaluate_policy(
            p, suite, seed, sim, device, progress, clips)
    return build_report(policies, suite, seed, sim, device, per_policy, nominals), seconds


def build_report(policies: Sequence[Policy], suite: Suite, seed: int, sim: DictConfig,
                 device: str, per_policy: dict[str, dict], nominals: dict[str, dict]) -> dict:
    """Arrange the summaries by sweep and grid, with margins (see ``robustness_margin``)."""
    threshold = float(suite.cfg.survival_threshold)
    sweeps = {}
    for s in suite.sweeps:
        axis = s.axis
        entry = {"axis": axis.name, "label": axis.label, "unit": axis.unit,
                 "harder": axis.harder, "levels": list(s.levels), "policies": {}}
        for p in policies:
            rows = [per_policy[p.label][(s.name, v)] for v in s.levels]
            nominal = nominals[p.label].get(axis.name)
            result = {"nominal": nominal, "levels": rows}
            if not axis.categorical:
                result["margin"] = robustness_margin(
                    s.levels, [r["survival"] for r in rows],
                    nominal if isinstance(nominal, float) else None, axis.harder, threshold)
            entry["policies"][p.label] = result
        sweeps[s.name] = entry
    grids = {}
    for g in suite.grids:
        (a, b), (la, lb) = g.axes, g.levels
        entry = {"axes": [a.name, b.name], "labels": [a.title(), b.title()],
                 "levels": [list(la), list(lb)], "policies": {}}
        for p in policies:
            cells = [[per_policy[p.label][(g.name, va, vb)] for vb in lb] for va in la]
            entry["policies"][p.label] = {"cells": cells}
        grids[g.name] = entry
    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "seed": seed,
        "sim": {"backend": str(sim.backend), "device": str(device)},
        "suite": OmegaConf.to_container(suite.cfg, resolve=True),
        "axes": {name: {"label": a.label, "unit": a.unit, "harder": a.harder, "doc": a.doc}
                 for name, a in AXES.items() if name in suite.axes},
        "policies": [p.describe() for p in policies],
        "nominal": nominals,
        "sweeps": sweeps,
        "grids": grids,
    }
