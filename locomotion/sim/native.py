"""Native MuJoCo on all CPU cores: ``mujoco.rollout`` over N worlds with a persistent pool.

The full physics state of every world lives in one float64 array [N, nstate]; torch
tensors are zero-copy views of it. A step is one ``rollout`` call of ``nsubsteps`` physics
steps for all worlds, spread over the pool's threads (one ``MjData`` per thread). Worlds
with equal parameters share one ``MjModel``: a world's model is read at every physics step,
and a copy per world does not stay in the core's cache the way a few shared ones do.
Wrenches held on bodies (``apply_force``) ride along as controls: once the first is applied,
every rollout also takes each world's ``xfrc_applied``.

MuJoCo's warnings during a step ("Nan, Inf or huge value in QACC ...", a full constraint
buffer) are counted by kind in ``warnings`` instead of being printed one by one to the
terminal and appended to ``MUJOCO_LOG.TXT``: a diverging batch raises thousands per second.
"""

from __future__ import annotations

import contextlib
import copy
import re
import time
from collections import Counter

import mujoco
import numpy as np
import torch
from mujoco import rollout

from locomotion.sim.threads import usable_cores

_FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS
_CTRL = mujoco.mjtState.mjSTATE_CTRL.value
_CTRL_XFRC = _CTRL | mujoco.mjtState.mjSTATE_XFRC_APPLIED.value


def warning_kind(message: str) -> str:
    """What a MuJoCo warning says, without the DOF, the time and the advice:
    "Nan, Inf or huge value in QACC at DOF 6. The simulation is unstable. Time = 0.0050." is
    "Nan, Inf or huge value in QACC"."""
    return re.split(r" at DOF | Time = |\. ", message.strip(), maxsplit=1)[0].rstrip(".")


@contextlib.contextmanager
def _warnings_to(handler):
    """Route MuJoCo's warnings to ``handler`` (a callable of the message) for a while."""
    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(handler)
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(previous)


def state_offsets(model: mujoco.MjModel) -> dict[str, int]:
    """Offsets of time, qpos, qvel and act in a full-physics state vector."""
    t = mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_TIME)
    q = mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_QPOS)
    v = mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_QVEL)
    return {"time": 0, "qpos": t, "qvel": t + q, "act": t + q + v}


