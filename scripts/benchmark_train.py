"""Time to walk: train the default config from scratch until the policy walks.

Every ``eval_every`` iterations the deterministic policy runs one full episode in each of
``eval_envs`` separate envs (synchronized start, the task's command distribution). The
policy walks when the mean planar tracking error is <= 0.15 m/s and >= 95 % of episodes
reach the time-out, on the nominal robot (``eval_randomization``) whatever the training
randomizes; the run stops there (or, with ``stop_at_walk=false``, trains on to
``max_iterations`` and still reports the first walk), or at the first check past
``max_wall_s`` or ``max_env_steps`` without a walk. Wall-clock counts env construction,
the staggered warm-up and training, not the walk checks. Of the training iterations'
wall-clock (collection and update) the JSON reports the update's share
(``learn_fraction``) and the backend's physics steps' share (``physics_fraction``); the
rest is the env's own work, the policy's actions and the rollout storage, the most that
running them beside the physics could hide. Writes ``curve.csv`` in the run folder; the
last line printed is one JSON object.

    python scripts/benchmark_train.py
    python scripts/benchmark_train.py num_envs=2048 reset=sync
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import hydra
from benchmark_env import backend_step_timed
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from locomotion.config import config_group
from locomotion.evaluation import evaluate_episodes, walks
from locomotion.rl.runner import Runner, summary_line
from locomotion.tasks import make_env


@hydra.main(config_path="../configs", config_name="benchmark_train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    start = time.perf_counter()
    eval_s = 0.0
    env = make_env(cfg)
    eval_cfg = cfg.copy()
    with open_dict(eval_cfg):
        eval_cfg.num_envs = cfg.eval_envs
        eval_cfg.reset = {"schedule": "sync", "num_groups": None, "warmup": "zero"}
        eval_cfg.seed = cfg.seed + 1000
        eval_cfg.randomization = config_group("randomization", str(cfg.eval_randomization))
    eval_env = make_env(eval_cfg)
    runner = Runner(env, cfg, log_dir=run_dir)
    rows: list[dict] = []
    result: dict = {}
    learn_s = total_s = 0.0

    def check(r: Runner, stats: dict) -> bool:
        nonlocal eval_s, result, learn_s, total_s
        learn_s += stats["time"]["learn"]
        total_s += sum(stats["time"].values())
        if r.iteration % cfg.eval_every:
            return False
        t0 = time.perf_counter()
        metrics = evaluate_episodes(eval_env, r.policy.act_inference)
        eval_s += time.perf_counter() - t0
        wall = time.perf_counter() - start - eval_s
        row = {"iteration": r.iteration, "env_steps": r.env_steps, "wall_s": wall,
               "train_return": stats["episodes"].get("return", float("nan")), **metrics}
        rows.append(row)
        print(summary_line(stats) + f" | eval err {metrics['tracking_error']:.3f} "
              f"surv {metrics['survival']:.2f}", flush=True)
        if not result.get("walked"):  # keep the first check that walked
            result = {"walked": walks(metrics), "wall_s_to_walk": wall,
                      "env_steps_to_walk": r.env_steps, "iteration": r.iteration,
                      "tracking_error": metrics["tracking_error"],
                      "survival": metrics["survival"]}
        result["final"] = metrics
        out_of_budget = wall > cfg.max_wall_s or (
            cfg.max_env_steps is not None and r.env_steps >= cfg.max_env_steps)
        return (result["walked"] and cfg.stop_at_walk) or out_of_budget

    try:
        runner.start()  # the staggered warm-up steps the physics too: not an iteration's
        with backend_step_timed(env) as physics:
            runner.learn(int(cfg.max_iterations), should_stop=check)
    finally:
        env.close()
        eval_env.close()
    with (run_dir / "curve.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    if not result.get("walked"):
        result["wall_s_to_walk"] = result["env_steps_to_walk"] = None
    result.update({"env_steps_per_s": runner.env_steps / runner.train_wall_s,
                   "learn_fraction": learn_s / total_s,
                   "physics_fraction": physics[0] / total_s, "eval_s_excluded": eval_s,
                   "num_envs": cfg.num_envs, "reset": cfg.reset.schedule,
                   "run_dir": str(run_dir)})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
