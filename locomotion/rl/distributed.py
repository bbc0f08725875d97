"""Data-parallel training across processes and machines with ``torch.distributed``.

``torchrun --nproc_per_node=P scripts/train.py`` starts P copies of the trainer. Each rank
owns its own batch of envs (seeded differently) and its own physics threads; the ranks
share one policy:

- initial weights and normalizer buffers are broadcast from rank 0 once, after construction;
- every PPO mini-batch all-reduces (averages) the gradients, flattened into one buffer,
  before clipping and the optimizer step, and averages the KL that adapts the learning
  rate, so every rank takes the same step;
- the observation normalizers merge the statistics of every rank's batch (each rank's
  count, mean and M2 gathered and folded with Chan's formula), so all ranks normalize alike;
- the logged statistics are rank means (losses), episode-weighted means (episode terms),
  sums (env steps, diverged envs) or step-weighted merges (the phase histogram).

The process group uses NCCL when the device is CUDA (one GPU per rank, ``cuda:LOCAL_RANK``)
and gloo otherwise. Without torchrun's environment variables nothing here is used and a
run is a plain single-process run.
"""

from __future__ import annotations

import copy
import faulthandler
import math
import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig, open_dict
from torch import Tensor, nn

from locomotion.rl.normalizer import EmpiricalNormalizer, combine_stats
from locomotion.sim.threads import usable_cores