class NativeBackend:
    """N copies of a MuJoCo model stepped by ``mujoco.rollout`` threads."""

    def __init__(self, model: mujoco.MjModel, num_envs: int, nthread: int | None = None):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.model = model
        self.num_envs = num_envs
        self.device = torch.device("cpu")
        self.timestep = float(model.opt.timestep)
        self.nthread = nthread or usable_cores()
        self._pool = rollout.Rollout(nthread=self.nthread if self.nthread > 1 else 0)
        self._probe = rollout.Rollout(nthread=0)  # time_step: in the calling thread
        self._datas = [mujoco.MjData(model) for _ in range(max(self.nthread, 1))]
        self.models: list[mujoco.MjModel] = [model] * num_envs
        # every world's value of each field set so far, and the model of each parameter set
        self._params: dict[str, np.ndarray] = {}
        self._by_params: dict[bytes, mujoco.MjModel] = {b"": model}

        nstate = mujoco.mj_stateSize(model, _FULL)
        off = state_offsets(model)
        data = mujoco.MjData(model)
        mujoco.mj_forward(model, data)
        init = np.empty(nstate)
        mujoco.mj_getState(model, data, init, _FULL)
        self._state = np.tile(init, (num_envs, 1))
        self._time = self._state[:, 0]
        self._qpos = self._state[:, off["qpos"]:off["qpos"] + model.nq]
        self._qvel = self._state[:, off["qvel"]:off["qvel"] + model.nv]
        self._sensor = np.tile(data.sensordata, (num_envs, 1, 1))
        self._out = np.empty((num_envs, 1, nstate))
        self._control_spec = _CTRL
        self._ctrl = np.zeros((num_envs, 1, model.nu))
        self._xfrc = np.zeros((num_envs, model.nbody, 6))
        self._diverged = np.zeros(num_envs, dtype=bool)
        self._warmstart = np.zeros((num_envs, model.nv))
        self._views = {
            name: torch.from_numpy(arr)
            for name, arr in (("qpos", self._qpos), ("qvel", self._qvel),
                              ("diverged", self._diverged))
        }
        self._sens_t = torch.from_numpy(self._sensor)
        self.warnings: Counter[str] = Counter()  # MuJoCo's warnings by kind, never printed

    def _count_warning(self, message: str) -> None:
        # called by MuJoCo from the rollout threads (holding the GIL)
        self.warnings[warning_kind(message)] += 1

    @property
    def state(self) -> np.ndarray:
        """Full-physics state of every world [N, nstate] (MuJoCo's mjSTATE_FULLPHYSICS)."""
        return self._state

    @property
    def qpos(self) -> torch.Tensor:
        return self._views["qpos"]

    @property
    def qvel(self) -> torch.Tensor:
        return self._views["qvel"]

    @property
    def sensordata(self) -> torch.Tensor:
        return self._sens_t[:, -1]

    @property
    def substep_sensordata(self) -> torch.Tensor:
        return self._sens_t

    @property
    def diverged(self) -> torch.Tensor:
        return self._views["diverged"]

    def _ensure_buffers(self, nsubsteps: int) -> None:
        if self._out.shape[1] != nsubsteps:
            n, nstate = self._state.shape
            self._out = np.empty((n, nsubsteps, nstate))
            self._ctrl = np.zeros((n, nsubsteps, mujoco.mj_stateSize(self.model,
                                                                     self._control_spec)))
            # Worlds a partial step skips must keep valid sensors, never uninitialized memory.
            self._sensor = np.repeat(self._sensor[:, -1:], nsubsteps, axis=1)
            self._sens_t = torch.from_numpy(self._sensor)

    def step(self, ctrl: torch.Tensor | np.ndarray, nsubsteps: int, count: int | None = None,
             ) -> None:
        """Advance worlds by ``nsubsteps`` physics steps holding ``ctrl`` [N, nu].

        ``count`` steps only the first ``count`` worlds (the rest keep their state), which
        the staggered warm-up uses to skip groups that have not started yet.
        """
        self._ensure_buffers(nsubsteps)
        n = self.num_envs if count is None else count
        nu = self.model.nu
        self._ctrl[:n, :, :nu] = np.asarray(ctrl)[:n, None, :]
        if self._control_spec == _CTRL_XFRC:
            self._ctrl[:n, :, nu:] = self._xfrc[:n].reshape(n, 1, -1)
        state = self._state[:n]
        expected = state[:, 0] + nsubsteps * self.timestep
        # An explicit (zero) warm start: otherwise each thread's MjData carries the solver
        # warm start of whichever world it stepped last, and results depend on scheduling.
        with _warnings_to(self._count_warning):  # count, do not print
            self._pool.rollout(self.models[:n], self._datas, state, self._ctrl[:n],
                               control_spec=self._control_spec, skip_checks=True,
                               nstep=nsubsteps, initial_warmstart=self._warmstart[:n],
                               state=self._out[:n], sensordata=self._sensor[:n])
        state[:] = self._out[:n, -1]
        # MuJoCo resets a world whose state goes bad (time restarts at 0); catch that and
        # any non-finite value the guard let through (a NaN or inf makes its row's sum
        # non-finite: one pass, a fifth of the time of an elementwise check at N = 1024).
        self._diverged[:n] = (state[:, 0] < expected - 0.5 * self.timestep) | ~np.isfinite(
            np.einsum("ij->i", state))

    def time_step(self, env_ids: torch.Tensor | np.ndarray, nsubsteps: int) -> float:
        """Seconds one thread takes to step copies of worlds ``env_ids`` by ``nsubsteps``
        physics steps, holding the controls of their last step (0 if never set); the
        worlds themselves keep their state. The batched ``step`` times all worlds
        together; this is what a few of them cost (``locomotion/multitask/cost.py``). One
        thread, so the pool's scheduling does not enter the time; the probe's warnings
        are dropped, not counted."""
        ids = np.asarray(env_ids).reshape(-1)
        k, nstate = len(ids), self._state.shape[1]
        ctrl = np.repeat(self._ctrl[ids, :1], nsubsteps, axis=1)
        state, warmstart = self._state[ids], np.zeros((k, self.model.nv))
        out = np.empty((k, nsubsteps, nstate))
        sensors = np.empty((k, nsubsteps, self._sensor.shape[2]))
        models = [self.models[i] for i in ids.tolist()]
        with _warnings_to(lambda _message: None):
            start = time.perf_counter()
            self._probe.rollout(models, self._datas[:1], state, ctrl,
                                control_spec=self._control_spec, skip_checks=True,
                                nstep=nsubsteps, initial_warmstart=warmstart, state=out,
                                sensordata=sensors)
            return time.perf_counter() - start

    def reset(self, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Put worlds ``env_ids`` in the given state at time 0."""
        ids = np.asarray(env_ids)
        self._state[ids] = 0.0
        self._qpos[ids] = np.asarray(qpos, dtype=np.float64)
        self._qvel[ids] = np.asarray(qvel, dtype=np.float64)
        self._xfrc[ids] = 0.0
        self._diverged[ids] = False

    def reset_where(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """``reset`` of the worlds where ``mask`` [N] is set, to those rows of ``qpos`` and
        ``qvel`` [N, ...] (the masked interface of the Warp backend; here by index)."""
        ids = torch.as_tensor(mask).nonzero().squeeze(1)
        if len(ids):
            self.reset(ids, qpos[ids], qvel[ids])

    def apply_force_where(self, mask: torch.Tensor, body: int | str,
                          wrench: torch.Tensor) -> None:
        """``apply_force`` on the worlds where ``mask`` [N] is set, from rows of ``wrench``."""
        ids = torch.as_tensor(mask).nonzero().squeeze(1)
        if len(ids):
            self.apply_force(ids, body, wrench[ids])

    def apply_force(self, env_ids: torch.Tensor, body: int | str, wrench: torch.Tensor) -> None:
        """Hold ``wrench`` [len(ids), 6] (world-frame force, torque at the body's COM) on
        ``body`` (id or name) of worlds ``env_ids`` until changed or the world is reset.

        A push is a wrench for some steps, then zeros.
        """
        self._xfrc[np.asarray(env_ids), self.model.body(body).id] = np.asarray(
            wrench, dtype=np.float64)
        self._take_wrenches()

    def _take_wrenches(self) -> None:
        """From now on pass every world's held wrenches to the rollouts as controls."""
        if self._control_spec != _CTRL_XFRC:
            self._control_spec = _CTRL_XFRC
            n, nsubsteps = self._out.shape[:2]
            self._ctrl = np.zeros((n, nsubsteps, mujoco.mj_stateSize(self.model, _CTRL_XFRC)))

    def set_params(self, env_ids: torch.Tensor, field: str, values: torch.Tensor) -> None:
        """Set model field ``field`` of worlds ``env_ids`` (values [len(ids), *field shape]).

        Each world then uses the model of its whole parameter set, shared with every world
        whose parameters are equal (a new copy only for a set no world had).
        """
        if not hasattr(self.model, field):
            raise ValueError(f"MjModel has no field {field!r}")
        ids = np.asarray(env_ids).reshape(-1)
        if field not in self._params:
            nominal = np.array(getattr(self.model, field), dtype=np.float64)
            self._params[field] = np.repeat(nominal[None], self.num_envs, axis=0)
            # a model made before this field was set holds its nominal value
            self._by_params = {key + nominal.tobytes(): m for key, m in self._by_params.items()}
        self._params[field][ids] = np.asarray(values, dtype=np.float64).reshape(
            len(ids), *self._params[field].shape[1:])
        rows = np.concatenate([p[ids].reshape(len(ids), -1) for p in self._params.values()],
                              axis=1)
        _, first, group = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        group = group.reshape(-1)
        members = np.split(ids[np.argsort(group, kind="stable")],
                           np.cumsum(np.bincount(group))[:-1])
        for row, worlds in zip(first, members, strict=True):
            key = rows[row].tobytes()
            if key not in self._by_params:
                model = copy.copy(self.model)
                for f, p in self._params.items():
                    getattr(model, f)[:] = p[ids[row]]
                self._by_params[key] = model
            for i in worlds.tolist():
                self.models[i] = self._by_params[key]
        used = set(map(id, self.models)) | {id(self.model)}
        self._by_params = {k: m for k, m in self._by_params.items() if id(m) in used}

    def state_dict(self) -> dict:
        """Physics state of every world, as float64 tensors (checkpoints hold tensors only).
        Per-world model fields are not included: whoever set them (the env's randomizer)
        keeps them and sets them again on load, so a checkpoint never holds N copies of the
        model."""
        return {k: torch.from_numpy(v.copy()) for k, v in
                (("state", self._state), ("sensordata", self._sensor), ("xfrc", self._xfrc))}

    def load_state_dict(self, state: dict) -> None:
        """Restore ``state_dict()``'s tensors (numpy arrays are accepted too), or the Warp
        backend's (a GPU run continued on the CPU): time, qpos, qvel, act, held wrenches
        and sensors; the rest of the state (mocap, user data) keeps the model's."""
        if isinstance(state.get("state"), dict):
            state = self._from_warp(state)
        state = {k: np.asarray(v, dtype=np.float64) for k, v in state.items()}
        if state["state"].shape != self._state.shape:
            raise ValueError(f"physics state of shape {state['state'].shape} does not fit "
                             f"this backend's {self._state.shape}")
        self._state[:] = state["state"]
        self._ensure_buffers(state["sensordata"].shape[1])
        self._sensor[:] = state["sensordata"]
        self._xfrc[:] = state["xfrc"]
        if self._xfrc.any():
            self._take_wrenches()

    def _from_warp(self, state: dict) -> dict:
        """A Warp backend's ``state_dict`` in this backend's layout."""
        w = state["state"]
        if tuple(w["qpos"].shape) != tuple(self._qpos.shape):
            raise ValueError(f"physics state for qpos {tuple(w['qpos'].shape)} does not fit "
                             f"this backend's {self._qpos.shape}")
        full = torch.from_numpy(self._state.copy())
        off, m = state_offsets(self.model), self.model
        full[:, 0] = w["time"].double()
        full[:, off["qpos"]:off["qpos"] + m.nq] = w["qpos"].double()
        full[:, off["qvel"]:off["qvel"] + m.nv] = w["qvel"].double()
        full[:, off["act"]:off["act"] + m.na] = w["act"].double()
        return {"state": full, "sensordata": state["sensordata"].double(),
                "xfrc": w["xfrc_applied"].double()}

    def close(self) -> None:
        self._pool.close()
        self._probe.close()
