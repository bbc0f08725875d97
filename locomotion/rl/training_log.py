"""Per-iteration training metrics: TensorBoard scalars plus a JSON-lines file for plots."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from omegaconf import DictConfig


class TrainingLog:
    """Writes each iteration's statistics to TensorBoard and ``progress.jsonl``."""

    def __init__(self, log_dir: Path, cfg: DictConfig):
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = log_dir
        self.jsonl = (log_dir / "progress.jsonl").open("a")
        self.writer = None
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(log_dir / "tensorboard"))

    def rewind(self, iteration: int, env_steps: int) -> None:
        """Forget what was logged after a checkpoint a run continues from (a restarted run
        redoes those iterations), so curves hold each iteration once.
        """
        path = self.log_dir / "progress.jsonl"
        self.jsonl.close()
        rows = [line for line in path.read_text().splitlines(keepends=True)
                if _iteration(line) <= iteration]
        path.write_text("".join(rows))
        self.jsonl = path.open("a")
        if self.writer is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer.close()
            self.writer = SummaryWriter(log_dir=str(self.log_dir / "tensorboard"),
                                        purge_step=env_steps + 1)

    def write(self, stats: dict) -> None:
        step = stats["env_steps"]
        t = stats["time"]
        total = sum(t.values())
        scalars = {
            "Perf/steps_per_s": stats["steps_per_s"],
            "Perf/wall_s": stats["wall_s"],
            "Perf/learn_fraction": t["learn"] / total,
            "Train/phase_uniformity": stats["phase_uniformity"],
            "Train/diverged_envs": stats["diverged"],  # env steps that diverged, this iteration
            "Train/diverged_fraction": stats.get("diverged_fraction", 0.0),
            "Train/mujoco_warnings": stats.get("warnings", 0),  # counted, never printed
            **{f"Perf/time_{k}": v for k, v in t.items()},
            **{f"Loss/{k}": v for k, v in stats["losses"].items()},
            **{f"Episode/{k}": v for k, v in stats["episodes"].items()},
            **stats.get("hooks", {}),
        }
        if "comm_s" in stats:  # distributed: learner collectives (part of time_learn)
            scalars["Perf/time_comm"] = stats["comm_s"]
        if self.writer is not None:
            for k, v in scalars.items():
                self.writer.add_scalar(k, v, step)
            hist = stats["phase_histogram"]
            bins = len(hist)
            self.writer.add_histogram_raw(
                "Train/episode_phase", min=0.0, max=1.0, num=int(hist.numel()),
                sum=float((hist * (torch.arange(bins) + 0.5) / bins).sum()),
                sum_squares=float((hist * ((torch.arange(bins) + 0.5) / bins) ** 2).sum()),
                bucket_limits=((torch.arange(bins) + 1.0) / bins).tolist(),
                bucket_counts=hist.tolist(), global_step=step)
        row = {"iteration": stats["iteration"], "env_steps": step, **scalars,
               "phase_histogram": stats["phase_histogram"].tolist()}
        self.jsonl.write(json.dumps(row) + "\n")
        self.jsonl.flush()

    def close(self) -> None:
        self.jsonl.close()
        if self.writer is not None:
            self.writer.close()


def _iteration(line: str) -> float:
    """The iteration of a progress.jsonl row; infinity for a torn or foreign line."""
    try:
        return json.loads(line)["iteration"]
    except (ValueError, KeyError, TypeError):
        return float("inf")
