"""Measure data-parallel costs on this machine and project iteration time for 1-64 ranks.

Measured here: the gradient all-reduce of the configured actor-critic between 2 gloo
processes (median over many calls, at several message sizes to fit latency and
bandwidth), the per-iteration small collectives (normalizer statistics, logged
statistics), and one rank's rollout and learner time per iteration (``num_envs`` envs on
``measure.rank_threads`` cores). Projected: iteration time, env steps/s and efficiency
for ``project.ranks`` ranks under a ring all-reduce model, on this machine's links inside
a node and on the assumed networks between nodes. Prints the tables and replaces the
table section of ``docs/scaling.md`` (between its markers); the last line is JSON.

    python -m research.scaling_projection
    python -m research.scaling_projection num_envs=512 measure.rank_threads=2 write=null
"""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
import socket
import statistics
import tempfile
import time
from pathlib import Path

import hydra
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from locomotion.rl.actor_critic import build_policy
from locomotion.rl.distributed import Distributed
from locomotion.rl.runner import Runner
from locomotion.tasks import make_env

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- scaling-table:begin -->", "<!-- scaling-table:end -->"


# ---------------------------------------------------------------------------- measuring
def _median_s(fn, calls: int, warmup: int = 10) -> float:
    """Median wall time of ``fn`` over ``calls`` calls, ranks aligned by a barrier each time."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(calls):
        dist.barrier()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _comm_rank(rank: int, port: int, spec: dict, out: str) -> None:
    """One of the 2 measuring processes: time each collective the trainer issues."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2")
    torch.set_num_threads(1)
    group = Distributed.from_environment("cpu", timeout_s=300)
    calls = spec["calls"]
    try:
        policy = build_policy(spec["policy"], spec["sizes"], spec["num_actions"])
        grads = [torch.randn_like(p) for p in policy.parameters()]
        numel = sum(g.numel() for g in grads)
        results = {"grad_numel": numel, "grad_bytes": 4 * numel}
        results["reduce_gradients_s"] = _median_s(lambda: group.reduce_gradients(grads), calls)
        sweep = {}
        for n in sorted({1, 1024, numel // 4, numel, 4 * numel}):
            buf = torch.zeros(n)
            sweep[4 * n] = _median_s(lambda b=buf: dist.all_reduce(b), calls)
        results["allreduce_s_by_bytes"] = sweep
        packed = torch.zeros(spec["normalizer_numel"], dtype=torch.float64)
        gathered = [torch.empty_like(packed) for _ in range(2)]
        results["normalizer_allgather_s"] = _median_s(
            lambda: dist.all_gather(gathered, packed), calls)
        results["normalizer_bytes"] = 8 * packed.numel()
        local = spec["stats"]
        results["statistics_s"] = _median_s(lambda: group.reduce_statistics(local),
                                            max(calls // 4, 20))
        results["statistics_bytes"] = len(pickle.dumps(local))
        if group.is_main:
            Path(out).write_text(json.dumps(results))
    finally:
        group.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_rank(cfg: DictConfig) -> tuple[dict, dict]:
    """Per-iteration rollout and learner time of one rank, and what the collectives carry."""
    rank_cfg = copy.deepcopy(cfg)
    threads = int(cfg.measure.rank_threads)
    with open_dict(rank_cfg):
        rank_cfg.sim.nthread = threads
        rank_cfg.torch_threads = threads
        rank_cfg.logging.tensorboard = False
    env = make_env(rank_cfg)
    runner = Runner(env, rank_cfg)
    rows: list[dict] = []

    def record(r: Runner, stats: dict) -> bool:
        rows.append(stats)
        return False

    try:
        runner.learn(int(cfg.measure.iterations) + 1, should_stop=record)
    finally:
        env.close()
    timed = rows[1:]  # the first iteration pays one-off allocation costs
    rollout = statistics.median(s["time"]["sim"] + s["time"]["policy"] for s in timed)
    learn = statistics.median(s["time"]["learn"] for s in timed)
    last = rows[-1]
    stats = {"losses": last["losses"], "episodes": last["episodes"],
             "histogram": last["phase_histogram"].tolist(), "steps": 1, "diverged": 0}
    sizes = env.observation_sizes
    spec = {"policy": OmegaConf.to_container(cfg.algo.policy, resolve=True), "sizes": sizes,
            "num_actions": env.num_actions, "stats": stats,
            "normalizer_numel": sum(1 + 2 * d for d in (sizes["policy"], sizes["critic"]))}
    return {"rollout_s": rollout, "learn_s": learn, "threads": threads,
            "num_envs": int(cfg.num_envs), "num_steps": int(cfg.algo.num_steps)}, spec


def measure_comm(spec: dict, calls: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "comm.json")
        mp.spawn(_comm_rank, args=(_free_port(), {**spec, "calls": calls}, out), nprocs=2)
        comm = json.loads(Path(out).read_text())
    comm["allreduce_s_by_bytes"] = {int(k): v for k, v in comm["allreduce_s_by_bytes"].items()}
    return comm


# ---------------------------------------------------------------------------- the model
def fit_link(by_bytes: dict[int, float]) -> tuple[float, float]:
    """Per-hop latency (s) and bandwidth (bytes/s) from 2-process all-reduce medians.

    With 2 ranks the ring all-reduce takes 2 latency hops and moves the whole message once:
    t = 2 * alpha + bytes / bandwidth. Least squares over the measured sizes.
    """
    xs, ys = list(by_bytes), list(by_bytes.values())
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    return max(intercept / 2, 1e-7), 1.0 / max(slope, 1e-15)


def allreduce_s(p: int, nbytes: float, alpha: float, bandwidth: float) -> float:
    """Ring all-reduce: 2(p-1) steps, each a latency hop and 1/p of the message."""
    return 0.0 if p == 1 else 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes / bandwidth


def allgather_s(p: int, nbytes_per_rank: float, alpha: float, bandwidth: float) -> float:
    """Ring all-gather: p-1 steps, each a latency hop and one rank's share."""
    return 0.0 if p == 1 else (p - 1) * (alpha + nbytes_per_rank / bandwidth)


def project(rank: dict, comm: dict, cfg: DictConfig) -> tuple[list[dict], dict]:
    """Iteration time for every rank count and link; the fitted local link."""
    alpha_local, bw_local = fit_link(comm["allreduce_s_by_bytes"])
    grad_bytes = comm["grad_bytes"]
    # Flattening and copying the gradients back costs the same at any scale.
    copy_s = max(comm["reduce_gradients_s"] - allreduce_s(2, grad_bytes, alpha_local,
                                                          bw_local), 0.0)
    # Pickling and merging the logged statistics: what the measurement shows beyond the
    # two all-gathers (sizes, then payload) that carry them.
    stats_bytes = comm["statistics_bytes"]
    stats_fixed = max(comm["statistics_s"] - 2 * allgather_s(2, stats_bytes, alpha_local,
                                                             bw_local), 0.0)
    steps_per_iter = cfg.algo.ppo.num_learning_epochs * cfg.algo.ppo.num_mini_batches
    compute = rank["rollout_s"] + rank["learn_s"]
    per_node = int(cfg.project.ranks_per_node)
    links = [{"name": "this machine", "alpha": alpha_local, "bw": bw_local}]
    links += [{"name": n.name, "alpha": n.latency_us * 1e-6, "bw": n.gbps * 1e9 / 8}
              for n in cfg.project.networks]
    rows = []
    for p in cfg.project.ranks:
        for link in links[1:] if p > per_node else links[:1]:
            a, bw = link["alpha"], link["bw"]
            # The KL rides in the gradient buffer: one all-reduce per optimizer step.
            grad = allreduce_s(p, grad_bytes + 4, a, bw) + (copy_s if p > 1 else 0.0)
            norm = allgather_s(p, comm["normalizer_bytes"], a, bw)
            stats = 0.0 if p == 1 else stats_fixed + 2 * allgather_s(p, stats_bytes, a, bw)
            comm_s = steps_per_iter * grad + norm + stats
            iteration = compute + comm_s
            nodes = math.ceil(p / per_node)
            rows.append({
                "ranks": p, "nodes": nodes,
                "link": "—" if p == 1 else link["name"],
                "grad_allreduce_ms": 1e3 * grad, "comm_ms": 1e3 * comm_s,
                "iteration_s": iteration,
                "steps_per_s": p * rank["num_envs"] * rank["num_steps"] / iteration,
                "efficiency": compute / iteration, "comm_share": comm_s / iteration,
            })
    return rows, {"alpha_local_us": 1e6 * alpha_local, "bandwidth_local_GBps": bw_local / 1e9,
                  "copy_ms": 1e3 * copy_s, "statistics_fixed_ms": 1e3 * stats_fixed,
                  "collectives_per_iteration": steps_per_iter + 3}


def crossover(rows: list[dict], compute_s: float) -> dict[str, int | None]:
    """Per link, the fewest ranks whose communication per iteration exceeds ``compute_s``."""
    out: dict[str, int | None] = {}
    for row in rows:
        if row["link"] == "—":
            continue
        key = row["link"]
        out.setdefault(key, None)
        if out[key] is None and row["comm_ms"] / 1e3 > compute_s:
            out[key] = row["ranks"]
    return out


# ---------------------------------------------------------------------------- reporting
def tables(rank: dict, comm: dict, rows: list[dict], fit: dict, cfg: DictConfig,
           command: str) -> str:
    compute = rank["rollout_s"] + rank["learn_s"]
    lines = [
        f"Measured with `{command}` (2 gloo processes on this machine, "
        f"load average {os.getloadavg()[0]:.2f} at the end):",
        "",
        f"- gradient all-reduce of the default actor-critic ({comm['grad_numel']:,} parameters, "
        f"{comm['grad_bytes'] / 1024:.0f} KiB), flattened into one buffer: "
        f"**{1e3 * comm['reduce_gradients_s']:.3f} ms** median per call",
        "- all-reduce medians by message size: " + ", ".join(
            f"{b:,} B {1e3 * s:.3f} ms" for b, s in comm["allreduce_s_by_bytes"].items()),
        f"- fitted link between 2 processes: {fit['alpha_local_us']:.1f} µs per hop, "
        f"{fit['bandwidth_local_GBps']:.2f} GB/s; flatten and copy-back {fit['copy_ms']:.3f} ms",
        f"- per iteration also: normalizer statistics all-gather "
        f"{1e3 * comm['normalizer_allgather_s']:.3f} ms, logged statistics "
        f"{1e3 * comm['statistics_s']:.3f} ms",
        f"- one rank ({rank['num_envs']} envs × {rank['num_steps']} steps on "
        f"{rank['threads']} core): rollout **{rank['rollout_s']:.3f} s**, learner "
        f"{rank['learn_s']:.3f} s per iteration (median of {cfg.measure.iterations})",
        "",
        "| ranks | nodes | link between nodes | grad all-reduce (ms) | comm / iteration (ms) "
        "| iteration (s) | env steps/s | efficiency | comm share |",
        "|---:|---:|:---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['ranks']} | {r['nodes']} | {r['link']} | {r['grad_allreduce_ms']:.3f} "
            f"| {r['comm_ms']:.2f} | {r['iteration_s']:.3f} | {r['steps_per_s']:,.0f} "
            f"| {r['efficiency']:.3f} | {100 * r['comm_share']:.1f} % |")
    lines += ["", "Fewest ranks at which communication per iteration exceeds a rank's compute "
              "per iteration (— : not within the table):", "",
              "| compute per rank-iteration | " + " | ".join(
                  k for k in crossover(rows, compute)) + " |",
              "|:---|" + "---:|" * len(crossover(rows, compute))]
    for label, seconds in [(f"{compute:.2f} s (measured CPU rank)", compute),
                           ("0.25 s", 0.25), ("0.10 s", 0.10), ("0.05 s", 0.05),
                           ("0.02 s", 0.02)]:
        cells = [str(v) if v else "—" for v in crossover(rows, seconds).values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_doc(path: Path, table: str) -> None:
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{path} has no {BEGIN} ... {END} section to replace")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{BEGIN}\n{table}{END}{tail}")


@hydra.main(config_path="configs", config_name="scaling_projection", version_base="1.3")
def main(cfg: DictConfig) -> None:
    rank, spec = measure_rank(cfg)  # first, alone: the 2 processes below would share cores
    comm = measure_comm(spec, int(cfg.measure.allreduce_calls))
    rows, fit = project(rank, comm, cfg)
    overrides = " ".join(OmegaConf.to_container(HydraConfig.get().overrides.task))
    command = f"python -m research.scaling_projection {overrides}".strip()
    table = tables(rank, comm, rows, fit, cfg, command)
    print(table)
    if cfg.write:
        path = ROOT / cfg.write
        write_doc(path, table)
        print(f"wrote the table into {cfg.write}")
    print(json.dumps({"rank": rank, "comm": {k: v for k, v in comm.items()
                                             if k != "allreduce_s_by_bytes"},
                      "fit": fit, "rows": rows}))


if __name__ == "__main__":
    main()
