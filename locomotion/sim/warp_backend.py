"""MuJoCo Warp: N worlds in one batched ``mujoco_warp`` Data, on a GPU or Warp's CPU device.

State, controls and sensors are zero-copy torch views of the Warp arrays, so the env reads
and resets worlds with torch ops on the device. The physics substeps of a control step are
captured once into a Warp graph and replayed: a CUDA graph on a GPU; on Warp's CPU device
(tests) the replay skips mujoco_warp's Python launch overhead, most of a CPU step. Warp
launches on its own device stream, which is blocking, so it stays ordered with torch work
on torch's default stream. Warp computes in float32: states agree with native MuJoCo
(float64) to a tolerance, not bit for bit.

Contacts and constraint rows live in fixed buffers sized at construction. mujoco_warp
flags a world that ran out of room in ``Data.overflow`` (sticky until ``reset_data``,
which this backend never calls); ``check_overflow`` turns that into ``SimOverflowError``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator

import mujoco
import mujoco_warp as mjw
import torch
import warp as wp

# Budget per world = HEADROOM x the most contacts / constraint rows one world needed in the
# probe drops (``probe_contacts``); the contact buffer is shared by all worlds, so the
# average world needs far less and a few fallen robots fit.
HEADROOM = 2.0
# MuJoCo's mjMAXVAL: native MuJoCo's instability guard resets a world whose state passes it.
MAXVAL = 1e10
# Capacity overflows: mujoco_warp also sets ITERATIONS / LS_ITERATIONS when the solver stops
# at its iteration limit, which the training solver profile does on purpose.
_CAPACITY = mjw.OverflowType.ALL & ~(mjw.OverflowType.ITERATIONS
                                     | mjw.OverflowType.LS_ITERATIONS)
_REMEDY = {mjw.OverflowType.NEFC: "increase sim.njmax",
           mjw.OverflowType.NJMAX_NNZ: "increase sim.njmax",
           mjw.OverflowType.BROADPHASE: "increase sim.nconmax",
           mjw.OverflowType.NARROWPHASE: "increase sim.nconmax",
           mjw.OverflowType.CCD: "increase sim.nconmax"}
# Base orientations (w, x, y, z) of the probe drops: upright, on its side, upside down, nose down.
_PROBE_QUATS = ((1.0, 0.0, 0.0, 0.0), (0.7071068, 0.7071068, 0.0, 0.0),
                (0.0, 1.0, 0.0, 0.0), (0.7071068, 0.0, 0.7071068, 0.0))


class SimOverflowError(RuntimeError):
    """Some world needed more contacts or constraint rows than the buffers hold."""


def probe_contacts(model: mujoco.MjModel, seconds: float = 1.0) -> tuple[int, int]:
    """Most contacts and constraint rows one world had in plain-MuJoCo drops of ``model``.

    The model falls from ``qpos0`` holding zero controls, its free base (if any) upright,
    on its side, upside down and nose down: standing and lying robots on flat ground.
    """
    data = mujoco.MjData(model)
    free = model.njnt > 0 and model.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE
    ncon = nefc = 0
    for quat in _PROBE_QUATS if free else _PROBE_QUATS[:1]:
        mujoco.mj_resetData(model, data)
        if free:
            adr = model.jnt_qposadr[0]
            data.qpos[adr + 3:adr + 7] = quat
        for _ in range(math.ceil(seconds / model.opt.timestep)):
            mujoco.mj_step(model, data)
            ncon, nefc = max(ncon, data.ncon), max(nefc, data.nefc)
    return ncon, nefc


def per_world_fields() -> list[str]:
    """Model fields mujoco_warp can hold per world (a leading "*" dimension in its specs)."""
    return sorted(f.name for f in dataclasses.fields(mjw.Model)
                  if getattr(f.type, "shape", ("",))[:1] == ("*",))


class WarpBackend:
    """N worlds of one MuJoCo model stepped together by mujoco_warp."""

    def __init__(self, model: mujoco.MjModel, num_envs: int, device: str | torch.device = "cpu",
                 nconmax: int | None = None, njmax: int | None = None, graph: bool = True,
                 overflow_check_every: int = 50):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        wp.init()
        self.model = model
        self.num_envs = num_envs
        self.timestep = float(model.opt.timestep)
        self.wp_device = wp.device_from_torch(torch.device(device))
        self.device = torch.device(wp.device_to_torch(self.wp_device))
        if nconmax is None or njmax is None:
            ncon, nefc = probe_contacts(model)
            nconmax = max(1, math.ceil(HEADROOM * ncon)) if nconmax is None else nconmax
            njmax = max(1, math.ceil(HEADROOM * nefc)) if njmax is None else njmax
        self.nconmax, self.njmax = int(nconmax), int(njmax)
        # On CUDA the overflow flags cost a host sync, so they are read every few steps
        # (they are sticky, so no overflow is missed, only reported up to that many steps
        # late); on Warp's CPU device reading them is free and happens every step.
        self.overflow_check_every = 1 if self.wp_device.is_cpu else int(overflow_check_every)
        self.use_graph = bool(graph)

        data = mujoco.MjData(model)
        mujoco.mj_forward(model, data)
        with wp.ScopedDevice(self.wp_device):
            self._m = mjw.put_model(model)
            self._m.opt.warn_overflow = 0  # reported by check_overflow, not printed per world
            # make_data, not put_data: qpos0 may hold more contacts than a tiny budget
            self._d = mjw.make_data(model, nworld=num_envs, nconmax=self.nconmax,
                                    njmax=self.njmax)
        d = self._d
        self._t = {name: wp.to_torch(getattr(d, name)) for name in (
            "time", "qpos", "qvel", "act", "ctrl", "qacc_warmstart", "xfrc_applied", "overflow")}
        self._diverged = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        self._params: dict[str, torch.Tensor] = {}
        self._graph: wp.Graph | None = None  # of one control step; dropped when stale
        self._steps = 0
        self._set_substeps(1)
        self._sub_t[:, 0] = torch.as_tensor(data.sensordata)  # native's first sensors too

    # ------------------------------------------------------------------ state views
    @property
    def qpos(self) -> torch.Tensor:
        return self._t["qpos"]

    @property
    def qvel(self) -> torch.Tensor:
        return self._t["qvel"]

    @property
    def sensordata(self) -> torch.Tensor:
        return self._sub_t[:, -1]

    @property
    def substep_sensordata(self) -> torch.Tensor:
        return self._sub_t

    @property
    def diverged(self) -> torch.Tensor:
        return self._diverged

    @property
    def xfrc_applied(self) -> torch.Tensor:
        """Wrench held on every body of every world [N, nbody, 6] (see ``apply_force``)."""
        return self._t["xfrc_applied"]

    # ------------------------------------------------------------------ stepping
    def _set_substeps(self, nsubsteps: int) -> None:
        """(Re)allocate the per-substep sensor buffer, stored [substeps, N, nsensordata]."""
        self._sub = wp.zeros((nsubsteps, self.num_envs, self.model.nsensordata),
                             dtype=wp.float32, device=self.wp_device)
        self._sub_t = wp.to_torch(self._sub).permute(1, 0, 2)
        self._graph = None

    def _substeps(self, nsubsteps: int) -> None:
        for k in range(nsubsteps):
            mjw.step(self._m, self._d)
            wp.copy(self._sub[k], self._d.sensordata)

    def step(self, ctrl: torch.Tensor, nsubsteps: int, count: int | None = None) -> None:
        """Advance every world by ``nsubsteps`` physics steps holding ``ctrl`` [N, nu].

        ``count`` is accepted for the interface; one graph steps all worlds regardless.
        """
        if self._sub.shape[0] != nsubsteps:
            self._set_substeps(nsubsteps)
        self._t["ctrl"].copy_(torch.as_tensor(ctrl))
        with wp.ScopedDevice(self.wp_device):
            if not self.use_graph:
                self._substeps(nsubsteps)
            else:
                if self._graph is None:
                    with wp.ScopedCapture() as capture:
                        self._substeps(nsubsteps)
                    self._graph = capture.graph
                wp.capture_launch(self._graph)
        ok = (self.qpos.abs() < MAXVAL).all(1) & (self.qvel.abs() < MAXVAL).all(1)  # NaN fails
        torch.logical_not(ok, out=self._diverged)
        self._steps += 1
        if self._steps % self.overflow_check_every == 0:
            self.check_overflow()

    def check_overflow(self) -> None:
        """Raise ``SimOverflowError`` if any world has run out of contact/constraint room."""
        flags = self._t["overflow"] & int(_CAPACITY)
        worlds = flags.nonzero().squeeze(1)
        if len(worlds) == 0:
            return
        bits = functools.reduce(operator.or_, flags[worlds].tolist())
        kinds = [t for t in mjw.OverflowType if t and not t & (t - 1) and bits & t]
        remedies = sorted({_REMEDY.get(t, f"see mujoco_warp.OverflowType.{t.name}")
                           for t in kinds})
        raise SimOverflowError(
            f"mujoco_warp buffer overflow ({'|'.join(t.name for t in kinds)}) in {len(worlds)} "
            f"of {self.num_envs} worlds (first: {worlds[:5].tolist()}) with "
            f"nconmax={self.nconmax}, njmax={self.njmax}: physics since then is wrong; "
            f"{', '.join(remedies)}")

    # ------------------------------------------------------------------ resets and inputs
    def reset(self, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Put worlds ``env_ids`` in the given state at time 0, with no held wrench."""
        ids = torch.as_tensor(env_ids, device=self.device)
        t = self._t
        t["qpos"][ids] = torch.as_tensor(qpos, device=self.device, dtype=torch.float32)
        t["qvel"][ids] = torch.as_tensor(qvel, device=self.device, dtype=torch.float32)
        for name in ("time", "act", "qacc_warmstart", "xfrc_applied"):
            t[name][ids] = 0.0
        self._diverged[ids] = False

    def apply_force(self, env_ids: torch.Tensor, body: int | str,
                    wrench: torch.Tensor) -> None:
        """Hold ``wrench`` [len(ids), 6] (world-frame force, torque at the body's COM) on
        ``body`` (id or name) of worlds ``env_ids`` until changed or the world is reset.

        A push is a wrench for some steps, then zeros.
        """
        bid = self.model.body(body).id
        ids = torch.as_tensor(env_ids, device=self.device)
        self.xfrc_applied[ids, bid] = torch.as_tensor(wrench, device=self.device,
                                                      dtype=torch.float32)

    def set_params(self, env_ids: torch.Tensor, field: str, values: torch.Tensor) -> None:
        """Set model field ``field`` of worlds ``env_ids`` (values [len(ids), *field shape])."""
        view = self._param(field)
        ids = torch.as_tensor(env_ids, device=self.device)
        vals = torch.as_tensor(values, device=self.device, dtype=view.dtype)
        view[ids] = vals.reshape(len(ids), *view.shape[1:])

    def _param(self, field: str) -> torch.Tensor:
        """Torch view of model field ``field`` with one row per world (made on first use)."""
        if field not in self._params:
            valid = per_world_fields()
            if field not in valid:
                raise ValueError(f"{field!r} is not a per-world model field of mujoco_warp; "
                                 f"valid: {valid}")
            shared = getattr(self._m, field)
            own = wp.empty((self.num_envs, *shared.shape[1:]), dtype=shared.dtype,
                           device=self.wp_device)
            view = wp.to_torch(own)
            view.copy_(wp.to_torch(shared).expand_as(view))
            setattr(self._m, field, own)
            self._params[field] = view
            self._graph = None  # it holds the old array
        return self._params[field]

    # ------------------------------------------------------------------ checkpoints
    _STATE = ("time", "qpos", "qvel", "act", "ctrl", "qacc_warmstart", "xfrc_applied")

    def state_dict(self) -> dict:
        """Physics state of every world (CPU). Per-world model fields are set again on load
        by whoever set them (the env's randomizer), as on the native backend."""
        def copy(t: torch.Tensor) -> torch.Tensor:
            return t.to("cpu", copy=True)

        return {"state": {k: copy(self._t[k]) for k in self._STATE},
                "sensordata": copy(self._sub_t)}

    def load_state_dict(self, state: dict) -> None:
        if state["state"]["qpos"].shape != self.qpos.shape:
            raise ValueError(f"physics state for qpos {tuple(state['state']['qpos'].shape)} does "
                             f"not fit this backend's {tuple(self.qpos.shape)}")
        for k, v in state["state"].items():
            self._t[k].copy_(v)
        sens = state["sensordata"]
        if sens.shape[1] != self._sub.shape[0]:
            self._set_substeps(sens.shape[1])
        self._sub_t.copy_(sens)

    def close(self) -> None:
        self._graph = None
