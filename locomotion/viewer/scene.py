"""MuJoCo geoms as triangle meshes, for viewers that draw meshes rather than MjModels.

Each geom becomes vertices and faces in its own frame plus an RGBA colour; a viewer then
places the geom's body. Only geoms in the visible groups (0-2, MuJoCo's default) are drawn.
A heightfield is cut to a window around the robots so the browser gets a few hundred
thousand triangles, not the whole terrain grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np
import trimesh

VISIBLE_GROUPS = 3  # geom groups 0, 1, 2 are shown, as in MuJoCo's own viewer
PLANE_HALF = 20.0  # m, half side of a drawn plane whose size is 0 (infinite)
HFIELD_MAX_VERTICES = 250_000


@dataclass(frozen=True)
class GeomMesh:
    geom: int  # geom id
    body: int  # body id the geom moves with
    vertices: np.ndarray  # [V, 3] float32, geom frame
    faces: np.ndarray  # [F, 3] int32
    rgba: tuple[float, float, float, float]
    pos: np.ndarray  # [3] geom position in its body's frame
    quat: np.ndarray  # [4] wxyz, geom orientation in its body's frame


def geom_meshes(model: mujoco.MjModel,
                window: tuple[float, float, float, float] | None = None) -> list[GeomMesh]:
    """Every visible geom of ``model`` as a mesh; ``window`` (x0, y0, x1, y1, world m)
    limits heightfields to that rectangle."""
    out = []
    for g in range(model.ngeom):
        if model.geom_group[g] >= VISIBLE_GROUPS or model.geom_rgba[g, 3] == 0:
            continue
        mesh = _shape(model, g, window)
        if mesh is None:
            continue
        vertices, faces = mesh
        rgba = _colour(model, g)
        out.append(GeomMesh(g, int(model.geom_bodyid[g]), vertices.astype(np.float32),
                            faces.astype(np.int32), tuple(float(c) for c in rgba),
                            model.geom_pos[g].copy(), model.geom_quat[g].copy()))
    return out


def _colour(model: mujoco.MjModel, g: int) -> np.ndarray:
    """The geom's RGBA: its material's, times its texture's mean colour (a mesh has no
    texture coordinates here), else its own."""
    mat = model.geom_matid[g]
    if mat < 0:
        return model.geom_rgba[g]
    rgba = model.mat_rgba[mat].copy()
    tex = model.mat_texid[mat, mujoco.mjtTextureRole.mjTEXROLE_RGB]
    if tex >= 0:
        adr, n = model.tex_adr[tex], model.tex_width[tex] * model.tex_height[tex]
        texels = model.tex_data[adr:adr + n * model.tex_nchannel[tex]].reshape(n, -1)
        rgba[:3] *= texels[:, :3].mean(0) / 255.0
    return rgba


def _shape(model: mujoco.MjModel, g: int, window) -> tuple[np.ndarray, np.ndarray] | None:
    kind, size = mujoco.mjtGeom(model.geom_type[g]), model.geom_size[g]
    if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
        m = trimesh.creation.icosphere(subdivisions=2, radius=size[0])
    elif kind == mujoco.mjtGeom.mjGEOM_ELLIPSOID:
        m = trimesh.creation.icosphere(subdivisions=2, radius=1.0)
        m.apply_scale(size)
    elif kind == mujoco.mjtGeom.mjGEOM_CAPSULE:
        m = trimesh.creation.capsule(height=2 * size[1], radius=size[0], count=[12, 12])
    elif kind == mujoco.mjtGeom.mjGEOM_CYLINDER:
        m = trimesh.creation.cylinder(radius=size[0], height=2 * size[1], sections=16)
    elif kind == mujoco.mjtGeom.mjGEOM_BOX:
        m = trimesh.creation.box(extents=2 * size)
    elif kind == mujoco.mjtGeom.mjGEOM_PLANE:
        half = [s if s > 0 else PLANE_HALF for s in size[:2]]
        m = trimesh.creation.box(extents=[2 * half[0], 2 * half[1], 0.002])
        m.apply_translation([0.0, 0.0, -0.001])
    elif kind == mujoco.mjtGeom.mjGEOM_MESH:
        i = model.geom_dataid[g]
        v0, nv = model.mesh_vertadr[i], model.mesh_vertnum[i]
        f0, nf = model.mesh_faceadr[i], model.mesh_facenum[i]
        return model.mesh_vert[v0:v0 + nv], model.mesh_face[f0:f0 + nf]
    elif kind == mujoco.mjtGeom.mjGEOM_HFIELD:
        return heightfield_mesh(model, g, window)
    else:
        return None
    return np.asarray(m.vertices), np.asarray(m.faces)


def heightfield_mesh(model: mujoco.MjModel, g: int, window=None) -> tuple[np.ndarray, np.ndarray]:
    """The top surface of heightfield geom ``g`` (geom frame), cut to ``window`` and thinned
    to at most ``HFIELD_MAX_VERTICES`` vertices."""
    h = model.geom_dataid[g]
    nrow, ncol = model.hfield_nrow[h], model.hfield_ncol[h]
    rx, ry, top, _ = model.hfield_size[h]
    adr = model.hfield_adr[h]
    z = model.hfield_data[adr:adr + nrow * ncol].reshape(nrow, ncol) * top
    xs, ys = np.linspace(-rx, rx, ncol), np.linspace(-ry, ry, nrow)
    cols, rows = np.arange(ncol), np.arange(nrow)
    if window is not None:  # world rectangle -> geom frame (heightfields are not rotated)
        gx, gy = model.geom_pos[g, :2]
        cols = cols[(xs >= window[0] - gx) & (xs <= window[2] - gx)]
        rows = rows[(ys >= window[1] - gy) & (ys <= window[3] - gy)]
    stride = max(1, int(np.ceil(np.sqrt(len(rows) * len(cols) / HFIELD_MAX_VERTICES))))
    rows, cols = rows[::stride], cols[::stride]
    gx_, gy_ = np.meshgrid(xs[cols], ys[rows])
    vertices = np.stack([gx_, gy_, z[np.ix_(rows, cols)]], axis=-1).reshape(-1, 3)
    r, c = len(rows), len(cols)
    idx = np.arange(r * c).reshape(r, c)
    a, b = idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel()
    d, e = idx[1:, :-1].ravel(), idx[1:, 1:].ravel()
    faces = np.concatenate([np.stack([a, b, e], 1), np.stack([a, e, d], 1)])
    return vertices, faces
