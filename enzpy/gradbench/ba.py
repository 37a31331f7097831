"""ba (ADBench bundle adjustment): reprojection errors of p observations (camera i mod n,
point i mod m) and weight errors. The Jacobian is sparse: each observation's two residuals
depend on its camera (11), its point (3) and its weight (1) only, so it is assembled from one
2x15 Jacobian per observation, computed by two enzpy reverse-mode calls (one per residual)
inside an ``@njit`` loop; each weight-error row (1 - w^2) gets its derivative from an enzpy
reverse-mode call as well."""
import numpy as np
from numba import njit

from enzpy import Active, Const, Duplicated, Reverse, autodiff

from ._common import array, integer, number

FUNCTIONS = ("objective", "jacobian")
N_CAM = 11


@njit
def rodrigues_rotate_point(rot, X):
    sqtheta = np.sum(rot ** 2)
    if sqtheta != 0.0:
        theta = np.sqrt(sqtheta)
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        w = rot / theta
        return X * costheta + np.cross(w, X) * sintheta + w * (np.dot(w, X) * (1.0 - costheta))
    return X + np.cross(rot, X)


@njit
def project(cam, X):
    Xcam = rodrigues_rotate_point(cam[0:3], X - cam[3:6])
    proj = Xcam[0:2] / Xcam[2]
    rsq = np.sum(proj ** 2)
    L = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq
    return proj * L * cam[6] + cam[7:9]


@njit
def reproj_error(cam, X, w, feat):
    return w * (project(cam, X) - feat)


@njit
def reproj_error_into(cam, X, w, feat, err):
    err[:] = reproj_error(cam, X, w, feat)


@njit
def weight_error(w):
    return 1.0 - w * w


@njit
def ba_objective(cams, X, w, feats, obs):
    p = w.shape[0]
    reproj = np.empty((p, 2))
    w_err = np.empty(p)
    for i in range(p):
        reproj[i] = reproj_error(cams[obs[i, 0]], X[obs[i, 1]], w[i], feats[i])
        w_err[i] = weight_error(w[i])
    return reproj, w_err


@njit
def ba_jacobian(cams, X, w, feats, obs):
    """The CSR Jacobian (rows, cols, vals) of [reprojection errors; weight errors] with
    respect to [cameras; points; weights]."""
    n, m, p = cams.shape[0], X.shape[0], w.shape[0]
    per_row = N_CAM + 3 + 1
    rows = np.empty(3 * p + 1, dtype=np.int64)
    cols = np.empty(2 * p * per_row + p, dtype=np.int64)
    vals = np.empty(2 * p * per_row + p)
    dcam = np.empty(N_CAM)
    dX = np.empty(3)
    err = np.empty(2)
    derr = np.empty(2)
    rows[0] = 0
    for i in range(p):
        c, pt = obs[i, 0], obs[i, 1]
        for r in range(2):
            dcam[:] = 0.0
            dX[:] = 0.0
            derr[:] = 0.0
            derr[r] = 1.0
            (_, _, dw, _, _), = autodiff(Reverse, reproj_error_into,
                                         Duplicated(cams[c], dcam), Duplicated(X[pt], dX),
                                         Active(w[i]), Const(feats[i]), Duplicated(err, derr))
            row = 2 * i + r
            start = row * per_row
            rows[row + 1] = start + per_row
            cols[start:start + N_CAM] = N_CAM * c + np.arange(N_CAM)
            vals[start:start + N_CAM] = dcam
            cols[start + N_CAM:start + N_CAM + 3] = N_CAM * n + 3 * pt + np.arange(3)
            vals[start + N_CAM:start + N_CAM + 3] = dX
            cols[start + N_CAM + 3] = N_CAM * n + 3 * m + i
            vals[start + N_CAM + 3] = dw
    base = 2 * p * per_row
    for i in range(p):
        (dw,), = autodiff(Reverse, weight_error, Active(w[i]))
        rows[2 * p + i + 1] = base + i + 1
        cols[base + i] = N_CAM * n + 3 * m + i
        vals[base + i] = dw
    return rows, cols, vals


def expand(inp):
    """The full problem the input describes: n cameras, m points, p observations."""
    n, m, p = integer(inp, "n", 1), integer(inp, "m", 1), integer(inp, "p", 1)
    cam = array(inp, "cam", (N_CAM,))
    x = array(inp, "x", (3,))
    w = number(inp, "w")
    feat = array(inp, "feat", (2,))
    obs = np.stack((np.arange(p) % n, np.arange(p) % m), axis=1)
    return (np.tile(cam, (n, 1)), np.tile(x, (m, 1)), np.full(p, w), np.tile(feat, (p, 1)),
            np.ascontiguousarray(obs))


def _objective_json(result):
    reproj, w_err = result
    return {"reproj_error": {"elements": reproj[0].tolist(), "repeated": int(reproj.shape[0])},
            "w_err": {"element": float(w_err[0]), "repeated": int(w_err.shape[0])}}


def _slice(a):
    return np.concatenate((a[:30], a[-1:])).tolist()


def _jacobian_json(result):
    rows, cols, vals = result
    return {"rows": _slice(rows), "cols": _slice(cols), "vals": _slice(vals)}


def prepare(function, inp):
    args = expand(inp)
    if function == "objective":
        return (lambda: ba_objective(*args)), _objective_json
    return (lambda: ba_jacobian(*args)), _jacobian_json


_TINY = {"n": 2, "m": 3, "p": 4, "cam": [0.1, -0.2, 0.05, 0.3, 0.1, -4.0, 500.0, 1.0, -1.0,
                                         1e-3, 1e-5],
         "x": [0.2, -0.1, 1.0], "w": 0.9, "feat": [10.0, -20.0]}
WARMUP = [(f, _TINY) for f in FUNCTIONS]
