"""ht (ADBench hand tracking): skin a hand model (22 bones, 4x4 transforms chained from the
root, per-vertex bone weights) posed by 26 parameters, then the residuals of N points
against vertices (simple) or against points of triangles at barycentric coordinates ``us``
(complicated).

Jacobian: every residual depends on all 26 theta values, so those 26 columns come from 26
enzpy forward-mode passes over the whole objective (inside one ``@njit`` loop); in the
complicated variant each point's residual depends only on its own (u0, u1), so those two
columns are 3x2 Jacobians of a per-point function, one enzpy forward-mode call per point and
coordinate.
"""
import numpy as np
from numba import njit

from enzpy import Const, Duplicated, Forward, autodiff

from ._common import InputError, array, field, tolist

FUNCTIONS = ("objective", "jacobian")


@njit
def angle_axis_to_rotation_matrix(aa):
    n = np.sqrt(np.sum(aa ** 2))
    if n < 1e-4:
        return np.eye(3)
    x, y, z = aa / n
    s, c = np.sin(n), np.cos(n)
    return np.array([[x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s],
                     [x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s],
                     [x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c]])


@njit
def euler_angles_to_rotation_matrix(xzy):
    tx, tz, ty = xzy[0], xzy[1], xzy[2]
    Rx = np.array([[1.0, 0.0, 0.0], [0.0, np.cos(tx), -np.sin(tx)], [0.0, np.sin(tx), np.cos(tx)]])
    Ry = np.array([[np.cos(ty), 0.0, np.sin(ty)], [0.0, 1.0, 0.0], [-np.sin(ty), 0.0, np.cos(ty)]])
    Rz = np.array([[np.cos(tz), -np.sin(tz), 0.0], [np.sin(tz), np.cos(tz), 0.0], [0.0, 0.0, 1.0]])
    return Rz @ Ry @ Rx


@njit
def to_pose_params(theta, n_bones):
    """Columns of the reference's 3 x (n_bones + 3) pose matrix, as rows: global rotation,
    scale, global translation, then one Euler-angle triple per bone."""
    pose = np.zeros((n_bones + 3, 3))
    pose[0] = theta[0:3]
    pose[1] = 1.0
    pose[2] = theta[3:6]
    i_theta = 6
    i_pose = 5
    for _finger in range(5):
        for i in range(3):
            pose[i_pose, 0] = theta[i_theta]
            i_theta += 1
            if i == 0:
                pose[i_pose, 1] = theta[i_theta]
                i_theta += 1
            i_pose += 1
        i_pose += 1
    return pose


@njit
def bone_transforms(pose, parents, base_relatives, inverse_base_absolutes):
    n_bones = parents.shape[0]
    absolutes = np.empty((n_bones, 4, 4))
    transforms = np.empty((n_bones, 4, 4))
    for b in range(n_bones):
        tr = np.eye(4)
        tr[:3, :3] = euler_angles_to_rotation_matrix(pose[b + 3])
        relative = base_relatives[b] @ tr
        if parents[b] == -1:
            absolutes[b] = relative
        else:
            absolutes[b] = absolutes[parents[b]] @ relative
        transforms[b] = absolutes[b] @ inverse_base_absolutes[b]
    return transforms


@njit
def skinned_vertices(theta, parents, base_relatives, inverse_base_absolutes,
                     base_positions, weights, is_mirrored):
    pose = to_pose_params(theta, parents.shape[0])
    transforms = bone_transforms(pose, parents, base_relatives, inverse_base_absolutes)
    positions = np.zeros((base_positions.shape[0], 3))
    for b in range(parents.shape[0]):
        positions += (base_positions @ transforms[b][:3].T) * weights[:, b:b + 1]
    if is_mirrored:
        positions[:, 0] = -positions[:, 0]
    R = angle_axis_to_rotation_matrix(pose[0]) * pose[1]
    return positions @ R.T + pose[2]


@njit
def hand_point(u, v0, v1, v2, point):
    return point - (u[0] * v0 + u[1] * v1 + (1.0 - u[0] - u[1]) * v2)


@njit
def objective_simple(theta, parents, base_relatives, inverse_base_absolutes,
                     base_positions, weights, is_mirrored, correspondences, points):
    V = skinned_vertices(theta, parents, base_relatives, inverse_base_absolutes,
                         base_positions, weights, is_mirrored)
    return points - V[correspondences]


@njit
def objective_complicated(theta, us, parents, base_relatives, inverse_base_absolutes,
                          base_positions, weights, is_mirrored, triangles,
                          correspondences, points):
    V = skinned_vertices(theta, parents, base_relatives, inverse_base_absolutes,
                         base_positions, weights, is_mirrored)
    err = np.empty_like(points)
    for i in range(points.shape[0]):
        t = triangles[correspondences[i]]
        err[i] = hand_point(us[i], V[t[0]], V[t[1]], V[t[2]], points[i])
    return err


@njit
def jacobian_simple(theta, parents, base_relatives, inverse_base_absolutes,
                    base_positions, weights, is_mirrored, correspondences, points):
    J = np.empty((points.shape[0], 3, 26))
    dtheta = np.zeros_like(theta)
    for j in range(26):
        dtheta[:] = 0.0
        dtheta[j] = 1.0
        (tangent,) = autodiff(Forward, objective_simple, Duplicated(theta, dtheta),
                              Const(parents), Const(base_relatives),
                              Const(inverse_base_absolutes), Const(base_positions),
                              Const(weights), Const(is_mirrored), Const(correspondences),
                              Const(points))
        J[:, :, j] = tangent
    return J.reshape((-1, 26))


