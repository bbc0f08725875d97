"""Fine-tune a trained policy under another training config (e.g. wider randomization).

    python scripts/finetune.py init=robots/go1/pretrained/checkpoint.pt run_dir=runs/ft \\
        randomization=sim2real max_iterations=400 [train overrides]

A new run whose policy (actor, critic, action std and observation normalizers) starts from
the ``init`` checkpoint's (a run's checkpoint or a policy-only export), with a fresh
optimizer, env, randomization draws and iteration count. ``resume`` cannot do this: it
continues a run with the env state it saved, so a run keeps its randomization preset.
The run's checkpoints continue with ``locomotion-train resume=<run_dir>/checkpoints/...``
like any other run (``scripts/make_pretrained.sh`` uses both).
"""

from __future__ import annotations

import sys
from pathlib import Path

from locomotion.config import load_config
from locomotion.multitask import training_hooks
from locomotion.rl.checkpoint import load_checkpoint
from locomotion.rl.runner import Runner
from locomotion.tasks import make_env


def main(argv: list[str]) -> Path:
    given = dict(a.split("=", 1) for a in argv if a.split("=", 1)[0] in ("init", "run_dir"))
    if set(given) != {"init", "run_dir"}:
        sys.exit("usage: finetune.py init=CHECKPOINT run_dir=DIR [train overrides]")
    overrides = [a for a in argv if a.split("=", 1)[0] not in ("init", "run_dir")]
    cfg = load_config("train", overrides)
    cfg.run_dir = given["run_dir"]
    data = load_checkpoint(given["init"])
    env = make_env(cfg)
    try:
        runner = Runner(env, cfg, log_dir=given["run_dir"], hooks=training_hooks(env, cfg))
        if runner.checkpoint_path.is_file():
            sys.exit(f"{runner.checkpoint_path} exists: continue it with locomotion-train "
                     f"resume={runner.checkpoint_path}")
        mine = (env.spec.name, env.observation_sizes, env.num_actions)
        theirs = (data["robot"], data["observation_sizes"], data["num_actions"])
        if mine != theirs:
            sys.exit(f"{given['init']} is for robot/observations/actions {theirs}; this run "
                     f"has {mine}")
        runner.policy.load_state_dict(data["ppo"]["policy"])
        print(f"policy from {given['init']} (iteration {data['iteration']}); training "
              f"{cfg.max_iterations} iterations", flush=True)
        runner.learn(int(cfg.max_iterations))
    finally:
        env.close()
    print(f"checkpoint: {runner.checkpoint_path}")
    return runner.checkpoint_path


if __name__ == "__main__":
    main(sys.argv[1:])
