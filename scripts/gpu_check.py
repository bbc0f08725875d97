"""Check the GPU path on a CUDA host in one command, and write what it measured.

    python scripts/gpu_check.py            # a CUDA host: < 8 min, Warp's kernel compile included
    python scripts/gpu_check.py --dry-run  # any machine: every stage on the CPU, tiny sizes

Stages, each a child process run from the output folder (never from the checkout):

  host        Python, torch, CUDA, the GPU and its driver, Warp and mujoco_warp (graph
              conditional nodes, memory pool)
  package     ``import locomotion.tasks`` works, else the checkout is installed (below)
  cuda_tests  the CUDA tests of tests/test_warp_backend.py: none may be skipped
  sync        masked env steps and a rollout under torch.cuda.set_sync_debug_mode("warn"),
              flat and task=rough randomization=robust: 0 host syncs per env step, 1 per
              rollout (its episode means); on the CPU the host reads are counted instead
  benchmark   scripts/benchmark_gpu.py at 4096 and 16384 envs: env steps/s, physics steps/s,
              training steps/s, peak GPU memory
  train_flat  5 iterations of ``locomotion-train sim=warp device=cuda`` (4096 envs)
  train_rough the same with task=rough randomization=robust
  resume      train_flat's run continued to iteration 7 from its checkpoint
  torchrun    ``torchrun --nproc_per_node=1 -m locomotion.commands.train``: one NCCL rank

``--dry-run`` runs every stage on the CPU (Warp's CPU device, 4-8 envs, gloo instead of
NCCL) to show that the check itself works, and names the stages whose real check needs a
GPU. Results: ``<out>/gpu_check.json`` (one object: host, stages with status, seconds and
numbers) and ``<out>/gpu_check.log`` (every command and its output); ``--out`` defaults to
``runs/gpu_check/<date>``. Exit code 0 when every stage passed, 1 when one failed or ran out
of time (``--budget-s``, 480 s), 2 when the check cannot start (no CUDA without
``--dry-run``, the package neither importable nor installable).

Offline hosts: third-party packages sit in a folder on PYTHONPATH and the project must be
installed, since pyproject maps the checkout's robots/, tasks/ and configs/ into
locomotion.robots, .tasks and .configs only at install time (``PYTHONPATH=$PWD`` finds a
``locomotion`` without them). When ``import locomotion.tasks`` fails, the check runs
``pip install --no-deps --no-build-isolation --target <out>/site .`` (setuptools must be
importable) and puts that folder first on PYTHONPATH for every stage; so it does when the
importable ``locomotion`` is an installed copy rather than this checkout (an editable
install), so that the code checked is the checkout's. ``--no-install`` stops with the
command to run instead.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Collection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 480.0
GPU = {"envs": 4096, "bench_envs": "[4096,16384]", "iterations": 5, "resumed_to": 7,
       "torchrun_iterations": 2}
CPU = {"envs": 4, "bench_envs": "[4]", "iterations": 2, "resumed_to": 3,
       "torchrun_iterations": 1}
ROUGH = ["task=rough", "randomization=robust"]
# The dry run's learner: small networks, one PPO pass (the default networks' first update
# alone takes seconds on a CPU).
SMALL_LEARNER = ["algo.policy.actor_hidden_dims=[32]", "algo.policy.critic_hidden_dims=[32]",
                 "algo.ppo.num_learning_epochs=1", "algo.ppo.num_mini_batches=1"]


class Check:
    """Runs the stages, logs their output and collects the results."""

    def __init__(self, args: argparse.Namespace):
        self.dry = args.dry_run
        self.size = CPU if self.dry else GPU
        self.device = "cpu" if self.dry else "cuda"
        self.out = Path(args.out or ROOT / "runs" / "gpu_check"
                        / dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = (self.out / "gpu_check.log").open("w")
        self.start = time.monotonic()
        self.deadline = self.start + args.budget_s
        self.install = not args.no_install
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "HYDRA_FULL_ERROR": "1"}
        self.stages: list[dict] = []
        self.host: dict = {}

    # ------------------------------------------------------------------ plumbing
    def say(self, line: str) -> None:
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def run(self, cmd: list[str], timeout: float) -> tuple[int, str]:
        """Run ``cmd`` from the output folder; its output goes to the log. (rc, output);
        rc 124 when it ran past ``timeout`` seconds."""
        self.log.write(f"$ {shlex.join(cmd)}\n")
        self.log.flush()
        try:
            done = subprocess.run(cmd, cwd=self.out, env=self.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=timeout)
            rc, output = done.returncode, done.stdout
        except subprocess.TimeoutExpired as e:
            partial = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout
            rc, output = 124, f"{partial or ''}\n(stopped after {timeout:.0f} s)\n"
        self.log.write(output + f"(exit code {rc})\n\n")
        self.log.flush()
        return rc, output

    def python(self, *args: str) -> list[str]:
        return [sys.executable, *args]

    def stage(self, name: str, needs_gpu: bool, fn, cap_s: float) -> None:
        """Run stage ``fn(timeout) -> result dict`` within the time budget."""
        left = self.deadline - time.monotonic()
        record = {"name": name, "needs_gpu": needs_gpu, "ran_on": self.device}
        if left < 5:
            record.update(status="skipped", error="out of time (--budget-s)", seconds=0.0)
        else:
            self.say(f"[{name}] ...")
            t0 = time.monotonic()
            try:
                record.update(fn(min(cap_s, left)))
            except Exception as e:  # noqa: BLE001  (a broken stage must not stop the others)
                record.update(status="failed", error=f"{type(e).__name__}: {e}")
            record["seconds"] = round(time.monotonic() - t0, 1)
        self.stages.append(record)
        extra = f" ({record['error']})" if record.get("error") else ""
        self.say(f"[{name}] {record['status']} in {record['seconds']:.0f} s{extra}")

    def train(self, run: str, iterations: int, extra: list[str] = (),
              launcher: list[str] | None = None, timeout: float = 120) -> tuple[int, str]:
        size = ["num_envs=" + str(self.size["envs"])]
        if self.dry:
            size += ["algo.num_steps=4", "reset=sync", *SMALL_LEARNER]
        cmd = (launcher or self.python()) + [
            "-m", "locomotion.commands.train", "sim=warp", f"device={self.device}", *size,
            f"max_iterations={iterations}", "export=false", f"run_dir={self.out / run}",
            "logging.tensorboard=false", *extra]
        return self.run(cmd, timeout)

    def progress(self, run: str) -> list[dict]:
        path = self.out / run / "progress.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] \
            if path.is_file() else []

    # ------------------------------------------------------------------ stages
    def stage_host(self, timeout: float) -> dict:
        rc, output = self.run(self.python(__file__, "--worker", "host"), timeout)
        if rc != 0:
            return {"status": "failed", "error": _last_line(output)}
        self.host = json.loads(output.strip().splitlines()[-1])
        if not self.dry and not self.host.get("cuda_available"):
            return {"status": "failed", "error": "torch sees no CUDA device (is this the CUDA "
                    "build of torch?); --dry-run checks the rest on the CPU", **self.host}
        return {"status": "passed", **self.host}

    def stage_package(self, timeout: float) -> dict:
        probe = self.python("-c", "import locomotion.tasks, locomotion.configs, "
                                  "locomotion.robots, locomotion; print(locomotion.__file__)")
        rc, output = self.run(probe, 60)
        found = output.strip().splitlines()[-1] if rc == 0 else ""
        if rc == 0 and Path(found).resolve().is_relative_to(ROOT):  # an editable install
            return {"status": "passed", "locomotion": found, "installed_now": False}
        site = self.out / "site"
        install = self.python("-m", "pip", "install", "--no-deps", "--no-build-isolation",
                              "--no-index", "--target", str(site), str(ROOT))
        why = ("locomotion is not installed: PYTHONPATH=<checkout> alone does not work, "
               "pyproject maps robots/, tasks/ and configs/ into locomotion.* at install time"
               ) if rc != 0 else (f"the locomotion installed at {found} is a copy, maybe of "
                                  "older code: this checkout is installed to be checked")
        if not self.install:
            return {"status": "failed", "fatal": True,
                    "error": f"{why}; run: {shlex.join(install)} and put {site} on PYTHONPATH"}
        self.say(f"[package] {why}; installing into {site}")
        rc, output = self.run(install, timeout)
        if rc != 0:
            return {"status": "failed", "fatal": True, "error": f"{why}; installing failed "
                    f"({_last_line(output)}): is setuptools on PYTHONPATH?"}
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(site), *filter(None, [self.env.get("PYTHONPATH")])])
        rc, output = self.run(probe, 60)
        if rc != 0:
            return {"status": "failed", "fatal": True, "error": _last_line(output)}
        return {"status": "passed", "locomotion": output.strip().splitlines()[-1],
                "installed_now": True, "site": str(site)}

    def stage_cuda_tests(self, timeout: float) -> dict:
        xml = self.out / "cuda_tests.xml"
        rc, output = self.run(self.python(
            "-m", "pytest", str(ROOT / "tests" / "test_warp_backend.py"), "-k", "cuda", "-rs",
            "-p", "no:cacheprovider", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
            str(ROOT), "-o", "pythonpath=", f"--junitxml={xml}"), timeout)
        if not xml.is_file():
            return {"status": "failed", "error": _last_line(output)}
        suite = ET.parse(xml).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
        cases = [c.get("name") for c in suite.iter("testcase")]
        result = {**counts, "cases": cases}
        if counts["failures"] or counts["errors"] or rc not in (0, 5):
            return {"status": "failed", "error": f"{counts['failures']} failed, "
                    f"{counts['errors']} errors", **result}
        if counts["skipped"]:
            return {"status": "needs_gpu" if self.dry else "failed",
                    "error": f"{counts['skipped']} skipped without CUDA", **result}
        return {"status": "passed", **result}

    def stage_sync(self, timeout: float) -> dict:
        envs = 4096 if not self.dry else 8
        rc, output = self.run(self.python(__file__, "--worker", "sync", "--device", self.device,
                                          "--num-envs", str(envs),
                                          *(["--small"] if self.dry else [])), timeout)
        if rc != 0:
            return {"status": "failed", "error": _last_line(output)}
        found = json.loads(output.strip().splitlines()[-1])
        # a rollout reads its episode means once; nothing else may wait for the device
        bad = {name: r for name, r in found.items()
               if r["env_step_reads"] > 0 or r["rollout_reads"] > 1}
        return {"status": "failed" if bad else "passed", "configs": found,
                **({"error": f"host reads in {sorted(bad)}"} if bad else {})}

    def stage_benchmark(self, timeout: float) -> dict:
        steps = (["warmup_steps=1", "physics_steps=3", "env_steps=3", "train_iterations=1",
                  "algo.num_steps=4", *SMALL_LEARNER] if self.dry else
                 ["physics_steps=100", "env_steps=50", "train_iterations=2"])
        rc, output = self.run(self.python(
            str(ROOT / "scripts" / "benchmark_gpu.py"), f"device={self.device}",
            f"num_envs_list={self.size['bench_envs']}", *steps,
            f"hydra.run.dir={self.out / 'benchmark'}"), timeout)
        if rc != 0:
            return {"status": "failed", "error": _last_line(output)}
        rows = json.loads(output.strip().splitlines()[-1])["results"]
        keys = ("num_envs", "env_steps_per_s", "physics_steps_per_s", "physics_substeps_per_s",
                "train_steps_per_s", "gpu_peak_mb", "torch_peak_mb", "warp_peak_mb")
        return {"status": "passed", "results": [{k: r.get(k) for k in keys} for r in rows]}

    def _train_result(self, run: str, rc: int, output: str, iterations: int) -> dict:
        rows = self.progress(run)
        last = rows[-1] if rows else {}
        result = {"iterations": len(rows), "last_iteration": last.get("iteration"),
                  "steps_per_s": last.get("Perf/steps_per_s"),
                  "diverged_envs": sum(r.get("Train/diverged_envs", 0) for r in rows),
                  "physics_warnings": sum(r.get("Train/mujoco_warnings", 0) for r in rows),
                  "learn_fraction": last.get("Perf/learn_fraction")}
        if rc != 0 or last.get("iteration") != iterations:
            return {"status": "failed", "error": _last_line(output), **result}
        return {"status": "passed", **result}

    def stage_train(self, run: str, extra: list[str]):
        def fn(timeout: float) -> dict:
            n = self.size["iterations"]
            rc, output = self.train(run, n, extra, timeout=timeout)
            return self._train_result(run, rc, output, n)
        return fn

    def stage_resume(self, timeout: float) -> dict:
        if not (self.out / "train_flat" / "checkpoints" / "latest.pt").is_file():
            return {"status": "skipped", "error": "no checkpoint from train_flat"}
        n = self.size["resumed_to"]
        rc, output = self.train("train_flat", n, timeout=timeout)
        result = self._train_result("train_flat", rc, output, n)
        result["resumed"] = "resumed from" in output
        if result["status"] == "passed" and not result["resumed"]:
            result.update(status="failed", error="the run did not resume from its checkpoint")
        return result

    def stage_torchrun(self, timeout: float) -> dict:
        n = self.size["torchrun_iterations"]
        launcher = self.python("-m", "torch.distributed.run", "--standalone",
                               "--nproc_per_node=1")
        rc, output = self.train("torchrun", n, launcher=launcher, timeout=timeout)
        result = self._train_result("torchrun", rc, output, n)
        result["backend"] = "gloo" if self.dry else "nccl"
        return result

    # ------------------------------------------------------------------ all
    def main(self) -> int:
        self.say(f"gpu_check{' --dry-run' if self.dry else ''}: results in {self.out}")
        plan = [("host", False, self.stage_host, 120),
                ("package", False, self.stage_package, 180)]
        for name, needs_gpu, fn, cap in plan:
            self.stage(name, needs_gpu, fn, cap)
            if self.stages[-1]["status"] != "passed":
                return self.finish(fatal=True)
        for name, fn, cap in (
                ("cuda_tests", self.stage_cuda_tests, 300),
                ("sync", self.stage_sync, 180),
                ("benchmark", self.stage_benchmark, 240),
                ("train_flat", self.stage_train("train_flat", []), 150),
                ("train_rough", self.stage_train("train_rough", ROUGH), 180),
                ("resume", self.stage_resume, 120),
                ("torchrun", self.stage_torchrun, 150)):
            self.stage(name, True, fn, cap)
        return self.finish()

    def finish(self, fatal: bool = False) -> int:
        ok = {"passed", "needs_gpu"} if self.dry else {"passed"}
        passed = not fatal and all(s["status"] in ok for s in self.stages)
        needs_gpu = [s["name"] for s in self.stages if s["needs_gpu"]]
        report = {"dry_run": self.dry, "passed": passed, "out": str(self.out),
                  "seconds": round(time.monotonic() - self.start, 1),
                  "date": dt.datetime.now().isoformat(timespec="seconds"),
                  "machine": platform.node(), "host": self.host, "stages": self.stages,
                  "needs_gpu": needs_gpu}
        path = self.out / "gpu_check.json"
        path.write_text(json.dumps(report, indent=2) + "\n")
        self.say(f"\n{'stage':<12} {'status':<10} {'s':>6}  needs a GPU")
        for s in self.stages:
            self.say(f"{s['name']:<12} {s['status']:<10} {s['seconds']:>6.0f}  "
                     f"{'yes' if s['needs_gpu'] else 'no'}")
        if self.dry:
            self.say(f"dry run on the CPU: {', '.join(needs_gpu)} ran CPU stand-ins; their "
                     "real check needs a CUDA GPU (python scripts/gpu_check.py)")
        self.say(f"{'passed' if passed else 'FAILED'}: {path} and {self.log.name}")
        self.log.close()
        if fatal:
            return 2
        return 0 if passed else 1


def _last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("error:", "Error", "RuntimeError"))
              or "Error:" in line]
    return (errors or lines or ["no output"])[-1][:400]


# ---------------------------------------------------------------------- workers
def worker_host() -> None:
    """One JSON line: the software and the GPU this process sees."""
    import torch

    info: dict = {"python": platform.python_version(), "torch": torch.__version__,
                  "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    if info["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gb=round(props.total_memory / 2**30, 1),
                    capability=f"{props.major}.{props.minor}",
                    gpus=torch.cuda.device_count())
    try:
        import mujoco
        import mujoco_warp
        import warp as wp

        wp.config.quiet = True
        wp.init()
        info.update(mujoco=mujoco.__version__, warp=wp.__version__,
                    mujoco_warp=getattr(mujoco_warp, "__version__", None),
                    warp_cuda_driver=".".join(map(str, wp.get_cuda_driver_version() or ()))
                    or None, warp_cuda_toolkit=".".join(map(str, wp.get_cuda_toolkit_version()
                                                           or ())) or None)
        if info["cuda_available"]:
            device = wp.get_device("cuda:0")
            info.update(conditional_graphs=wp.is_conditional_graph_supported(),
                        mempool=wp.is_mempool_supported(device))
    except ImportError as e:
        info["import_error"] = str(e)
    print(json.dumps(info))


def worker_sync(device: str, num_envs: int, small: bool = False,
                configs: Collection[str] = ("flat", "rough_robust")) -> None:
    """One JSON line: host reads (CPU) or synchronizations (CUDA) of masked env steps and of
    a rollout, flat and rough with robust randomization, and where in the code each was."""
    import traceback
    import warnings

    import torch

    from locomotion.config import load_config
    from locomotion.envs.host_reads import HostReads, code_site
    from locomotion.rl.runner import Runner
    from locomotion.tasks import make_env

    cuda = device.startswith("cuda")

    def measure(fn, sites: Counter[str]) -> int:
        """Host reads (CPU) or CUDA synchronizations while ``fn`` runs, tallied by code
        site into ``sites``."""
        if not cuda:
            with HostReads() as reads:
                fn()
            sites.update(reads.where)
            return reads.count
        torch.cuda.synchronize()
        count = 0

        def record(message, *args, **kwargs) -> None:
            nonlocal count
            if "called a synchronizing CUDA operation" in str(message):
                count += 1
                sites[code_site(traceback.extract_stack()[:-1])] += 1

        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record
            torch.cuda.set_sync_debug_mode("warn")
            try:
                fn()
            finally:
                torch.cuda.set_sync_debug_mode(0)
        return count

    out = {}
    for name, extra in {"flat": [], "rough_robust": ROUGH}.items():
        if name not in configs:
            continue
        sites: Counter[str] = Counter()
        cfg = load_config("train", ["sim=warp", f"device={device}", "step_mode=masked",
                                    f"num_envs={num_envs}", "reset=sync", "algo.num_steps=16",
                                    "task.episode_length_s=0.3", "logging.tensorboard=false",
                                    *(SMALL_LEARNER if small else []), *extra])
        env = make_env(cfg)
        runner = Runner(env, cfg)
        runner.start()
        runner.train_iteration()  # graph captured, every env reset once
        runner.storage.clear()
        actions = torch.zeros(env.num_envs, env.num_actions, device=env.device)
        env_reads = measure(lambda env=env, actions=actions: [env.step(actions)
                                                              for _ in range(8)], sites)
        rollout = measure(runner._collect, sites)
        out[name] = {"env_step_reads": env_reads / 8,
                     "rollout_reads_per_step": rollout / runner.num_steps,
                     "rollout_reads": rollout, "what": "syncs" if cuda else "host reads",
                     "where": dict(sites)}
        env.close()
    print(json.dumps(out))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="run every stage on the CPU (Warp's CPU device, tiny sizes)")
    parser.add_argument("--out", help="output folder (default runs/gpu_check/<date>)")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help="stop starting stages after this many seconds (default 480)")
    parser.add_argument("--no-install", action="store_true",
                        help="fail instead of installing the checkout when it is not installed")
    parser.add_argument("--worker", choices=("host", "sync"), help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    parser.add_argument("--num-envs", type=int, default=4096, help=argparse.SUPPRESS)
    parser.add_argument("--small", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--configs", default="flat,rough_robust", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "host":
        worker_host()
        return 0
    if args.worker == "sync":
        worker_sync(args.device, args.num_envs, args.small, args.configs.split(","))
        return 0
    return Check(args).main()


if __name__ == "__main__":
    sys.exit(main())