@njit
def jacobian_complicated(theta, us, parents, base_relatives, inverse_base_absolutes,
                         base_positions, weights, is_mirrored, triangles,
                         correspondences, points):
    n = points.shape[0]
    J = np.empty((n, 3, 28))
    dtheta = np.zeros_like(theta)
    dus = np.zeros_like(us)
    for j in range(26):
        dtheta[:] = 0.0
        dtheta[j] = 1.0
        (tangent,) = autodiff(Forward, objective_complicated, Duplicated(theta, dtheta),
                              Duplicated(us, dus), Const(parents), Const(base_relatives),
                              Const(inverse_base_absolutes), Const(base_positions),
                              Const(weights), Const(is_mirrored), Const(triangles),
                              Const(correspondences), Const(points))
        J[:, :, 2 + j] = tangent
    V = skinned_vertices(theta, parents, base_relatives, inverse_base_absolutes,
                         base_positions, weights, is_mirrored)
    du = np.zeros(2)
    for i in range(n):
        t = triangles[correspondences[i]]
        for k in range(2):
            du[:] = 0.0
            du[k] = 1.0
            (tangent,) = autodiff(Forward, hand_point, Duplicated(us[i], du),
                                  Const(V[t[0]]), Const(V[t[1]]), Const(V[t[2]]),
                                  Const(points[i]))
            J[i, :, k] = tangent
    return J.reshape((-1, 28))


FUNCTIONS_BY_NAME = {"objective_simple": objective_simple,
                     "objective_complicated": objective_complicated,
                     "jacobian_simple": jacobian_simple,
                     "jacobian_complicated": jacobian_complicated}


def parse(inp):
    """(theta, us or None, model arrays..., correspondences, points) from the input."""
    theta = array(inp, "theta", (26,))
    data = field(inp, "data")
    model = field(data, "model")
    parents = array(model, "parents", (None,), dtype=np.int64)
    nb = parents.shape[0]
    if nb != 22:
        raise InputError(f"the model must have 22 bones (the pose has 22 + 3 columns), "
                         f"got {nb}")
    if np.any(parents >= np.arange(nb)) or np.any(parents < -1):
        raise InputError("'parents' must list, for each bone, an earlier bone or -1")
    base_relatives = array(model, "base_relatives", (nb, 4, 4))
    inverse_base_absolutes = array(model, "inverse_base_absolutes", (nb, 4, 4))
    base_positions = array(model, "base_positions", (None, 4))
    nv = base_positions.shape[0]
    weights = array(model, "weights", (nv, nb))
    triangles = array(model, "triangles", (None, 3), dtype=np.int64)
    is_mirrored = bool(field(model, "is_mirrored"))
    correspondences = array(data, "correspondences", (None,), dtype=np.int64)
    npts = correspondences.shape[0]
    points = array(data, "points", (npts, 3))
    us_list = inp.get("us", [])
    complicated = us_list is not None and len(us_list) > 0
    if complicated:
        us = array(inp, "us", (npts, 2))
        if np.any(correspondences < 0) or np.any(correspondences >= triangles.shape[0]):
            raise InputError("'correspondences' must index 'triangles'")
        if np.any(triangles < 0) or np.any(triangles >= nv):
            raise InputError("'triangles' must index the vertices")
        return (theta, us, parents, base_relatives, inverse_base_absolutes, base_positions,
                weights, is_mirrored, triangles, correspondences, points)
    if np.any(correspondences < 0) or np.any(correspondences >= nv):
        raise InputError("'correspondences' must index the vertices")
    return (theta, parents, base_relatives, inverse_base_absolutes, base_positions, weights,
            is_mirrored, correspondences, points)


def key(function, inp):
    us = inp.get("us") if isinstance(inp, dict) else None
    return "complicated" if us else "simple"


def prepare(function, inp):
    args = parse(inp)
    kind = "complicated" if len(args) == 11 else "simple"
    fn = FUNCTIONS_BY_NAME[f"{function}_{kind}"]
    return (lambda: fn(*args)), (lambda r: r.ravel().tolist() if function == "objective"
                                 else tolist(r))


def _tiny(complicated=True, nv=6, npts=3, seed=0):
    rng = np.random.default_rng(seed)
    nb = 22
    parents = [-1] + [int(rng.integers(0, b)) for b in range(1, nb)]
    rel = np.tile(np.eye(4), (nb, 1, 1))
    rel[:, :3, :] += 0.1 * rng.standard_normal((nb, 3, 4))
    inv = np.tile(np.eye(4), (nb, 1, 1))
    inv[:, :3, :] += 0.1 * rng.standard_normal((nb, 3, 4))
    pos = np.concatenate((rng.standard_normal((nv, 3)), np.ones((nv, 1))), axis=1)
    w = rng.uniform(size=(nv, nb))
    w /= w.sum(axis=1, keepdims=True)
    tri = rng.integers(0, nv, size=(nv, 3))
    inp = {"theta": (0.3 * rng.standard_normal(26)).tolist(),
           "data": {"model": {"bone_count": nb, "bone_names": [f"b{i}" for i in range(nb)],
                              "parents": parents, "base_relatives": rel.tolist(),
                              "inverse_base_absolutes": inv.tolist(),
                              "base_positions": pos.tolist(), "weights": w.tolist(),
                              "triangles": tri.tolist(), "is_mirrored": False},
                    "correspondences": rng.integers(0, nv, size=npts).tolist(),
                    "points": rng.standard_normal((npts, 3)).tolist()},
           "us": (0.5 * rng.uniform(size=(npts, 2))).tolist() if complicated else []}
    return inp


WARMUP = [(f, _tiny(c)) for c in (True, False) for f in FUNCTIONS]
