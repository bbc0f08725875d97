"""Throughput of MuJoCo Warp on a GPU: bare physics, the env, and full training iterations.

For every N: physics-only control steps/s (``WarpBackend.step``, each a replay of the
captured graph of the control step's substeps), env steps/s with random actions drawn on
the device, training steps/s over whole PPO iterations (collection + update through
``Runner.train_iteration``) and peak GPU memory (torch's allocator plus Warp's memory
pool). Prints a table; the last line is one JSON object.

    python scripts/benchmark_gpu.py
    python scripts/benchmark_gpu.py num_envs_list=[4096] solver=fidelity
    python scripts/benchmark_gpu.py device=cpu num_envs_list=[4] physics_steps=5 env_steps=5 \
        train_iterations=1 algo.num_steps=4     # Warp's CPU device: a smoke test
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable

import hydra
import torch
import warp as wp
from omegaconf import DictConfig, open_dict

from locomotion.rl.runner import Runner
from locomotion.tasks import make_env

MB = 2**20


def timed(device: torch.device, fn: Callable[[], None], repeats: int) -> float:
    """Seconds for ``repeats`` calls of ``fn``, with the device drained before and after."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return time.perf_counter() - start


def measure(cfg: DictConfig, n: int) -> dict:
    run_cfg = cfg.copy()
    with open_dict(run_cfg):
        run_cfg.num_envs = n
    env = make_env(run_cfg)
    device = env.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    env.reset()
    sim, ctrl, decimation = env.sim, env.ctrl, env.decimation
    shape = (n, env.num_actions)
    gen = torch.Generator(device).manual_seed(int(cfg.seed))

    def physics() -> None:
        sim.step(ctrl, decimation)

    def env_step() -> None:
        env.step(torch.randn(shape, generator=gen, device=device))

    timed(device, physics, int(cfg.warmup_steps))
    physics_s = timed(device, physics, int(cfg.physics_steps))
    timed(device, env_step, int(cfg.warmup_steps))
    env_s = timed(device, env_step, int(cfg.env_steps))
    runner = Runner(env, run_cfg)
    runner.train_iteration()  # untimed: first backward pass, optimizer state
    train_s = timed(device, runner.train_iteration, int(cfg.train_iterations))

    physics_sps = int(cfg.physics_steps) * n / physics_s
    row = {"num_envs": n, "physics_steps_per_s": physics_sps,
           "physics_substeps_per_s": physics_sps * decimation,
           "env_steps_per_s": int(cfg.env_steps) * n / env_s,
           "train_steps_per_s": int(cfg.train_iterations) * runner.num_steps * n / train_s,
           "torch_peak_mb": None, "warp_peak_mb": None, "gpu_peak_mb": None}
    if device.type == "cuda":
        row["torch_peak_mb"] = torch.cuda.max_memory_allocated(device) / MB
        if wp.is_mempool_enabled(sim.wp_device):  # a process-wide high-water mark
            row["warp_peak_mb"] = wp.get_mempool_used_mem_high(sim.wp_device) / MB
        row["gpu_peak_mb"] = row["torch_peak_mb"] + (row["warp_peak_mb"] or 0.0)
    env.close()
    return row


@hydra.main(config_path="../configs", config_name="benchmark_gpu", version_base="1.3")
def main(cfg: DictConfig) -> None:
    sizes = sorted(int(n) for n in cfg.num_envs_list)  # ascending: Warp's peak is process-wide
    print(f"robot={cfg.robot.spec} solver={cfg.solver.name} device={cfg.device} "
          f"graph={cfg.sim.graph}")
    print(f"{'N':>6} {'physics/s':>11} {'substeps/s':>11} {'env/s':>10} {'train/s':>10}"
          f" {'torch MB':>9} {'warp MB':>8}")
    rows = []
    for n in sizes:
        r = measure(cfg, n)
        rows.append(r)
        gc.collect()  # free this N's env before the next one allocates
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        mem = " ".join(f"{r[k]:>{w}.0f}" if r[k] is not None else f"{'-':>{w}}"
                       for k, w in (("torch_peak_mb", 9), ("warp_peak_mb", 8)))
        print(f"{n:>6} {r['physics_steps_per_s']:>11.0f} {r['physics_substeps_per_s']:>11.0f}"
              f" {r['env_steps_per_s']:>10.0f} {r['train_steps_per_s']:>10.0f} {mem}",
              flush=True)
    print(json.dumps({"robot": cfg.robot.spec, "solver": cfg.solver.name,
                      "device": cfg.device, "results": rows}))


if __name__ == "__main__":
    main()
