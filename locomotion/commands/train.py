"""Train a gait policy: ``locomotion-train [hydra overrides]``.

Examples:
    locomotion-train
    locomotion-train num_envs=2048 reset=sync algo.num_steps=16 seed=3
    locomotion-train resume=runs/<run>/checkpoints/latest.pt
    locomotion-train run_dir=runs/exp1     # restartable: continues runs/exp1 if present
    locomotion-train sim=warp device=cuda num_envs=8192   # MuJoCo Warp on a GPU
    torchrun --nproc_per_node=2 -m locomotion.commands.train num_envs=256  # 2 processes
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from locomotion.commands.errors import run_app, user_errors
from locomotion.export import export_checkpoint, missing_export_packages
from locomotion.multitask import training_hooks
from locomotion.rl.distributed import Distributed, run_dir_overrides
from locomotion.rl.runner import DivergenceError, run_training


@hydra.main(config_path="pkg://locomotion.configs", config_name="train", version_base="1.3")
@user_errors
def train(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    dist = Distributed.from_environment(cfg.device)
    finished = False
    try:
        if dist is not None:
            run_dir = Path(dist.broadcast_object(str(run_dir)))  # rank 0's, on every rank
            if dist.is_main:
                print(f"distributed: {dist.world_size} processes ({dist.backend}), "
                      f"run directory {run_dir}", flush=True)
                if not cfg.run_dir:
                    print("warning: no run_dir and no rendezvous id (--rdzv-id): a restarted "
                          "group starts a new run directory instead of resuming this one",
                          flush=True)
        runner = run_training(cfg, run_dir, dist, resume_latest=cfg.run_dir is not None,
                              hooks=training_hooks)
        finished = True
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the runner has written its checkpoint
        if dist is None or dist.is_main:
            print(interrupted_lines(run_dir), flush=True)
        sys.exit(130)
    except DivergenceError as e:  # the runner has written its checkpoint
        finished = True  # every rank stopped at the same iteration
        if dist is None or dist.is_main:
            print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    finally:
        if dist is not None:
            dist.close(finished)
    if not runner.is_main:
        return
    print(f"checkpoint: {runner.checkpoint_path}")
    if cfg.export:
        missing = missing_export_packages()
        if missing:
            print(f"export skipped: {', '.join(missing)} not installed; pip install "
                  f"'locomotion[export]', then locomotion-export "
                  f"checkpoint={runner.checkpoint_path}")
        else:
            print(export_checkpoint(runner.checkpoint_path).summary())
    print(f"tensorboard: tensorboard --logdir {run_dir / 'tensorboard'}")


def interrupted_lines(run_dir: Path) -> str:
    """Where an interrupted run left its checkpoint and logs, and how to continue it."""
    checkpoint = run_dir / "checkpoints" / "latest.pt"
    if not checkpoint.is_file():
        return f"interrupted before the first checkpoint; logs in {run_dir}"
    kept = [a for a in sys.argv[1:] if not a.split("=", 1)[0].lstrip("+~").startswith(
        ("run_dir", "resume", "hydra."))]
    return (f"interrupted: checkpoint {checkpoint}, logs: tensorboard --logdir "
            f"{run_dir / 'tensorboard'}\n"
            f"continue with: locomotion-train {' '.join([*kept, f'run_dir={run_dir}'])}")


def continue_in_place(argv: list[str]) -> list[str]:
    """``resume=<run>/checkpoints/<file>`` without ``run_dir``: continue in ``<run>``, so the
    curves and checkpoints of one run stay in one folder."""
    given = dict(a.split("=", 1) for a in argv if "=" in a)
    resume = given.get("resume")
    if not resume or {"run_dir", "hydra.run.dir"} & set(given):
        return []
    path = Path(resume)
    return [f"run_dir={path.parent.parent}"] if path.parent.name == "checkpoints" else []


def main() -> None:
    # One run directory for every rank and restart: run_dir=... (or torchrun's rendezvous
    # id) becomes Hydra's output directory; resume=<run>/checkpoints/... continues in <run>.
    # (inserted first: Hydra's flags such as --cfg job may follow the overrides)
    sys.argv[1:1] = continue_in_place(sys.argv[1:])
    sys.argv[1:1] = run_dir_overrides(sys.argv[1:])
    run_app(train)


if __name__ == "__main__":
    main()
