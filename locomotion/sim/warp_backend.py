"""MuJoCo Warp: N worlds in one batched ``mujoco_warp`` Data, on a GPU or Warp's CPU device.

State, controls and sensors are zero-copy torch views of the Warp arrays, so the env reads
and resets worlds with torch ops on the device. The physics substeps of a control step are
captured once into a Warp graph and replayed: a CUDA graph on a GPU; on Warp's CPU device
(tests) the replay skips mujoco_warp's Python launch overhead, most of a CPU step. On CUDA
Warp runs on its own stream, ordered against torch's current stream by events both ways
(no host wait). Warp computes in float32: states agree with native MuJoCo (float64) to a
tolerance, not bit for bit.

Contacts and constraint rows live in fixed buffers sized at construction (``budget``:
from drops of the robot, and on a terrain heightfield room for every geom of a tumbling
robot). mujoco_warp flags a world that ran out of room in ``Data.overflow``. A world that
overflowed a capacity (contacts, constraint rows) is reported in ``diverged`` until it is
reset, as a world whose state went non-finite is; other flags (heightfield contacts per
pair, EPA horizon, sensor buffers) leave the physics usable. Every flag is counted by kind
in ``warnings`` (on the device: reading the counts is the only host read) and cleared;
nothing raises.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import math

import mujoco
import mujoco_warp as mjw
import torch
import warp as wp

from locomotion.sim.backend import resolve_device
from locomotion.sim.native import state_offsets

log = logging.getLogger(__name__)

# Budget per world = HEADROOM x the most contacts / constraint rows one world needed in the
# probe drops (``probe_contacts``); the contact buffer is shared by all worlds, so the
# average world needs far less and a few fallen robots fit.
HEADROOM = 2.0
# MuJoCo's mjMAXVAL: native MuJoCo's instability guard resets a world whose state passes it.
MAXVAL = 1e10
# Contacts mujoco_warp keeps per geom-heightfield pair (its hfield collision writes 4).
HFIELD_CONTACTS_PER_PAIR = 4
_O = mjw.OverflowType
# Capacity overflows: contacts or constraint rows were dropped, so the world's physics is
# wrong until it is reset; it is reported as diverged.
CAPACITY = _O.NEFC | _O.NJMAX_NNZ | _O.BROADPHASE | _O.NARROWPHASE | _O.CCD | _O.NVMAX
# Not counted: the solver stopping at its iteration limit, which the training solver
# profile does on purpose.
_IGNORED = _O.ITERATIONS | _O.LS_ITERATIONS
# What each counted flag means, as its key in ``warnings`` (MuJoCo's warnings on native).
_KINDS = {
    _O.NEFC: "more constraint rows than sim.njmax (world reset as diverged; raise sim.njmax)",
    _O.NJMAX_NNZ: "constraint Jacobian over its non-zeros (world reset as diverged; raise "
                  "sim.njmax)",
    _O.BROADPHASE: "more contact candidates than sim.nconmax (world reset as diverged; raise "
                   "sim.nconmax)",
    _O.NARROWPHASE: "more contacts than sim.nconmax (world reset as diverged; raise "
                    "sim.nconmax)",
    _O.CCD: "more convex-collision contacts than sim.nconmax (world reset as diverged; raise "
            "sim.nconmax)",
    _O.NVMAX: "more active DOFs than nvmax (world reset as diverged)",
    _O.HFIELD: f"heightfield contacts over {mujoco.mjMAXCONPAIR} prisms per geom pair "
               "(nearest kept)",
    _O.CONTACT_MATCH: "contact sensor matches over the sensor's buffer",
    _O.EPA_HORIZON: "EPA horizon buffer full (a contact computed less exactly)",
    _O.TACTILE: "tactile sensor collision pairs over their buffer",
}
_KIND_BITS = [t for t in _O if t and not t & (t - 1) and not t & _IGNORED]
# Base orientations (w, x, y, z) of the probe drops: upright, on its side, upside down, nose down.
_PROBE_QUATS = ((1.0, 0.0, 0.0, 0.0), (0.7071068, 0.7071068, 0.0, 0.0),
                (0.0, 1.0, 0.0, 0.0), (0.7071068, 0.0, 0.7071068, 0.0))


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


def _rows_per_contact(condim: int, cone: int) -> int:
    """Constraint rows of one contact: pyramidal cones take 2 (condim - 1), elliptic condim."""
    if condim == 1:
        return 1
    return condim if cone == mujoco.mjtCone.mjCONE_ELLIPTIC else 2 * (condim - 1)


def tumble_budget(model: mujoco.MjModel) -> tuple[int, int]:
    """Contacts and constraint rows of a world in which every geom that can touch a
    heightfield does, with mujoco_warp's most contacts per geom-heightfield pair: a robot
    tumbling down stairs. (0, 0) for a model without heightfields (the probe drops cover a
    plane). The rows add every joint limit, dof friction and equality constraint at once."""
    fields = [g for g in range(model.ngeom) if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_HFIELD]
    ncon = nefc = 0
    for h in fields:
        for g in range(model.ngeom):
            if g == h or model.geom_bodyid[g] == model.geom_bodyid[h]:
                continue
            if not (model.geom_contype[g] & model.geom_conaffinity[h]
                    or model.geom_contype[h] & model.geom_conaffinity[g]):
                continue
            condim = max(int(model.geom_condim[g]), int(model.geom_condim[h]))
            ncon += HFIELD_CONTACTS_PER_PAIR
            nefc += HFIELD_CONTACTS_PER_PAIR * _rows_per_contact(condim, model.opt.cone)
    if ncon:
        nefc += int(model.jnt_limited.sum()) + int((model.dof_frictionloss > 0).sum()) \
            + 6 * model.neq + int(model.tendon_limited.sum())
    return ncon, nefc


def budget(model: mujoco.MjModel) -> tuple[int, int]:
    """Default ``(nconmax, njmax)`` per world: ``HEADROOM`` x the most the probe drops
    needed (``probe_contacts``), and on a heightfield at least ``tumble_budget``."""
    ncon, nefc = probe_contacts(model)
    tcon, tefc = tumble_budget(model)
    return (max(1, math.ceil(HEADROOM * ncon), tcon), max(1, math.ceil(HEADROOM * nefc), tefc))


def warp_device(device: str | torch.device) -> tuple[torch.device, wp.Device]:
    """The torch device (``cuda`` with the current device's index filled in) and the Warp
    device of ``device``; ``wp.device_from_torch`` refuses a ``cuda`` without an index."""
    dev = resolve_device(device)
    return dev, wp.device_from_torch(dev)


def graph_conditional(device, graph: bool) -> bool:
    """Whether mujoco_warp's solver may end its iterations through a conditional node:
    inside a captured CUDA graph on a driver that has them. On CUDA without a graph the
    loop would read its condition back to the host every solver iteration; Warp's CPU
    device keeps mujoco_warp's default (there the read costs nothing)."""
    if not device.is_cuda:
        return True
    return graph and wp.is_conditional_graph_supported()


def cuda_graph_problem(device) -> str | None:
    """Why a CUDA graph of mujoco_warp's step cannot be captured on Warp device ``device``
    (None when it can): the step allocates temporaries, which a capture takes from the
    device's memory pool."""
    if not wp.is_mempool_supported(device):
        return (f"{device} has no CUDA memory pool (driver {wp.get_cuda_driver_version()}), "
                "which capturing mujoco_warp's step needs")
    if not wp.is_mempool_enabled(device):
        wp.set_mempool_enabled(device, True)
    return None


def per_world_fields() -> list[str]:
    """Model fields mujoco_warp can hold per world (a leading "*" dimension in its specs)."""
    return sorted(f.name for f in dataclasses.fields(mjw.Model)
                  if getattr(f.type, "shape", ("",))[:1] == ("*",))


class WarpBackend:
    """N worlds of one MuJoCo model stepped together by mujoco_warp."""

    def __init__(self, model: mujoco.MjModel, num_envs: int, device: str | torch.device = "cpu",
                 nconmax: int | None = None, njmax: int | None = None, graph: bool = True):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        wp.init()
        self.model = model
        self.num_envs = num_envs
        self.timestep = float(model.opt.timestep)
        self.device, self.wp_device = warp_device(device)
        if nconmax is None or njmax is None:
            ncon, nefc = budget(model)
            nconmax = ncon if nconmax is None else nconmax
            njmax = nefc if njmax is None else njmax
        self.nconmax, self.njmax = int(nconmax), int(njmax)
        self.use_graph = bool(graph)
        cuda = self.wp_device.is_cuda
        if cuda and self.use_graph:
            problem = cuda_graph_problem(self.wp_device)
            if problem:
                log.warning("sim.graph: %s; stepping without a graph (slower)", problem)
                self.use_graph = False

        data = mujoco.MjData(model)
        mujoco.mj_forward(model, data)
        with wp.ScopedDevice(self.wp_device):
            self._m = mjw.put_model(model)
            self._m.opt.warn_overflow = 0  # counted in ``warnings``, not printed per world
            self._m.opt.graph_conditional = graph_conditional(self.wp_device, self.use_graph)
            # make_data, not put_data: qpos0 may hold more contacts than a tiny budget
            self._d = mjw.make_data(model, nworld=num_envs, nconmax=self.nconmax,
                                    njmax=self.njmax)
        d = self._d
        self._t = {name: wp.to_torch(getattr(d, name)) for name in (
            "time", "qpos", "qvel", "act", "ctrl", "qacc_warmstart", "xfrc_applied", "overflow")}
        dev = self.device
        self._diverged = torch.zeros(num_envs, dtype=torch.bool, device=dev)
        self._overflowed = torch.zeros(num_envs, dtype=torch.bool, device=dev)  # until reset
        self._kind_bits = torch.tensor([int(t) for t in _KIND_BITS], dtype=torch.int32,
                                       device=dev)
        self._kind_counts = torch.zeros(len(_KIND_BITS), dtype=torch.long, device=dev)
        self._params: dict[str, torch.Tensor] = {}
        self._graph: wp.Graph | None = None  # of one control step; dropped when stale
        self._stream = self.wp_device.stream if cuda else None
        self._torch_streams: dict[int, wp.Stream] = {}
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

    def _capture(self, nsubsteps: int) -> wp.Graph:
        """Capture the substeps of one control step into a graph.

        Python's garbage collector stays off during the capture: collecting a stale Warp
        graph (or its arrays) there would free memory inside the capture and corrupt it.
        """
        self._graph = None
        gc.collect()  # stale graphs go now, not during the capture
        enabled = gc.isenabled()
        gc.disable()
        try:
            with wp.ScopedCapture(device=self.wp_device, stream=self._stream) as capture:
                self._substeps(nsubsteps)
        finally:
            if enabled:
                gc.enable()
        return capture.graph

    def _torch_stream(self) -> wp.Stream:
        """torch's current stream on the device, as a Warp stream (cached by handle)."""
        stream = torch.cuda.current_stream(self.device)
        if stream.cuda_stream not in self._torch_streams:
            self._torch_streams[stream.cuda_stream] = wp.stream_from_torch(stream)
        return self._torch_streams[stream.cuda_stream]

    def step(self, ctrl: torch.Tensor, nsubsteps: int, count: int | None = None) -> None:
        """Advance every world by ``nsubsteps`` physics steps holding ``ctrl`` [N, nu].

        ``count`` is accepted for the interface; one graph steps all worlds regardless.
        Nothing here waits for the device.
        """
        if self._sub.shape[0] != nsubsteps:
            self._set_substeps(nsubsteps)
        self._t["ctrl"].copy_(ctrl)
        with wp.ScopedDevice(self.wp_device):
            if self._stream is not None:  # Warp's stream waits for torch's work, and back
                torch_stream = self._torch_stream()
                self._stream.wait_stream(torch_stream)
            if not self.use_graph:
                self._substeps(nsubsteps)  # on the device's Warp stream
            else:
                if self._graph is None:
                    self._graph = self._capture(nsubsteps)
                wp.capture_launch(self._graph, stream=self._stream)
            if self._stream is not None:
                torch_stream.wait_stream(self._stream)
        self._after_step()

    def _after_step(self) -> None:
        """Count and clear the overflow flags; a capacity overflow makes its world diverged
        until it is reset, as a state that is no longer finite does."""
        flags = self._t["overflow"]
        self._kind_counts += ((flags[:, None] & self._kind_bits) != 0).sum(0)
        self._overflowed |= (flags & int(CAPACITY)) != 0
        flags.zero_()
        ok = (self.qpos.abs() < MAXVAL).all(1) & (self.qvel.abs() < MAXVAL).all(1)  # NaN fails
        torch.logical_not(ok, out=self._diverged)
        self._diverged |= self._overflowed

    @property
    def warnings(self) -> dict[str, int]:
        """mujoco_warp's overflow flags since the backend was made, by kind: world-steps in
        which a world raised each (one host read; the solver's iteration limits are not
        counted)."""
        counts = self._kind_counts.tolist()
        return {f"mujoco_warp {t.name} overflow: {_KINDS.get(t, t.name)}": n
                for t, n in zip(_KIND_BITS, counts, strict=True) if n}

    # ------------------------------------------------------------------ resets and inputs
    def reset(self, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Put worlds ``env_ids`` in the given state at time 0, with no held wrench."""
        ids = torch.as_tensor(env_ids, device=self.device)
        t = self._t
        t["qpos"][ids] = torch.as_tensor(qpos, device=self.device, dtype=torch.float32)
        t["qvel"][ids] = torch.as_tensor(qvel, device=self.device, dtype=torch.float32)
        for name in ("time", "act", "qacc_warmstart", "xfrc_applied", "overflow"):
            t[name][ids] = 0
        self._diverged[ids] = False
        self._overflowed[ids] = False

    def reset_where(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """``reset`` of the worlds where ``mask`` [N] is set, to rows of ``qpos`` [N, nq] and
        ``qvel`` [N, nv]; the other rows are ignored (no host read)."""
        t, m = self._t, mask[:, None]
        t["qpos"].copy_(torch.where(m, qpos.to(torch.float32), t["qpos"]))
        t["qvel"].copy_(torch.where(m, qvel.to(torch.float32), t["qvel"]))
        for name in ("time", "act", "qacc_warmstart", "xfrc_applied", "overflow"):
            view = t[name]
            view.masked_fill_(mask.view(-1, *[1] * (view.dim() - 1)), 0)
        self._diverged.masked_fill_(mask, False)
        self._overflowed.masked_fill_(mask, False)

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

    def apply_force_where(self, mask: torch.Tensor, body: int | str,
                          wrench: torch.Tensor) -> None:
        """``apply_force`` on the worlds where ``mask`` [N] is set, from rows of ``wrench``
        [N, 6]; the other worlds keep theirs (no host read)."""
        view = self.xfrc_applied[:, self.model.body(body).id]
        view.copy_(torch.where(mask[:, None], wrench.to(view.dtype), view))

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
        """Restore ``state_dict()``'s tensors, or the native backend's (a CPU run continued
        on a GPU): time, qpos, qvel, act, held wrenches and sensors, no warm start."""
        if not isinstance(state["state"], dict):
            state = self._from_native(state)
        if state["state"]["qpos"].shape != self.qpos.shape:
            raise ValueError(f"physics state for qpos {tuple(state['state']['qpos'].shape)} does "
                             f"not fit this backend's {tuple(self.qpos.shape)}")
        for k, v in state["state"].items():
            self._t[k].copy_(v)
        sens = state["sensordata"]
        if sens.shape[1] != self._sub.shape[0]:
            self._set_substeps(sens.shape[1])
        self._sub_t.copy_(sens)

    def _from_native(self, state: dict) -> dict:
        """A native backend's ``state_dict`` (a full-physics state vector per world) in this
        backend's layout."""
        full = torch.as_tensor(state["state"])
        m, off = self.model, state_offsets(self.model)
        nstate = mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_FULLPHYSICS)
        if full.dim() != 2 or full.shape[1] != nstate:
            raise ValueError(f"physics state of shape {tuple(full.shape)} does not fit this "
                             f"model's ({self.num_envs}, {nstate})")
        own = {"time": full[:, 0], "qpos": full[:, off["qpos"]:off["qpos"] + m.nq],
               "qvel": full[:, off["qvel"]:off["qvel"] + m.nv],
               "act": full[:, off["act"]:off["act"] + m.na],
               "ctrl": self._t["ctrl"].cpu(), "qacc_warmstart": torch.zeros(self.num_envs, m.nv),
               "xfrc_applied": torch.as_tensor(state["xfrc"])}
        return {"state": own, "sensordata": torch.as_tensor(state["sensordata"])}

    def close(self) -> None:
        self._graph = None
