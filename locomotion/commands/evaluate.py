"""Robustness evaluation: sweep perturbations and compare policies side by side.

    locomotion-evaluate policy=robots/go1/pretrained/checkpoint.pt
    locomotion-evaluate policy=[runs/a/checkpoints/latest.pt,runs/b/exported/policy.onnx] \\
        labels=[nominal,robust] suite=default out=docs/robustness
    locomotion-evaluate policy=... axes=[push] episodes_per_level=64
    locomotion-evaluate policy=... sim=warp device=cuda
    MUJOCO_GL=egl locomotion-evaluate policy=... video=true   # GIFs of each level's first failure

Writes report.json (every number; the same for the same seed), report.md (tables and
margins) and PNG figures to ``out`` (default runs/eval/<time>). ``suite=NAME`` selects
configs/eval/NAME.yaml.
"""

from __future__ import annotations

import logging
import os
import resource
import sys
import time
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from locomotion.commands.errors import run_app, user_errors
from locomotion.config_checks import ConfigError
from locomotion.evaluation.policies import PolicyLoadError, load_policies
from locomotion.evaluation.report import write_json, write_markdown
from locomotion.evaluation.robustness import evaluate
from locomotion.evaluation.suite import Suite
from locomotion.evaluation.video import TrackingCamera, gif_bytes, renderer_problem

log = logging.getLogger("evaluate")
CLIP_FPS = 10.0  # frames per second of simulated time in failure clips
SUITE_GROUP = "eval@suite"  # configs/eval, placed at the config key `suite`


def suite_alias(argv: list[str]) -> list[str]:
    """``suite=NAME`` picks a suite file; Hydra spells that override ``eval@suite=NAME``."""
    return [f"{SUITE_GROUP}={a[len('suite='):]}" if a.startswith("suite=") else a for a in argv]


def _policy_paths(cfg: DictConfig) -> list[str]:
    given = [v for v in (cfg.policy, cfg.policies) if v is not None]
    if len(given) != 1:
        raise PolicyLoadError("pass the policies to evaluate once: policy=PATH or "
                              "policy=[A,B] (or policies=[A,B])")
    value = given[0]
    return [str(v) for v in value] if OmegaConf.is_list(value) else [str(value)]


def _clip_writer(cfg: DictConfig, out: Path):
    """Writes the evaluator's failure clips under ``out/clips`` (``video=true``)."""
    if not cfg.video:
        return None
    problem = renderer_problem("PIL")
    if problem:
        raise ConfigError(f"video=true: {problem}")

    def write(policy, condition, env, states) -> None:
        camera = TrackingCamera(env, 320, 240)
        every = max(1, round(1.0 / (CLIP_FPS * env.control_dt)))
        frames = [camera.frame(q) for q in states[::every].numpy()]
        camera.close()
        name = "_".join(f"{axis}-{value}" for axis, value in condition) or "nominal"
        path = out / "clips" / policy.label / f"{name}.gif"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gif_bytes(frames, CLIP_FPS))
        log.info(f"clip of the first failure: {path}")

    return write


def _command() -> str:
    overrides = [o.replace(f"{SUITE_GROUP}=", "suite=") for o in HydraConfig.get().overrides.task]
    return " ".join(["locomotion-evaluate", *overrides])


@hydra.main(config_path="pkg://locomotion.configs", config_name="evaluate", version_base="1.3")
@user_errors
def evaluate_command(cfg: DictConfig) -> None:
    policies = load_policies(_policy_paths(cfg), cfg.labels and list(cfg.labels))
    suite_cfg = cfg.suite.copy()
    if cfg.episodes_per_level is not None:
        suite_cfg.episodes_per_level = int(cfg.episodes_per_level)
    suite = Suite(suite_cfg, None if cfg.axes is None else [str(a) for a in cfg.axes])
    if cfg.torch_threads:
        torch.set_num_threads(int(cfg.torch_threads))
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    report, seconds = evaluate(policies, suite, int(cfg.seed), cfg.sim, str(cfg.device),
                               progress=log.info, clips=_clip_writer(cfg, out))
    total = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    load = os.getloadavg()[0]
    timing = [f"{label}: {s:.0f} s" for label, s in seconds.items()] + [
        f"total {total:.0f} s wall clock, {usage.ru_utime + usage.ru_stime:.0f} s of CPU time "
        f"(all threads) on {os.cpu_count()} CPU cores; load average {load:.1f} at the end "
        f"(a load above the core count means other jobs shared the machine)"]
    # The numbers first: a missing or failing plotting library loses no result.
    write_json(report, out)
    md = write_markdown(report, out, timing, _command())
    if cfg.plots:
        try:
            from locomotion.evaluation.plots import write_figures

            figures = write_figures(report, out)
        except ImportError as e:
            print(f"no figures ({e}): pip install 'locomotion[plot]' and redraw them from "
                  f"{out / 'report.json'}")
        else:
            md = write_markdown(report, out, timing, _command(), figures)
    print(f"report: {md}")
    print(f"timing: {'; '.join(timing)}")


def main() -> None:
    sys.argv = suite_alias(sys.argv)
    run_app(evaluate_command)


if __name__ == "__main__":
    main()
