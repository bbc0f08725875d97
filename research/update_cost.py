"""What one PPO update costs: the same update, from the same weights on the same rollout,
timed several times in a row.

Training interleaves the update with the physics, so ``benchmark_train.py``'s learner share
moves with everything else the machine does. This times the update alone: it builds the
config's env and runner, trains ``--warmup`` iterations (so the normalizers and the policy
are past their first steps), collects one more rollout, and then runs ``--repeats``
updates on it, each from the weights, optimizer state, learning rate and shuffling seed
the first one started from. It prints one JSON line: the median and the fastest update in
seconds, and the torch threads the update ran on (the learner's, as in training). With
``--profile`` one more update runs under torch's profiler: its operators by CPU time are
printed first, and the JSON adds the share of that time spent in the networks' matrix
products (``matmul_share``).

    python -m research.update_cost
    python -m research.update_cost --repeats 9 algo.symmetry=false
    python -m research.update_cost --profile

To compare two versions of the package, run the same command in a checkout of each, one
after the other on the same idle machine.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from locomotion.config import load_config
from locomotion.rl.runner import Runner, learner_threads
from locomotion.tasks import make_env


def time_updates(runner: Runner, repeats: int) -> list[float]:
    """Seconds of ``repeats`` updates on the runner's filled storage, each from the state
    the first started from."""
    ppo = runner.ppo
    start = (copy.deepcopy(ppo.state_dict()), ppo.generator.get_state())
    seconds = []
    for _ in range(repeats):
        ppo.load_state_dict(copy.deepcopy(start[0]))
        ppo.generator.set_state(start[1])
        t0 = time.perf_counter()
        ppo.update(runner.storage)
        seconds.append(time.perf_counter() - t0)
    return seconds


MATMULS = ("aten::mm", "aten::addmm")


def profile_update(runner: Runner) -> tuple[str, float]:
    """One more update, from the same start as the timed ones, under torch's profiler: its
    operators by CPU time (a table) and the share of that time in matrix products."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        time_updates(runner, 1)
    ops = prof.key_averages()
    total = sum(op.self_cpu_time_total for op in ops)
    products = sum(op.self_cpu_time_total for op in ops if op.key in MATMULS)
    return ops.table(sort_by="self_cpu_time_total", row_limit=15), products / total


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="updates timed (default 7)")
    parser.add_argument("--warmup", type=int, default=2,
                        help="training iterations before the timed rollout (default 2)")
    parser.add_argument("--profile", action="store_true",
                        help="profile one more update: its operators, the matrix products' share")
    parser.add_argument("overrides", nargs="*", help="config overrides, as for training")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        parser.error("--repeats must be >= 1 and --warmup >= 0")
    cfg = load_config("train", args.overrides)
    env = make_env(cfg)
    runner = Runner(env, cfg)
    runner.start()
    for _ in range(args.warmup):
        runner.train_iteration()
    start, cpu_start = time.perf_counter(), time.process_time()
    runner._collect()
    cpu_share = (time.process_time() - cpu_start) / (time.perf_counter() - start)
    with learner_threads(getattr(env, "threads", None), cpu_share):
        runner.ppo.compute_returns(runner.storage, env.obs["critic"])
        threads = torch.get_num_threads()
        seconds = time_updates(runner, args.repeats)
        if args.profile:
            table, matmul_share = profile_update(runner)
    result = {"median_s": statistics.median(seconds), "min_s": min(seconds),
              "seconds": [round(s, 4) for s in seconds], "learner_threads": threads,
              "mini_batch_steps": runner.ppo.config.num_learning_epochs
              * runner.ppo.config.num_mini_batches,
              "samples": runner.storage.num_steps * runner.storage.num_envs,
              "mirror": runner.ppo.mirror is not None}
    if args.profile:
        print(table)
        result["matmul_share"] = round(matmul_share, 3)
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