# Ranks seed their envs and sampling with seed + stride * rank: a large prime stride keeps
# rank r of seed s from replaying rank 0 of seed s + r when small seeds are swept.
RANK_SEED_STRIDE = 1_000_003
# Loss statistics that differ between ranks and are logged as their mean. The KL is
# averaged inside PPO already; learning rate, action std and skip counts agree by design.
RANK_LOCAL_LOSSES = ("surrogate_loss", "value_loss", "entropy", "clip_fraction")
_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def launched_distributed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process was started by torchrun (or anything that sets its variables)."""
    environ = os.environ if environ is None else environ
    return all(k in environ for k in _LAUNCH_VARS)


def cpu_share(local_world_size: int) -> int:
    """Cores for one of ``local_world_size`` processes on this machine (at least 1)."""
    return max(1, usable_cores() // max(1, local_world_size))


def run_dir_overrides(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """Hydra overrides that give a run one directory across ranks and torchrun restarts.

    ``run_dir=X`` on the command line also becomes Hydra's output directory. Under torchrun
    without ``run_dir``, the directory is named after the launch's rendezvous id, which every
    rank and every restart of one launch share (a fresh UUID per single-node launch, the
    ``--rdzv-id`` of a multi-node job). Without a usable id (``none``) nothing is added and
    rank 0's Hydra directory is used (restarts then start a new directory).
    """
    environ = os.environ if environ is None else environ
    given = {a.split("=", 1)[0].lstrip("+~") for a in argv if "=" in a}
    extra = []
    if "run_dir" not in given and "hydra.run.dir" not in given and launched_distributed(environ):
        run_id = environ.get("TORCHELASTIC_RUN_ID", "none")
        if run_id not in ("", "none"):
            extra.append(f"run_dir=runs/torchrun_{_short_id(run_id)}_${{robot_name:}}"
                         "_${task.name}")
    if ("run_dir" in given or extra) and "hydra.run.dir" not in given:
        extra.append("hydra.run.dir=${run_dir}")
    return extra


def _short_id(run_id: str) -> str:
    """A rendezvous id fit for a directory name: UUIDs shortened to 8 hex digits."""
    try:
        return uuid.UUID(run_id).hex[:8]
    except ValueError:
        return re.sub(r"[^A-Za-z0-9_.-]", "-", run_id)


def _attempt_store(timeout: timedelta | None) -> dist.Store:
    """The rendezvous store of ``env://``, with keys kept apart per torchrun restart.

    torchrun shares its own store with the workers and keeps it across restarts, so a
    restarted group would otherwise read the previous attempt's connection addresses
    (pytorch/pytorch#135712) and fail to connect.
    """
    store, _, _ = next(dist.rendezvous("env://", **({"timeout": timeout} if timeout else {})))
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    return dist.PrefixStore(f"locomotion_attempt_{attempt}", store) if attempt else store


def to_cpu(obj: Any) -> Any:
    """``obj`` with every tensor inside dicts, lists and tuples moved to the CPU, so another
    rank can unpickle it without touching this rank's GPU.
    """
    if isinstance(obj, Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def merge_rank_statistics(ranks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One iteration's statistics for the whole group from every rank's own.

    Each entry holds ``losses``, ``episodes`` (means over the rank's finished episodes with
    their ``count``), ``histogram`` (normalized phase histogram), ``steps``, ``diverged``
    and optionally ``warnings`` (MuJoCo's warnings).
    """
    losses = {k: sum(r["losses"][k] for r in ranks) / len(ranks) for k in ranks[0]["losses"]}
    finished = [r["episodes"] for r in ranks if r["episodes"].get("count", 0) > 0]
    episodes: dict[str, float] = {}
    if finished:
        count = sum(e["count"] for e in finished)
        keys = [k for k in finished[0] if k != "count"]
        episodes = {k: sum(e[k] * e["count"] for e in finished) / count for k in keys}
        episodes["count"] = float(count)
    steps = sum(int(r["steps"]) for r in ranks)
    histogram = sum(torch.as_tensor(r["histogram"], dtype=torch.float64) * int(r["steps"])
                    for r in ranks) / max(steps, 1)
    nonzero = histogram[histogram > 0]
    uniformity = float(-(nonzero * nonzero.log()).sum() / math.log(len(histogram)))
    return {"losses": losses, "episodes": episodes, "histogram": histogram,
            "uniformity": uniformity, "steps": steps,
            "diverged": sum(int(r["diverged"]) for r in ranks),
            "warnings": sum(int(r.get("warnings", 0)) for r in ranks)}


class Distributed:
    """This process's place in the group and the collectives the trainer needs."""

    def __init__(self, rank: int, world_size: int, local_rank: int, local_world_size: int,
                 device: torch.device, backend: str):
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.local_world_size = local_world_size
        self.device = device
        self.backend = backend
        self.comm_s = 0.0  # seconds spent in per-mini-batch and normalizer collectives

    @classmethod
    def from_environment(cls, device: str = "cpu",
                         timeout_s: float | None = None) -> Distributed | None:
        """Join the group torchrun describes in the environment; None for a plain run.

        ``device`` is the configured one: ``cuda`` puts rank r on its node's GPU
        ``LOCAL_RANK`` and talks NCCL; anything else talks gloo.
        """
        if not launched_distributed():
            return None
        faulthandler.enable()  # a rank killed by a native abort still prints its Python stack
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        kind = torch.device(device).type
        if kind == "cuda":
            if not torch.cuda.is_available():
                raise ValueError("device=cuda but this machine has no CUDA device; "
                                 "use device=cpu (gloo) or a CUDA build of torch")
            if local_rank >= torch.cuda.device_count():
                raise ValueError(f"local rank {local_rank} needs GPU {local_rank}, but only "
                                 f"{torch.cuda.device_count()} are visible: start at most one "
                                 "process per GPU (--nproc_per_node)")
            torch_device = torch.device("cuda", local_rank)
            torch.cuda.set_device(torch_device)
            backend = "nccl"
        elif kind == "cpu":
            torch_device, backend = torch.device("cpu"), "gloo"
        else:
            raise ValueError(f"distributed training supports device cpu (gloo) or cuda "
                             f"(nccl), not {device!r}")
        if not dist.is_initialized():
            timeout = timedelta(seconds=timeout_s) if timeout_s is not None else None
            kwargs: dict[str, Any] = {"timeout": timeout} if timeout else {}
            if backend == "nccl":
                kwargs["device_id"] = torch_device
            dist.init_process_group(backend, store=_attempt_store(timeout), rank=rank,
                                    world_size=world_size, **kwargs)
        return cls(rank, world_size, local_rank, local_world_size, torch_device, backend)

    @property
    def is_main(self) -> bool:
        """Rank 0 logs, prints and writes checkpoints."""
        return self.rank == 0

    def close(self, finished: bool = False) -> None:
        """Leave the group. ``finished``: the run ended normally on every rank, so each first
        waits for the others and none tears down its connections while a peer's last
        collective is still in flight (gloo aborts the process when that happens). After a
        failure a rank just leaves: a peer may never reach the barrier."""
        if dist.is_initialized():
            if finished:
                dist.barrier()
            dist.destroy_process_group()

    # ------------------------------------------------------------------ configuration
    def rank_config(self, cfg: DictConfig) -> DictConfig:
        """This rank's copy of the run config: own seed, own GPU, a share of the cores.

        ``sim.nthread`` (native backend) and ``torch_threads`` left at null get
        cores / processes-on-this-node, so P ranks on one machine do not oversubscribe it.
        """
        cfg = copy.deepcopy(cfg)
        share = cpu_share(self.local_world_size)
        with open_dict(cfg):
            cfg.seed = int(cfg.seed) + RANK_SEED_STRIDE * self.rank
            if self.device.type == "cuda":
                cfg.device = str(self.device)
            if cfg.sim.backend == "native" and cfg.sim.get("nthread") is None:
                cfg.sim.nthread = share
            if cfg.get("torch_threads") is None:
                cfg.torch_threads = share
        return cfg

    # ------------------------------------------------------------------ learner collectives
    @torch.no_grad()
    def broadcast_module(self, module: nn.Module) -> None:
        """Overwrite every parameter and buffer of ``module`` with rank 0's."""
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=0)

    @torch.no_grad()
    def reduce_gradients(self, grads: list[Tensor]) -> None:
        """Average gradients over ranks in place, as one flat all-reduce."""
        start = time.perf_counter()
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat.div_(self.world_size)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
        self.comm_s += time.perf_counter() - start

    @torch.no_grad()
    def reduce_mean(self, value: Tensor) -> None:
        """Average a tensor (e.g. the mini-batch KL) over ranks in place."""
        start = time.perf_counter()
        dist.all_reduce(value)
        value.div_(self.world_size)
        self.comm_s += time.perf_counter() - start

    @torch.no_grad()
    def update_normalizers(self, policy: nn.Module, obs: Tensor,
                           critic_obs: Tensor | None = None) -> None:
        """``ActorCritic.update_normalizers`` with the statistics of every rank's batch."""
        if not getattr(policy, "normalize_obs", False):
            return
        critic_obs = obs if critic_obs is None else critic_obs
        self.merge_batches([(policy.obs_normalizer, obs),
                            (policy.critic_obs_normalizer, critic_obs)])

    @torch.no_grad()
    def merge_batches(self, pairs: Sequence[tuple[EmpiricalNormalizer, Tensor]]) -> None:
        """Update each normalizer with the union of every rank's batch for it.

        One all-gather carries every rank's (count, mean, M2) for all normalizers; each rank
        folds them in rank order, so all ranks end with the same bits.
        """
        pairs = [(n, x) for n, x in pairs if not n.frozen]
        if not pairs:
            return
        start = time.perf_counter()
        local = [n.batch_stats(x) for n, x in pairs]
        packed = torch.cat([torch.cat([c.reshape(1).double(), m.reshape(-1).double(),
                                       m2.reshape(-1).double()]) for c, m, m2 in local])
        gathered = [torch.empty_like(packed) for _ in range(self.world_size)]
        dist.all_gather(gathered, packed)
        for i, (normalizer, _) in enumerate(pairs):
            shape, dtype = normalizer.mean.shape, normalizer.mean.dtype
            size = normalizer.mean.numel()
            begin = sum(1 + 2 * n.mean.numel() for n, _ in pairs[:i])
            per_rank = []
            for row in gathered:
                chunk = row[begin:begin + 1 + 2 * size]
                per_rank.append((chunk[0].round().long(),
                                 chunk[1:1 + size].to(dtype).reshape(shape),
                                 chunk[1 + size:].to(dtype).reshape(shape)))
            normalizer.merge(*combine_stats(per_rank))
        self.comm_s += time.perf_counter() - start

    def pop_comm_time(self) -> float:
        """Seconds spent in learner collectives since the last call."""
        spent, self.comm_s = self.comm_s, 0.0
        return spent

    def all_gather(self, tensor: Tensor) -> Tensor:
        """Every rank's ``tensor`` (same shape on all ranks), stacked in rank order."""
        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor)
        return torch.stack(parts)

    # ------------------------------------------------------------------ objects
    def reduce_statistics(self, local: dict[str, Any]) -> dict[str, Any]:
        """Every rank's iteration statistics merged (``merge_rank_statistics``) on all ranks."""
        local = {**local, "losses": {k: local["losses"][k] for k in RANK_LOCAL_LOSSES
                                     if k in local["losses"]},
                 "histogram": torch.as_tensor(local["histogram"]).tolist()}
        everyone: list[Any] = [None] * self.world_size
        dist.all_gather_object(everyone, local)
        return merge_rank_statistics(everyone)

    def gather_to_main(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` as a list on rank 0 (None elsewhere)."""
        out: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def scatter_from_main(self, objs: Sequence[Any] | None) -> Any:
        """Rank r receives ``objs[r]`` of rank 0's list (other ranks pass None)."""
        out: list[Any] = [None]
        dist.scatter_object_list(out, list(objs) if self.is_main else None, src=0)
        return out[0]

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]
