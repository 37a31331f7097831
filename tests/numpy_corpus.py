"""NumPy-inside-@njit programs: enzpy's registry for NumPy coverage.

Each ``Program`` is a small function written the way Numba users write NumPy
code (array expressions, reductions, slicing, fancy indexing, BLAS/LAPACK
calls), with a point where it is smooth and finite differences mean
something: no ties for max/min/argmax/median/sort, positive inputs for
log/sqrt/power, SPD matrices for cholesky, distinct eigenvalues and singular
values, values away from kinks (abs, sign, clip, maximum, where).

Every program compiles and runs in plain Numba (0.68). Variants that Numba
itself rejects are left out; among the functions this registry would like to
cover, Numba 0.68 has no ``axis=`` for np.max/np.min/np.amax/np.mean/np.var/
np.std/np.prod/np.median/np.nansum (users write loops over rows/columns
instead: see the ``*_loop`` programs), no np.squeeze/ndarray.squeeze,
np.inner, np.matmul (the function; ``@`` works), np.einsum, np.tensordot,
ndarray.trace, 2-D boolean-mask reads (``A[A > 0]``), np.argsort of 2-D,
np.flip with an axis, np.diff of non-contiguous 2-D arrays, np.vdot of 2-D
arrays, and no 'fro'/'nuc' string orders for np.linalg.norm.

``wrt`` lists the differentiated arguments (float scalars or float arrays);
the others are Const. ``make_args`` returns fresh arguments (seeded RNG) on
every call, in the layout the program is meant to exercise (C, Fortran via
np.asfortranarray, strided views such as ``x[::2]`` and ``A[:, 1:]``).
"""
from __future__ import annotations

from dataclasses import dataclass, field  # noqa: F401  (field: the registry's structure)

import numpy as np
from numba import float32, float64, njit
from numba.experimental import jitclass


@dataclass(frozen=True)
class Program:
    name: str            # unique id, e.g. "max_axis0_2d_f64"
    covers: tuple        # the NumPy names exercised, spelled as Numba's "Supported NumPy features" page does
    fn: object           # the @njit function
    make_args: object    # zero-arg callable returning a list of argument values (fresh arrays each call, seeded RNG)
    wrt: tuple           # indices of the differentiated arguments (float scalars or float arrays); the others are Const
    returns: str = "scalar"   # "scalar", "array" or "tuple"
    hvp: bool = False    # twice differentiable at the point and its first wrt argument comes first
    tags: tuple = ()     # e.g. ("float32",), ("fortran",), ("strided",), ("composite",), ("linalg",), ("late_import",)


PROGRAMS: list[Program] = []


def _add(name, covers, fn, make_args, wrt=(0,), returns="scalar", hvp=False, tags=()):
    PROGRAMS.append(Program(name, tuple(covers), fn, make_args, tuple(wrt), returns, hvp,
                            tuple(tags)))


# -- points -------------------------------------------------------------------------------
def _rng(seed):
    return np.random.default_rng(seed)


def _size(shape):
    return int(np.prod(shape)) if isinstance(shape, tuple) else int(shape)


def _shape(shape):
    return shape if isinstance(shape, tuple) else (shape,)


def normal(seed, shape, scale=1.0):
    """Gaussian values (smooth programs)."""
    return scale * _rng(seed).standard_normal(_shape(shape))


def distinct(seed, shape, lo=-2.0, hi=2.0, avoid=(), margin=0.15):
    """Distinct values, at least (hi - lo) / 400 apart, kept ``margin`` away from
    each point of ``avoid`` (kinks, clip bounds)."""
    rng = _rng(seed)
    grid = np.linspace(lo, hi, 401)
    keep = np.ones(grid.size, dtype=bool)
    for b in avoid:
        keep &= np.abs(grid - b) > margin
    grid = grid[keep][::2]                 # spacing (hi - lo) / 200
    vals = rng.choice(grid, size=_size(shape), replace=False)
    return vals.reshape(_shape(shape))


def away(seed, shape, lo=0.3, hi=2.0):
    """Nonzero values of distinct magnitudes in [lo, hi] and random signs
    (abs, sign, norms, masks on the sign)."""
    mags = distinct(seed, shape, lo, hi)
    signs = np.where(_rng(seed + 1000).random(_shape(shape)) < 0.5, -1.0, 1.0)
    return mags * signs


def positive(seed, shape, lo=0.5, hi=2.0):
    return _rng(seed).uniform(lo, hi, _shape(shape))


def weights(seed, shape):
    """A fixed weight array for a non-trivial reduction (Const)."""
    return _rng(seed + 5000).uniform(-1.5, 1.5, _shape(shape))


def well(seed, n):
    """A well-conditioned non-symmetric matrix."""
    return _rng(seed).standard_normal((n, n)) * 0.5 + n * 0.5 * np.eye(n)


def spd(seed, n):
    a = _rng(seed).standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


def spectral(seed, n, values=None):
    """A symmetric matrix with well-separated eigenvalues."""
    q, _ = np.linalg.qr(_rng(seed).standard_normal((n, n)))
    d = np.linspace(1.0, 1.0 + 1.3 * (n - 1), n) if values is None else np.asarray(values)
    return (q * d) @ q.T


def singular(seed, m, n, values=None):
    """An m x n matrix with well-separated singular values."""
    rng = _rng(seed)
    k = min(m, n)
    u, _ = np.linalg.qr(rng.standard_normal((m, k)))
    v, _ = np.linalg.qr(rng.standard_normal((n, k)))
    s = np.linspace(3.0, 1.0, k) if values is None else np.asarray(values)
    return (u * s) @ v.T


def f32(a):
    return np.float32(a) if np.ndim(a) == 0 else np.asarray(a, dtype=np.float32)


def fortran(a):
    return np.asfortranarray(a)


def every_other(a):
    """``a`` as the view ``base[::2]`` of a twice longer array (first axis)."""
    a = np.asarray(a)
    base = np.full((2 * a.shape[0],) + a.shape[1:], 99.0, dtype=a.dtype)
    base[::2] = a
    return base[::2]


def drop_first_col(a):
    """``a`` as the view ``base[:, 1:]`` of an array with one more column."""
    base = np.full((a.shape[0], a.shape[1] + 1), 99.0, dtype=a.dtype)
    base[:, 1:] = a
    return base[:, 1:]


def with_nans(seed, shape, count=2):
    x = normal(seed, shape)
    flat = x.reshape(-1)
    flat[_rng(seed + 7).choice(flat.size, size=count, replace=False)] = np.nan
    return x


# =========================================================================================
# Reductions
# =========================================================================================
@njit
def sum_plain(x):
    return np.sum(x)


@njit
def sum_squares_method(x):
    return (x * x).sum()


@njit
def sum_axis0_weighted(A, w):
    s = np.sum(A, axis=0)
    return (w * s * s).sum()


@njit
def sum_axis1_exp(A, w):
    s = A.sum(axis=1)
    return (w * np.exp(s)).sum()


@njit
def sum_axis2_3d(T, W):
    s = T.sum(axis=2)
    return (W * np.sin(s)).sum()


@njit
def sum_axis1_3d(T, W):
    s = np.sum(T, axis=1)
    return (W * s * s).sum()


_add("sum_1d_f64", ["np.sum"], sum_plain, lambda: [normal(1, 8)],
     tags=("late_import",))
_add("sum_2d_f32", ["np.sum"], sum_plain, lambda: [f32(normal(2, (3, 4)))], tags=("float32",))
_add("sum_squares_method_1d_f64", ["ndarray.sum", "*"], sum_squares_method,
     lambda: [normal(3, 7)], hvp=True)
_add("sum_squares_method_2d_f32", ["ndarray.sum", "*"], sum_squares_method,
     lambda: [f32(normal(4, (3, 5)))], tags=("float32",))
_add("sum_squares_method_3d_fortran", ["ndarray.sum", "*"], sum_squares_method,
     lambda: [fortran(normal(5, (2, 3, 4)))], tags=("fortran",))
_add("sum_squares_method_1d_strided", ["ndarray.sum", "*"], sum_squares_method,
     lambda: [every_other(normal(6, 6))], tags=("strided",))
_add("sum_axis0_2d_f64", ["np.sum", "axis"], sum_axis0_weighted,
     lambda: [normal(7, (4, 3)), weights(7, 3)], hvp=True)
_add("sum_axis0_2d_fortran", ["np.sum", "axis"], sum_axis0_weighted,
     lambda: [fortran(normal(8, (4, 3))), weights(8, 3)], tags=("fortran",))
_add("sum_axis0_2d_f32", ["np.sum", "axis"], sum_axis0_weighted,
     lambda: [f32(normal(9, (4, 3))), f32(weights(9, 3))], tags=("float32",))
_add("sum_axis1_2d_f64", ["ndarray.sum", "axis", "np.exp"], sum_axis1_exp,
     lambda: [normal(10, (3, 4), 0.5), weights(10, 3)], tags=("late_import",))
_add("sum_axis1_2d_strided", ["ndarray.sum", "axis", "np.exp"], sum_axis1_exp,
     lambda: [drop_first_col(normal(11, (3, 4), 0.5)), weights(11, 3)], tags=("strided",))
_add("sum_axis2_3d_f64", ["ndarray.sum", "axis", "np.sin"], sum_axis2_3d,
     lambda: [normal(12, (2, 3, 4)), weights(12, (2, 3))])
_add("sum_axis1_3d_f32", ["np.sum", "axis"], sum_axis1_3d,
     lambda: [f32(normal(13, (2, 3, 4))), f32(weights(13, (2, 4)))], tags=("float32",))


@njit
def prod_1d(x):
    return np.prod(x)


@njit
def prod_method(A):
    return A.prod()


@njit
def prod_rows_loop(A, w):
    out = np.empty(A.shape[0])
    for i in range(A.shape[0]):
        out[i] = np.prod(A[i])
    return np.dot(w, out)


_add("prod_1d_f64", ["np.prod"], prod_1d, lambda: [positive(14, 6, 0.6, 1.5)], hvp=True)
_add("prod_method_2d_f32", ["ndarray.prod"], prod_method,
     lambda: [f32(positive(15, (2, 3), 0.6, 1.5))], tags=("float32",), hvp=True)
_add("prod_method_2d_fortran", ["ndarray.prod"], prod_method,
     lambda: [fortran(positive(16, (3, 3), 0.6, 1.5))], tags=("fortran",))
_add("prod_rows_loop_2d_f64", ["np.prod", "basic indexing", "np.dot"], prod_rows_loop,
     lambda: [positive(17, (3, 4), 0.6, 1.5), weights(17, 3)])


@njit
def mean_sq(x):
    return np.mean(x ** 2)


@njit
def mean_method(A):
    return A.mean() * A.mean() + A[0].mean()


@njit
def mean_cols_loop(A, w):
    m = np.empty(A.shape[1])
    for j in range(A.shape[1]):
        m[j] = A[:, j].mean()
    return (w * m ** 2).sum()


@njit
def var_1d(x):
    return np.var(x)


@njit
def var_method(A):
    return A.var()


@njit
def std_1d(x):
    return np.std(x)


@njit
def std_method(A):
    return A.std()


@njit
def standardize(A, W):
    mu = A.mean()
    sd = A.std()
    Z = (A - mu) / sd
    return (W * Z).sum()


_add("mean_1d_f64", ["np.mean", "**"], mean_sq, lambda: [normal(18, 8)],
     tags=("late_import",))
_add("mean_3d_f32", ["np.mean", "**"], mean_sq, lambda: [f32(normal(19, (2, 2, 3)))],
     tags=("float32",))
_add("mean_method_2d_fortran", ["ndarray.mean"], mean_method,
     lambda: [fortran(normal(20, (3, 4)))], tags=("fortran",))
_add("mean_cols_loop_2d_f64", ["ndarray.mean", "basic indexing"], mean_cols_loop,
     lambda: [normal(21, (4, 3)), weights(21, 3)])
_add("var_1d_f64", ["np.var"], var_1d, lambda: [normal(22, 7)], hvp=True)
_add("var_2d_f32", ["np.var"], var_1d, lambda: [f32(normal(23, (3, 3)))], tags=("float32",))
_add("var_method_2d_strided", ["ndarray.var"], var_method,
     lambda: [drop_first_col(normal(24, (3, 4)))], tags=("strided",), hvp=True)
_add("std_1d_f64", ["np.std"], std_1d, lambda: [normal(25, 8)], hvp=True)
_add("std_3d_f64", ["np.std"], std_1d, lambda: [normal(26, (2, 3, 2))])
_add("std_method_2d_fortran_f32", ["ndarray.std"], std_method,
     lambda: [f32(fortran(normal(27, (3, 4))))], tags=("fortran", "float32"))
_add("standardize_2d_f64", ["ndarray.mean", "ndarray.std", "broadcasting"], standardize,
     lambda: [normal(28, (3, 4)), weights(28, (3, 4))], hvp=True)


@njit
def min_1d(x):
    return np.min(x)


@njit
def max_1d(x):
    return np.max(x)


@njit
def max_minus_min_method(A):
    return A.max() - 2.0 * A.min()


@njit
def amax_amin(x):
    return np.amax(x) ** 2 + np.amin(x)


@njit
def max_axis0_loop(A, w):
    m = np.empty(A.shape[1])
    for j in range(A.shape[1]):
        m[j] = np.max(A[:, j])
    return (w * m).sum()


@njit
def min_axis1_loop(A, w):
    m = np.empty(A.shape[0])
    for i in range(A.shape[0]):
        m[i] = A[i].min()
    return np.dot(w, m)


@njit
def max_min_strided_inside(x):
    return np.max(x[::2]) + np.min(x[1::2]) ** 2


_add("min_1d_f64", ["np.min"], min_1d, lambda: [distinct(29, 8)], hvp=True)
_add("max_1d_f64", ["np.max"], max_1d, lambda: [distinct(30, 8)], tags=("late_import",))
_add("max_1d_f32", ["np.max"], max_1d, lambda: [f32(distinct(31, 6))], tags=("float32",))
_add("max_1d_strided", ["np.max"], max_1d, lambda: [every_other(distinct(32, 5))],
     tags=("strided",))
_add("max_min_method_2d_f64", ["ndarray.max", "ndarray.min"], max_minus_min_method,
     lambda: [distinct(33, (3, 4))], hvp=True)
_add("max_min_method_2d_f32", ["ndarray.max", "ndarray.min"], max_minus_min_method,
     lambda: [f32(distinct(34, (3, 4)))], tags=("float32",))
_add("max_min_method_2d_fortran", ["ndarray.max", "ndarray.min"], max_minus_min_method,
     lambda: [fortran(distinct(35, (4, 3)))], tags=("fortran",))
_add("amax_amin_1d_f64", ["np.amax", "np.amin"], amax_amin, lambda: [distinct(36, 7)], hvp=True)
_add("amax_amin_3d_f64", ["np.amax", "np.amin"], amax_amin, lambda: [distinct(37, (2, 2, 3))])
_add("max_axis0_2d_f64", ["np.max", "basic indexing"], max_axis0_loop,
     lambda: [distinct(38, (4, 3)), weights(38, 3)])
_add("max_axis0_2d_f32", ["np.max", "basic indexing"], max_axis0_loop,
     lambda: [f32(distinct(39, (4, 3))), f32(weights(39, 3))], tags=("float32",))
_add("max_axis0_2d_fortran", ["np.max", "basic indexing"], max_axis0_loop,
     lambda: [fortran(distinct(40, (4, 3))), weights(40, 3)], tags=("fortran",))
_add("min_axis1_2d_f64", ["ndarray.min", "basic indexing", "np.dot"], min_axis1_loop,
     lambda: [distinct(41, (3, 5)), weights(41, 3)])
_add("max_min_strided_inside_1d", ["np.max", "np.min", "slicing"], max_min_strided_inside,
     lambda: [distinct(42, 8)], tags=("strided",))


@njit
def argmax_select(x):
    return x[np.argmax(x)] * np.sum(x)


@njit
def argmin_select(x):
    i = np.argmin(x)
    return x[i] ** 2 + x[(i + 1) % x.size]


@njit
def argmax_method_2d(A):
    k = A.argmax()
    return A.ravel()[k] * A.sum()


@njit
def argmax_axis1(A):
    idx = np.argmax(A, axis=1)
    s = 0.0
    for i in range(A.shape[0]):
        s += A[i, idx[i]] ** 2
    return s


@njit
def argmin_axis0_method(A, w):
    idx = A.argmin(axis=0)
    s = 0.0
    for j in range(A.shape[1]):
        s += w[j] * A[idx[j], j]
    return s


@njit
def argsort_topk(x, w):
    order = np.argsort(x)
    return (w * x[order[-3:]]).sum()


_add("argmax_select_1d_f64", ["np.argmax", "basic indexing"], argmax_select,
     lambda: [distinct(43, 8)], tags=("late_import",), hvp=True)
_add("argmax_select_1d_f32", ["np.argmax", "basic indexing"], argmax_select,
     lambda: [f32(distinct(44, 6))], tags=("float32",))
_add("argmin_select_1d_f64", ["np.argmin", "basic indexing"], argmin_select,
     lambda: [distinct(45, 7)], hvp=True)
_add("argmin_select_1d_strided", ["np.argmin", "basic indexing"], argmin_select,
     lambda: [every_other(distinct(46, 6))], tags=("strided",))
_add("argmax_method_2d_f64", ["ndarray.argmax", "ndarray.ravel"], argmax_method_2d,
     lambda: [distinct(47, (3, 4))], hvp=True)
_add("argmax_method_2d_fortran", ["ndarray.argmax", "ndarray.ravel"], argmax_method_2d,
     lambda: [fortran(distinct(48, (3, 4)))], tags=("fortran",))
_add("argmax_axis1_2d_f64", ["np.argmax", "axis", "basic indexing"], argmax_axis1,
     lambda: [distinct(49, (4, 3))])
_add("argmin_axis0_method_2d_f64", ["ndarray.argmin", "axis"], argmin_axis0_method,
     lambda: [distinct(50, (3, 4)), weights(50, 4)], hvp=True)
_add("argsort_topk_1d_f64", ["np.argsort", "fancy indexing", "slicing"], argsort_topk,
     lambda: [distinct(51, 8), weights(51, 3)], tags=("late_import",), hvp=True)


@njit
def nansum_sq(x):
    return np.nansum(x * x)


@njit
def nanmean_exp(x):
    return np.nanmean(np.exp(x))


@njit
def nanmax_nanmin(x):
    return np.nanmax(x) - 2.0 * np.nanmin(x)


_add("nansum_1d_f64", ["np.nansum"], nansum_sq, lambda: [with_nans(52, 8)], hvp=True)
_add("nansum_2d_f32", ["np.nansum"], nansum_sq, lambda: [f32(with_nans(53, (3, 3)))],
     tags=("float32",))
_add("nanmean_1d_f64", ["np.nanmean", "np.exp"], nanmean_exp, lambda: [with_nans(54, 7)], hvp=True)
_add("nanmax_nanmin_1d_f64", ["np.nanmax", "np.nanmin"], nanmax_nanmin,
     lambda: [np.where(np.isnan(with_nans(55, 8)), np.nan, distinct(55, 8))], hvp=True)
_add("nanmax_nanmin_2d_f64", ["np.nanmax", "np.nanmin"], nanmax_nanmin,
     lambda: [np.where(np.isnan(with_nans(56, (3, 3))), np.nan, distinct(56, (3, 3)))])


@njit
def cumsum_weighted(x, w):
    c = np.cumsum(x)
    return (w * c * c).sum()


@njit
def cumsum_method_2d(A, w):
    c = A.cumsum()
    return np.dot(w, np.sin(c))


@njit
def cumprod_weighted(x, w):
    return (w * np.cumprod(x)).sum()


@njit
def cumprod_method(A):
    c = A.cumprod()
    return c[-1] + c.sum()


@njit
def diff_sq(x, w):
    return (w * np.diff(x) ** 2).sum()


@njit
def diff_second(x):
    d = np.diff(x, 2)
    return (d * d).sum()


@njit
def diff_2d(A, W):
    return (W * np.tanh(np.diff(A))).sum()


_add("cumsum_1d_f64", ["np.cumsum"], cumsum_weighted, lambda: [normal(57, 7), weights(57, 7)],
     hvp=True)
_add("cumsum_1d_f32", ["np.cumsum"], cumsum_weighted,
     lambda: [f32(normal(58, 6)), f32(weights(58, 6))], tags=("float32",))
_add("cumsum_1d_strided", ["np.cumsum"], cumsum_weighted,
     lambda: [every_other(normal(59, 6)), weights(59, 6)], tags=("strided",))
_add("cumsum_method_2d_f64", ["ndarray.cumsum", "np.sin", "np.dot"], cumsum_method_2d,
     lambda: [normal(60, (3, 3)), weights(60, 9)], hvp=True)
_add("cumsum_method_2d_fortran", ["ndarray.cumsum", "np.sin", "np.dot"], cumsum_method_2d,
     lambda: [fortran(normal(61, (3, 3))), weights(61, 9)], tags=("fortran",))
_add("cumprod_1d_f64", ["np.cumprod"], cumprod_weighted,
     lambda: [positive(62, 6, 0.6, 1.5), weights(62, 6)], hvp=True)
_add("cumprod_method_2d_f64", ["ndarray.cumprod"], cumprod_method,
     lambda: [positive(63, (2, 3), 0.6, 1.5)], hvp=True)
_add("diff_1d_f64", ["np.diff"], diff_sq, lambda: [normal(64, 8), weights(64, 7)],
     tags=("late_import",))
_add("diff_n2_1d_f64", ["np.diff"], diff_second, lambda: [normal(65, 8)], hvp=True)
_add("diff_n2_1d_f32", ["np.diff"], diff_second, lambda: [f32(normal(66, 6))],
     tags=("float32",))
_add("diff_2d_f64", ["np.diff", "np.tanh"], diff_2d,
     lambda: [normal(67, (3, 4)), weights(67, (3, 3))])


@njit
def median_plain(x):
    return np.median(x)


@njit
def median_plus_sum(A):
    return np.median(A) * 2.0 + A.sum()


@njit
def percentile_30(x):
    return np.percentile(x, 30.0)


@njit
def percentile_many(x, w):
    p = np.percentile(x, np.array([10.0, 50.0, 90.0]))
    return (w * p).sum()


@njit
def quantile_07(x):
    return np.quantile(x, 0.7)


@njit
def nanmedian_plain(x):
    return np.nanmedian(x)


_add("median_1d_odd_f64", ["np.median"], median_plain, lambda: [distinct(68, 7)], hvp=True)
_add("median_1d_even_f32", ["np.median"], median_plain, lambda: [f32(distinct(69, 8))],
     tags=("float32",))
_add("median_1d_strided", ["np.median"], median_plain, lambda: [every_other(distinct(70, 5))],
     tags=("strided",))
_add("median_2d_f64", ["np.median", "ndarray.sum"], median_plus_sum, lambda: [distinct(71, (3, 4))],
     tags=("late_import",))
_add("percentile_1d_f64", ["np.percentile"], percentile_30, lambda: [distinct(72, 8)], hvp=True)
_add("percentile_array_q_1d_f64", ["np.percentile"], percentile_many,
     lambda: [distinct(73, 8), weights(73, 3)])
_add("quantile_1d_f64", ["np.quantile"], quantile_07, lambda: [distinct(74, 7)], hvp=True)
_add("quantile_2d_f64", ["np.quantile"], quantile_07, lambda: [distinct(75, (3, 4))])
_add("nanmedian_1d_f64", ["np.nanmedian"], nanmedian_plain,
     lambda: [np.where(np.isnan(with_nans(76, 8, count=1)), np.nan, distinct(76, 8))], hvp=True)


@njit
def norm_default(x):
    return np.linalg.norm(x)


@njit
def norm_ord1(x):
    return np.linalg.norm(x, 1)


@njit
def norm_inf(x):
    return np.linalg.norm(x, np.inf)


@njit
def norm_neg_inf(x):
    return np.linalg.norm(x, -np.inf)


@njit
def norm_ord3(x):
    return np.linalg.norm(x, 3)


@njit
def norm_ord2(A):
    return np.linalg.norm(A, 2)


@njit
def norm_ord_neg2(A):
    return np.linalg.norm(A, -2)


@njit
def row_norms_loop(A, w):
    r = np.empty(A.shape[0])
    for i in range(A.shape[0]):
        r[i] = np.linalg.norm(A[i])
    return (w * r).sum()


def _col_separated(seed):
    return away(seed, (4, 4)) * np.array([1.0, 1.7, 2.9, 5.0])


_add("norm_vec2_1d_f64", ["np.linalg.norm"], norm_default, lambda: [away(77, 6)], hvp=True,
     tags=("linalg",))
_add("norm_vec2_1d_f32", ["np.linalg.norm"], norm_default, lambda: [f32(away(78, 6))],
     tags=("linalg", "float32"))
_add("norm_vec2_1d_strided", ["np.linalg.norm"], norm_default,
     lambda: [every_other(away(79, 5))], tags=("linalg", "strided"))
_add("norm_vec_ord1_1d_f64", ["np.linalg.norm"], norm_ord1, lambda: [away(80, 6)],
     tags=("linalg",))
_add("norm_vec_inf_1d_f64", ["np.linalg.norm"], norm_inf, lambda: [away(81, 6)],
     tags=("linalg",))
_add("norm_vec_neginf_1d_f64", ["np.linalg.norm"], norm_neg_inf, lambda: [away(82, 6)],
     tags=("linalg",))
_add("norm_vec_ord3_1d_f64", ["np.linalg.norm"], norm_ord3, lambda: [away(83, 6)],
     tags=("linalg",))
_add("norm_fro_2d_f64", ["np.linalg.norm"], norm_default, lambda: [normal(84, (3, 4))],
     hvp=True, tags=("linalg", "late_import"))
_add("norm_fro_2d_fortran", ["np.linalg.norm"], norm_default,
     lambda: [fortran(normal(85, (3, 4)))], tags=("linalg", "fortran"))
_add("norm_fro_2d_f32", ["np.linalg.norm"], norm_default, lambda: [f32(normal(86, (3, 3)))],
     tags=("linalg", "float32"))
_add("norm_mat_ord1_2d_f64", ["np.linalg.norm"], norm_ord1, lambda: [_col_separated(87)],
     tags=("linalg",))
_add("norm_mat_inf_2d_f64", ["np.linalg.norm"], norm_inf,
     lambda: [_col_separated(88).T.copy()], tags=("linalg",))
_add("norm_mat_ord2_2d_f64", ["np.linalg.norm"], norm_ord2, lambda: [singular(89, 4, 3)],
     tags=("linalg",))
_add("norm_mat_ord2_2d_fortran", ["np.linalg.norm"], norm_ord2,
     lambda: [fortran(singular(90, 3, 3))], tags=("linalg", "fortran"))
_add("norm_mat_ord_neg2_2d_f64", ["np.linalg.norm"], norm_ord_neg2,
     lambda: [singular(91, 3, 3)], tags=("linalg",))
_add("row_norms_loop_2d_f64", ["np.linalg.norm", "basic indexing"], row_norms_loop,
     lambda: [normal(92, (3, 4)), weights(92, 3)], tags=("linalg",))


@njit
def trace_plain(A):
    return np.trace(A) + np.trace(A * A)


@njit
def trace_offsets(A):
    return np.trace(A, 1) * np.trace(A, -1)


_add("trace_2d_f64", ["np.trace"], trace_plain, lambda: [normal(93, (4, 4))], hvp=True)
_add("trace_2d_fortran", ["np.trace"], trace_plain, lambda: [fortran(normal(94, (3, 3)))],
     tags=("fortran",))
_add("trace_offset_2d_f64", ["np.trace"], trace_offsets, lambda: [normal(95, (4, 4))])


# =========================================================================================
# Shapes, copies, indexing
# =========================================================================================
@njit
def reshape_rows(x):
    B = x.reshape((3, 4))
    return (B[0] * B[2] + B[1] ** 2).sum()


@njit
def np_reshape_3d(x, W):
    B = np.reshape(x, (2, 2, 3))
    return (W * np.sin(B)).sum()


@njit
def reshape_to_1d(A, w):
    v = A.reshape(A.size)
    return np.dot(w, v * v)


@njit
def ravel_weighted(A, w):
    return np.dot(w, np.ravel(A) ** 2)


@njit
def ravel_method_exp(A, w):
    v = A.ravel()
    return (w * np.exp(v)).sum()


@njit
def flatten_method(A, w):
    v = A.flatten()
    v[0] = 3.0 * v[1]
    return (w * v * v).sum()


_add("reshape_1d_to_2d_f64", ["ndarray.reshape", "basic indexing"], reshape_rows,
     lambda: [normal(100, 12)], hvp=True)
_add("reshape_1d_to_2d_f32", ["ndarray.reshape", "basic indexing"], reshape_rows,
     lambda: [f32(normal(101, 12))], tags=("float32",))
_add("reshape_1d_to_3d_f64", ["np.reshape", "np.sin"], np_reshape_3d,
     lambda: [normal(102, 12), weights(102, (2, 2, 3))], tags=("late_import",), hvp=True)
_add("reshape_2d_to_1d_f64", ["ndarray.reshape", "np.dot"], reshape_to_1d,
     lambda: [normal(103, (3, 4)), weights(103, 12)])
_add("ravel_2d_f64", ["np.ravel", "np.dot"], ravel_weighted,
     lambda: [normal(104, (3, 4)), weights(104, 12)], hvp=True)
_add("ravel_2d_fortran", ["np.ravel", "np.dot"], ravel_weighted,
     lambda: [fortran(normal(105, (3, 4))), weights(105, 12)], tags=("fortran",))
_add("ravel_2d_strided", ["np.ravel", "np.dot"], ravel_weighted,
     lambda: [drop_first_col(normal(106, (3, 4))), weights(106, 12)], tags=("strided",))
_add("ravel_method_3d_f64", ["ndarray.ravel", "np.exp"], ravel_method_exp,
     lambda: [normal(107, (2, 2, 3), 0.5), weights(107, 12)])
_add("flatten_method_2d_f32", ["ndarray.flatten"], flatten_method,
     lambda: [f32(normal(108, (3, 3))), f32(weights(108, 9))], tags=("float32",), hvp=True)
_add("flatten_method_2d_fortran", ["ndarray.flatten"], flatten_method,
     lambda: [fortran(normal(109, (3, 3))), weights(109, 9)], tags=("fortran",))


@njit
def transpose_fn(A, W):
    B = np.transpose(A)
    return (W * B ** 2).sum()


@njit
def transpose_axes_3d(T, W):
    B = np.transpose(T, (2, 0, 1))
    return (W * np.cos(B)).sum()


@njit
def dot_T_attr(A, W):
    return (A.T * W).sum() + (A.T[0] ** 2).sum()


@njit
def transpose_method(A, W):
    B = A.transpose()
    return ((B - W) ** 2).sum()


@njit
def swapaxes_3d(T, W):
    B = np.swapaxes(T, 0, 2)
    return (W * B * B).sum()


@njit
def expand_dims_bcast(x, A):
    row = np.expand_dims(x, 0)
    return ((A - row) ** 2).sum()


@njit
def newaxis_outer_tanh(x, y):
    return np.tanh(x[:, np.newaxis] * y[np.newaxis, :]).sum()


@njit
def none_index_scale(x, A):
    B = A * x[:, None]
    return (B * B).sum()


_add("transpose_2d_f64", ["np.transpose"], transpose_fn,
     lambda: [normal(110, (3, 4)), weights(110, (4, 3))], hvp=True)
_add("transpose_2d_fortran", ["np.transpose"], transpose_fn,
     lambda: [fortran(normal(111, (3, 4))), weights(111, (4, 3))], tags=("fortran",))
_add("transpose_axes_3d_f64", ["np.transpose", "np.cos"], transpose_axes_3d,
     lambda: [normal(112, (2, 3, 4)), weights(112, (4, 2, 3))])
_add("T_attr_2d_f64", ["ndarray.T", "basic indexing"], dot_T_attr,
     lambda: [normal(113, (3, 4)), weights(113, (4, 3))])
_add("T_attr_2d_strided", ["ndarray.T", "basic indexing"], dot_T_attr,
     lambda: [drop_first_col(normal(114, (3, 4))), weights(114, (4, 3))], tags=("strided",))
_add("transpose_method_2d_f32", ["ndarray.transpose"], transpose_method,
     lambda: [f32(normal(115, (2, 3))), f32(weights(115, (3, 2)))], tags=("float32",), hvp=True)
_add("swapaxes_3d_f64", ["np.swapaxes"], swapaxes_3d,
     lambda: [normal(116, (2, 3, 4)), weights(116, (4, 3, 2))], hvp=True)
_add("expand_dims_bcast_f64", ["np.expand_dims", "broadcasting"], expand_dims_bcast,
     lambda: [normal(117, 4), normal(1117, (3, 4))], wrt=(0, 1), hvp=True)
_add("newaxis_outer_tanh_f64", ["np.newaxis", "broadcasting", "np.tanh"], newaxis_outer_tanh,
     lambda: [normal(118, 4), normal(1118, 3)], wrt=(0, 1), hvp=True)
_add("none_index_scale_f64", ["np.newaxis", "broadcasting"], none_index_scale,
     lambda: [normal(119, 3), normal(1119, (3, 4))], wrt=(0, 1))


@njit
def concat_1d(x, y, w):
    z = np.concatenate((x, y ** 2))
    return (w * z).sum()


@njit
def concat_axis1(A, B, W):
    C = np.concatenate((A, B), axis=1)
    return (W * C * C).sum()


@njit
def concat_axis0(A, B, W):
    C = np.concatenate((A, np.exp(B)), axis=0)
    return (W * C).sum()


@njit
def stack_axis0(x, y, W):
    S = np.stack((x, np.sin(y)))
    return (W * S).sum()


@njit
def stack_axis1(x, y, W):
    S = np.stack((x, y, x * y), axis=1)
    return (W * S).sum()


@njit
def hstack_fn(x, y, w):
    h = np.hstack((x, y, x * y))
    return (w * h).sum()


@njit
def vstack_fn(A, x, W):
    V = np.vstack((A, x.reshape((1, x.size))))
    return (W * V * V).sum()


@njit
def column_stack_fn(x, y, W):
    C = np.column_stack((x, y))
    return (W * C ** 2).sum()


_add("concatenate_1d_f64", ["np.concatenate"], concat_1d,
     lambda: [normal(120, 3), normal(1120, 4), weights(120, 7)], wrt=(0, 1), hvp=True)
_add("concatenate_axis1_2d_f64", ["np.concatenate", "axis"], concat_axis1,
     lambda: [normal(121, (3, 2)), normal(1121, (3, 3)), weights(121, (3, 5))], wrt=(0, 1),
     tags=("late_import",))
_add("concatenate_axis0_2d_fortran", ["np.concatenate", "axis", "np.exp"], concat_axis0,
     lambda: [fortran(normal(122, (2, 3))), fortran(normal(1122, (3, 3), 0.5)),
              weights(122, (5, 3))], wrt=(0, 1), tags=("fortran",))
_add("concatenate_axis1_2d_f32", ["np.concatenate", "axis"], concat_axis1,
     lambda: [f32(normal(123, (2, 2))), f32(normal(1123, (2, 3))), f32(weights(123, (2, 5)))],
     wrt=(0, 1), tags=("float32",))
_add("stack_axis0_1d_f64", ["np.stack", "np.sin"], stack_axis0,
     lambda: [normal(124, 4), normal(1124, 4), weights(124, (2, 4))], wrt=(0, 1), hvp=True)
_add("stack_axis1_1d_f64", ["np.stack", "axis"], stack_axis1,
     lambda: [normal(125, 4), normal(1125, 4), weights(125, (4, 3))], wrt=(0, 1))
_add("hstack_1d_f64", ["np.hstack"], hstack_fn,
     lambda: [normal(126, 3), normal(1126, 3), weights(126, 9)], wrt=(0, 1), hvp=True)
_add("vstack_2d_1d_f64", ["np.vstack", "ndarray.reshape"], vstack_fn,
     lambda: [normal(127, (3, 4)), normal(1127, 4), weights(127, (4, 4))], wrt=(0, 1), hvp=True)
_add("column_stack_1d_f64", ["np.column_stack"], column_stack_fn,
     lambda: [normal(128, 4), normal(1128, 4), weights(128, (4, 2))], wrt=(0, 1), hvp=True)


@njit
def repeat_fn(x, w):
    r = np.repeat(x, 2)
    return (w * r * r).sum()


@njit
def repeat_method(A, w):
    r = A.repeat(3)
    return (w * np.sin(r)).sum()


@njit
def flip_fn(x, w):
    return (w * np.flip(x) ** 2).sum()


@njit
def fliplr_flipud(A, W):
    return (W * (np.fliplr(A) + 2.0 * np.flipud(A) ** 2)).sum()


@njit
def reverse_slice(x, w):
    return np.dot(w, x[::-1] * x)


@njit
def roll_fn(x, w):
    return (w * np.roll(x, 2) * x).sum()


_add("repeat_1d_f64", ["np.repeat"], repeat_fn, lambda: [normal(130, 4), weights(130, 8)], hvp=True)
_add("repeat_method_2d_f64", ["ndarray.repeat", "np.sin"], repeat_method,
     lambda: [normal(131, (2, 2)), weights(131, 12)], hvp=True)
_add("flip_1d_f64", ["np.flip"], flip_fn, lambda: [normal(132, 5), weights(132, 5)], hvp=True)
_add("flip_2d_f32", ["np.flip"], flip_fn,
     lambda: [f32(normal(133, (2, 3))), f32(weights(133, (2, 3)))], tags=("float32",))
_add("fliplr_flipud_2d_f64", ["np.fliplr", "np.flipud"], fliplr_flipud,
     lambda: [normal(134, (3, 3)), weights(134, (3, 3))], hvp=True)
_add("reverse_slice_1d_f64", ["slicing", "np.dot"], reverse_slice,
     lambda: [normal(135, 6), weights(135, 6)])
_add("roll_1d_f64", ["np.roll"], roll_fn, lambda: [normal(136, 6), weights(136, 6)], hvp=True)
_add("roll_2d_f64", ["np.roll"], roll_fn,
     lambda: [normal(137, (2, 3)), weights(137, (2, 3))], tags=("late_import",))


@njit
def copy_then_modify(x):
    y = np.copy(x)
    y[0] = 10.0 * y[1]
    y *= 2.0
    return (y * x).sum()


@njit
def copy_method_zero_col(A):
    B = A.copy()
    B[:, 0] = 0.0
    return (B ** 2).sum() + A[0, 0]


@njit
def ascontiguous_T(A, W):
    B = np.ascontiguousarray(A.T)
    return (W * np.exp(B)).sum()


@njit
def ascontiguous_view(x, w):
    y = np.ascontiguousarray(x)
    return np.dot(w, y * y)


@njit
def asfortran_sum(A, W):
    B = np.asfortranarray(A)
    return (W * B * B).sum()


_add("copy_np_1d_f64", ["np.copy", "basic indexing", "in-place operators"], copy_then_modify,
     lambda: [normal(140, 5)], hvp=True)
_add("copy_method_2d_fortran", ["ndarray.copy", "basic indexing"], copy_method_zero_col,
     lambda: [fortran(normal(141, (3, 3)))], tags=("fortran",))
_add("copy_method_2d_strided", ["ndarray.copy", "basic indexing"], copy_method_zero_col,
     lambda: [drop_first_col(normal(142, (3, 3)))], tags=("strided",))
_add("ascontiguousarray_T_2d_f64", ["np.ascontiguousarray", "ndarray.T", "np.exp"],
     ascontiguous_T, lambda: [normal(143, (3, 4), 0.5), weights(143, (4, 3))], hvp=True)
_add("ascontiguousarray_strided_1d", ["np.ascontiguousarray", "np.dot"], ascontiguous_view,
     lambda: [every_other(normal(144, 5)), weights(144, 5)], tags=("strided",))
_add("asfortranarray_2d_f64", ["np.asfortranarray"], asfortran_sum,
     lambda: [normal(145, (3, 4)), weights(145, (3, 4))], hvp=True)


@njit
def slice_stencil(x):
    return ((x[2:] - 2.0 * x[1:-1] + x[:-2]) ** 2).sum()


@njit
def slice_block(A, W):
    B = A[1:, :2]
    return (W * B ** 2).sum() + A[0, -1]


@njit
def checkerboard(A):
    return (A[::2, ::2] * A[1::2, 1::2]).sum()


@njit
def row_col(A, i, j):
    return (A[i] * A[:, j]).sum() + A[i, j] ** 2


@njit
def slice_write_shift(x):
    y = np.zeros_like(x)
    y[1:] = x[:-1] * 2.0
    y[0] = x[-1]
    return (y * x).sum()


@njit
def slice_write_2d(A, x):
    B = np.zeros((A.shape[0] + 1, A.shape[1]))
    B[1:, :] = A
    B[0, :] = x
    return (B[1:] * B[:-1]).sum()


_add("slice_stencil_1d_f64", ["slicing"], slice_stencil, lambda: [normal(150, 8)], hvp=True,
     tags=("late_import",))
_add("slice_stencil_1d_f32", ["slicing"], slice_stencil, lambda: [f32(normal(151, 8))],
     tags=("float32",))
_add("slice_stencil_1d_strided", ["slicing"], slice_stencil,
     lambda: [every_other(normal(152, 6))], tags=("strided",))
_add("slice_block_2d_f64", ["slicing", "basic indexing"], slice_block,
     lambda: [normal(153, (3, 4)), weights(153, (2, 2))])
_add("slice_step_2d_f64", ["slicing"], checkerboard, lambda: [normal(154, (4, 4))])
_add("slice_step_2d_fortran", ["slicing"], checkerboard, lambda: [fortran(normal(155, (4, 4)))],
     tags=("fortran",))
_add("row_col_index_2d_f64", ["basic indexing"], row_col,
     lambda: [normal(156, (4, 4)), 1, 2])
_add("slice_write_1d_f64", ["slicing", "np.zeros_like", "setitem"], slice_write_shift,
     lambda: [normal(157, 6)], hvp=True)
_add("slice_write_2d_f64", ["slicing", "np.zeros", "setitem"], slice_write_2d,
     lambda: [normal(158, (3, 3)), normal(1158, 3)], wrt=(0, 1), hvp=True)


@njit
def fancy_read(x, idx, w):
    return (w * x[idx] ** 2).sum()


@njit
def fancy_rows(A, idx, W):
    return (W * np.sin(A[idx])).sum()


@njit
def fancy_cols(A, idx):
    B = A[:, idx]
    return (B ** 2).sum() + B[0, 0]


@njit
def fancy_write(x, idx):
    y = np.zeros(8)
    y[idx] = x ** 2
    return (y * np.arange(8.0)).sum()


@njit
def fancy_add(x, idx, y0):
    y = y0.copy()
    y[idx] += np.sin(x)
    return (y * y).sum()


@njit
def take_fn(x, idx):
    return (np.take(x, idx) ** 2).sum()


@njit
def take_method(A, idx, w):
    return (w * A.take(idx)).sum()


_I5 = np.array([0, 3, 3, 5, 1])
_add("fancy_read_1d_f64", ["fancy indexing"], fancy_read,
     lambda: [normal(160, 6), _I5.copy(), weights(160, 5)], hvp=True, tags=("late_import",))
_add("fancy_read_1d_f32", ["fancy indexing"], fancy_read,
     lambda: [f32(normal(161, 6)), _I5.copy(), f32(weights(161, 5))], tags=("float32",))
_add("fancy_read_1d_strided", ["fancy indexing"], fancy_read,
     lambda: [every_other(normal(162, 6)), _I5.copy(), weights(162, 5)], tags=("strided",))
_add("fancy_rows_2d_f64", ["fancy indexing", "np.sin"], fancy_rows,
     lambda: [normal(163, (4, 3)), np.array([2, 0, 2]), weights(163, (3, 3))])
_add("fancy_cols_2d_f64", ["fancy indexing", "slicing"], fancy_cols,
     lambda: [normal(164, (3, 4)), np.array([3, 1])])
_add("fancy_write_1d_f64", ["fancy indexing", "setitem", "np.arange"], fancy_write,
     lambda: [normal(165, 4), np.array([6, 1, 3, 0])], hvp=True)
_add("fancy_add_1d_f64", ["fancy indexing", "setitem", "in-place operators"], fancy_add,
     lambda: [normal(166, 3), np.array([4, 0, 2]), normal(1166, 5)], wrt=(0, 2))
_add("take_1d_f64", ["np.take"], take_fn, lambda: [normal(167, 6), _I5.copy()], hvp=True)
_add("take_method_2d_f64", ["ndarray.take"], take_method,
     lambda: [normal(168, (3, 3)), np.array([8, 0, 4, 4]), weights(168, 4)], hvp=True)


@njit
def mask_read(x):
    return x[x > 0.0].sum() + (x[x < 0.0] ** 2).sum()


@njit
def mask_write_relu(x):
    y = x.copy()
    y[y < 0.0] = 0.0
    return (y * y).sum()


@njit
def mask_write_2d(A, W):
    B = A.copy()
    for i in range(B.shape[0]):
        row = B[i]
        row[row < 0.0] = 0.0
    return (W * B).sum()


@njit
def mask_const(x, m):
    return (x[m] ** 3).sum()


@njit
def where_leaky(x, w):
    return (w * np.where(x > 0.0, x, 0.1 * x)).sum()


@njit
def where_2d_bcast(A, b):
    return (np.where(A > b, A * A, b)).sum()


@njit
def where_scalar_branch(x):
    return (np.where(x > 0.5, np.exp(x), 0.0) * x).sum()


@njit
def where_indices(x):
    idx = np.where(x > 0.0)[0]
    return (x[idx] ** 2).sum()


@njit
def nonzero_indices(x):
    idx = np.nonzero(x < 0.0)[0]
    return np.sin(x[idx]).sum()


_add("mask_read_1d_f64", ["boolean mask"], mask_read, lambda: [away(170, 8)])
_add("mask_read_1d_f32", ["boolean mask"], mask_read, lambda: [f32(away(171, 8))],
     tags=("float32",))
_add("mask_write_1d_f64", ["boolean mask", "setitem"], mask_write_relu, lambda: [away(172, 7)],
     tags=("late_import",), hvp=True)
_add("mask_write_2d_f64", ["boolean mask", "setitem"], mask_write_2d,
     lambda: [away(173, (3, 4)), weights(173, (3, 4))])
_add("mask_write_2d_fortran", ["boolean mask", "setitem"], mask_write_2d,
     lambda: [fortran(away(174, (3, 4))), weights(174, (3, 4))], tags=("fortran",))
_add("mask_const_1d_f64", ["boolean mask"], mask_const,
     lambda: [normal(175, 6), np.array([True, False, True, True, False, True])])
_add("where_leaky_1d_f64", ["np.where"], where_leaky, lambda: [away(176, 7), weights(176, 7)])
_add("where_leaky_2d_f32", ["np.where"], where_leaky,
     lambda: [f32(away(177, (3, 3))), f32(weights(177, (3, 3)))], tags=("float32",))
_add("where_bcast_2d_1d_f64", ["np.where", "broadcasting"], where_2d_bcast,
     lambda: [distinct(178, (3, 4), -1.0, 1.0), distinct(1178, 4, -1.0, 1.0)], wrt=(0, 1))
_add("where_scalar_1d_f64", ["np.where", "np.exp"], where_scalar_branch,
     lambda: [distinct(179, 7, avoid=(0.5,))])
_add("where_indices_1d_f64", ["np.where", "fancy indexing"], where_indices,
     lambda: [away(180, 8)])
_add("nonzero_indices_1d_f64", ["np.nonzero", "fancy indexing", "np.sin"], nonzero_indices,
     lambda: [away(181, 8)], hvp=True)


@njit
def clip_fn(x):
    return (np.clip(x, -1.0, 1.0) ** 2).sum() + x.sum()


@njit
def clip_method(A, W):
    return (W * A.clip(-0.5, 0.8)).sum()


@njit
def clip_array_bounds(x, lo, hi):
    return (np.clip(x, lo, hi) * x).sum()


@njit
def maximum_minimum(x, y):
    return (np.maximum(x, y) * np.minimum(x, 0.5)).sum()


@njit
def relu_maximum(A, W):
    return (W * np.maximum(A, 0.0)).sum()


@njit
def abs_fn(x):
    return np.abs(x).sum() + (np.absolute(x) * x).sum()


@njit
def fabs_pow(A):
    return (np.fabs(A) ** 1.5).sum()


@njit
def sign_fn(x):
    return (np.sign(x) * x ** 2).sum()


@njit
def huber(x, delta):
    r = np.abs(x)
    return np.where(r < delta, 0.5 * x ** 2, delta * (r - 0.5 * delta)).sum()


_add("clip_1d_f64", ["np.clip"], clip_fn, lambda: [distinct(182, 8, avoid=(-1.0, 1.0))], hvp=True)
_add("clip_1d_f32", ["np.clip"], clip_fn, lambda: [f32(distinct(183, 8, avoid=(-1.0, 1.0)))],
     tags=("float32",))
_add("clip_method_2d_f64", ["ndarray.clip"], clip_method,
     lambda: [distinct(184, (3, 4), -1.5, 1.5, avoid=(-0.5, 0.8)), weights(184, (3, 4))], hvp=True)
_add("clip_array_bounds_1d_f64", ["np.clip"], clip_array_bounds,
     lambda: [distinct(185, 6, -2.0, 2.0), -np.full(6, 0.55) + 0.1 * np.arange(6) ** 0.5,
              np.full(6, 0.9)])
_add("maximum_minimum_1d_f64", ["np.maximum", "np.minimum"], maximum_minimum,
     lambda: [distinct(186, 6, avoid=(0.5,)), distinct(186, 6, avoid=(0.5,)) + away(1186, 6)],
     wrt=(0, 1), hvp=True)
_add("maximum_relu_2d_f64", ["np.maximum"], relu_maximum,
     lambda: [away(187, (3, 4)), weights(187, (3, 4))])
_add("maximum_relu_2d_strided", ["np.maximum"], relu_maximum,
     lambda: [drop_first_col(away(188, (3, 4))), weights(188, (3, 4))], tags=("strided",))
_add("abs_1d_f64", ["np.abs", "np.absolute"], abs_fn, lambda: [away(189, 7)], hvp=True)
_add("fabs_2d_f64", ["np.fabs", "**"], fabs_pow, lambda: [away(190, (3, 3))], hvp=True)
_add("fabs_2d_f32", ["np.fabs", "**"], fabs_pow, lambda: [f32(away(191, (3, 3)))],
     tags=("float32",))
_add("sign_1d_f64", ["np.sign"], sign_fn, lambda: [away(192, 7)], hvp=True)
_add("huber_1d_f64", ["np.abs", "np.where"], huber,
     lambda: [distinct(193, 8, avoid=(-1.0, 0.0, 1.0)), 1.0], hvp=True)


@njit
def sort_weighted(x, w):
    return (w * np.sort(x)).sum()


@njit
def sort_inplace(x, w):
    y = x.copy()
    y.sort()
    return np.dot(w, y * y)


@njit
def sort_rows_2d(A, W):
    return (W * np.sort(A)).sum()


@njit
def interp_values(fp, xq, xp, w):
    return (w * np.interp(xq, xp, fp)).sum()


@njit
def interp_query(xq, xp, fp, w):
    return (w * np.interp(xq, xp, fp)).sum()


@njit
def interp_scalar(s, xp, fp):
    return np.interp(s, xp, fp) ** 2


@njit
def outer_fn(x, y, W):
    return (W * np.outer(x, y)).sum() + (np.outer(x, x) ** 2).sum()


@njit
def kron_2d(a, b, W):
    return (W * np.kron(a, b)).sum()


@njit
def kron_1d(a, b, w):
    k = np.kron(a, b)
    return (w * k * k).sum()


_XP = np.arange(6.0)
_XQ = np.array([0.3, 1.6, 2.45, 3.8, 4.2, 0.75])
_add("sort_1d_f64", ["np.sort"], sort_weighted, lambda: [distinct(200, 8), weights(200, 8)],
     tags=("late_import",), hvp=True)
_add("sort_1d_f32", ["np.sort"], sort_weighted,
     lambda: [f32(distinct(201, 6)), f32(weights(201, 6))], tags=("float32",))
_add("sort_1d_strided", ["np.sort"], sort_weighted,
     lambda: [every_other(distinct(202, 6)), weights(202, 6)], tags=("strided",))
_add("sort_inplace_method_1d_f64", ["ndarray.sort", "np.dot"], sort_inplace,
     lambda: [distinct(203, 7), weights(203, 7)], hvp=True)
_add("sort_2d_f64", ["np.sort"], sort_rows_2d,
     lambda: [distinct(204, (3, 4)), weights(204, (3, 4))])
_add("interp_fp_1d_f64", ["np.interp"], interp_values,
     lambda: [normal(205, 6), _XQ.copy(), _XP.copy(), weights(205, 6)], hvp=True)
_add("interp_xq_1d_f64", ["np.interp"], interp_query,
     lambda: [_XQ.copy(), _XP.copy(), normal(206, 6), weights(206, 6)])
_add("interp_scalar_f64", ["np.interp"], interp_scalar,
     lambda: [2.3, _XP.copy(), normal(207, 6)], wrt=(0, 2))
_add("outer_1d_f64", ["np.outer"], outer_fn,
     lambda: [normal(208, 3), normal(1208, 4), weights(208, (3, 4))], wrt=(0, 1), hvp=True)
_add("outer_1d_f32", ["np.outer"], outer_fn,
     lambda: [f32(normal(209, 3)), f32(normal(1209, 4)), f32(weights(209, (3, 4)))],
     wrt=(0, 1), tags=("float32",))
_add("kron_2d_f64", ["np.kron"], kron_2d,
     lambda: [normal(210, (2, 2)), normal(1210, (2, 3)), weights(210, (4, 6))], wrt=(0, 1),
     hvp=True)
_add("kron_1d_f64", ["np.kron"], kron_1d,
     lambda: [normal(211, 3), normal(1211, 2), weights(211, 6)], wrt=(0, 1))


# =========================================================================================
# Elementwise ufuncs, operators, broadcasting
# =========================================================================================
@njit
def exp_sum(x):
    return np.exp(x).sum()


@njit
def log_weighted(A, W):
    return (W * np.log(A)).sum()


@njit
def sin_cos_mix(T):
    return np.sin(T).sum() + (np.cos(T) ** 2 * T).sum()


@njit
def tanh_weighted(A, W):
    return (W * np.tanh(A)).sum()


@njit
def sqrt_sum(x):
    return np.sqrt(x).sum()


@njit
def power_const(x):
    return np.power(x, 3.0).sum() + np.power(x, 0.5).sum()


@njit
def power_arrays(x, y):
    return np.power(x, y).sum()


@njit
def pow_operator(X, Y):
    return (X ** Y).sum()


@njit
def square_ops(x):
    return (x ** 2).sum() + np.square(x).mean() + (x ** 3).sum()


@njit
def pow_scalar_exponent(x, s):
    return (x ** s).sum()


@njit
def rpow(x):
    return (2.0 ** x).sum()


@njit
def more_ufuncs(x):
    return (np.log1p(x) + np.expm1(0.5 * x) + np.arctan(x) + np.sinh(x) * np.cosh(x)
            + np.arcsin(x / 3.0) + np.cbrt(x) + np.exp2(x) + np.log2(x) + np.log10(x)
            + np.reciprocal(x) + np.tan(0.3 * x) + np.arccos(x / 3.0) + np.arcsinh(x)).sum()


@njit
def arctan2_hypot(x, y):
    return (np.arctan2(y, x) + np.hypot(x, y)).sum()


@njit
def logaddexp_fn(x, y):
    return np.logaddexp(x, y).sum()


@njit
def ufunc_names(x, y):
    a = np.add(x, y)
    b = np.multiply(a, x)
    c = np.subtract(b, np.divide(y, x))
    d = np.negative(np.true_divide(c, 2.0))
    return (d * d).sum()


@njit
def ufunc_out(x, w):
    out = np.empty_like(x)
    np.exp(x, out)
    np.multiply(out, x, out)
    return (w * out).sum()


_add("exp_1d_f64", ["np.exp"], exp_sum, lambda: [normal(300, 8)], hvp=True)
_add("exp_3d_f32", ["np.exp"], exp_sum, lambda: [f32(normal(301, (2, 2, 2)))],
     tags=("float32",))
_add("log_2d_f64", ["np.log"], log_weighted,
     lambda: [positive(302, (3, 4)), weights(302, (3, 4))], hvp=True)
_add("log_2d_f32", ["np.log"], log_weighted,
     lambda: [f32(positive(303, (3, 4))), f32(weights(303, (3, 4)))], tags=("float32",))
_add("log_2d_fortran", ["np.log"], log_weighted,
     lambda: [fortran(positive(304, (3, 4))), weights(304, (3, 4))], tags=("fortran",))
_add("sin_cos_3d_f64", ["np.sin", "np.cos", "**"], sin_cos_mix, lambda: [normal(305, (2, 3, 2))],
     hvp=True)
_add("tanh_2d_f64", ["np.tanh"], tanh_weighted,
     lambda: [normal(306, (3, 4)), weights(306, (3, 4))], hvp=True)
_add("tanh_2d_f32_fortran", ["np.tanh"], tanh_weighted,
     lambda: [f32(fortran(normal(307, (3, 4)))), f32(weights(307, (3, 4)))],
     tags=("float32", "fortran"))
_add("sqrt_1d_f64", ["np.sqrt"], sqrt_sum, lambda: [positive(308, 7)], hvp=True)
_add("sqrt_1d_strided", ["np.sqrt"], sqrt_sum, lambda: [every_other(positive(309, 6))],
     tags=("strided",))
_add("power_const_1d_f64", ["np.power"], power_const, lambda: [positive(310, 6)])
_add("power_arrays_1d_f64", ["np.power"], power_arrays,
     lambda: [positive(311, 6), normal(1311, 6)], wrt=(0, 1), hvp=True)
_add("pow_operator_2d_f64", ["**"], pow_operator,
     lambda: [positive(312, (3, 3)), normal(1312, (3, 3))], wrt=(0, 1))
_add("pow_operator_2d_f32", ["**"], pow_operator,
     lambda: [f32(positive(313, (2, 3))), f32(normal(1313, (2, 3)))], wrt=(0, 1),
     tags=("float32",))
_add("square_ops_1d_f64", ["**", "np.square", "ndarray.mean"], square_ops,
     lambda: [normal(314, 6)], hvp=True)
_add("pow_scalar_exponent_1d_f64", ["**"], pow_scalar_exponent,
     lambda: [positive(315, 5), 1.7], wrt=(0, 1), hvp=True)
_add("rpow_1d_f64", ["**"], rpow, lambda: [normal(316, 6)])
_add("more_ufuncs_1d_f64", ["np.log1p", "np.expm1", "np.arctan", "np.sinh", "np.cosh",
                            "np.arcsin", "np.cbrt", "np.exp2", "np.log2", "np.log10",
                            "np.reciprocal", "np.tan", "np.arccos", "np.arcsinh"],
     more_ufuncs, lambda: [positive(317, 6, 0.3, 2.0)], hvp=True)
_add("more_ufuncs_1d_f32", ["np.log1p", "np.expm1", "np.arctan", "np.sinh", "np.cosh",
                            "np.arcsin", "np.cbrt", "np.exp2", "np.log2", "np.log10",
                            "np.reciprocal", "np.tan", "np.arccos", "np.arcsinh"],
     more_ufuncs, lambda: [f32(positive(318, 6, 0.3, 2.0))], tags=("float32",))
_add("arctan2_hypot_1d_f64", ["np.arctan2", "np.hypot"], arctan2_hypot,
     lambda: [positive(319, 5), normal(1319, 5)], wrt=(0, 1), hvp=True)
_add("logaddexp_1d_f64", ["np.logaddexp"], logaddexp_fn,
     lambda: [normal(320, 5), normal(1320, 5)], wrt=(0, 1))
_add("ufunc_names_1d_f64", ["np.add", "np.multiply", "np.subtract", "np.divide",
                            "np.negative", "np.true_divide"], ufunc_names,
     lambda: [positive(321, 5), normal(1321, 5)], wrt=(0, 1), hvp=True)
_add("ufunc_out_arg_1d_f64", ["np.exp", "np.multiply", "ufunc out", "np.empty_like"], ufunc_out,
     lambda: [normal(322, 6), weights(322, 6)], tags=("late_import",), hvp=True)


@njit
def bcast_2d_1d(A, b):
    return ((A + b) * (A - b) / (1.0 + b * b)).sum()


@njit
def bcast_column(A, c, W):
    return (W * np.exp(A * c[:, None])).sum()


@njit
def bcast_3d_2d(T, M):
    return ((T * M) ** 2).sum()


@njit
def bcast_3d_1d(T, v):
    return np.sin(T + v).sum()


@njit
def scalar_and_array(x, s):
    return (s * x + s ** 2 / x).sum()


@njit
def inplace_ops(x, y):
    z = x.copy()
    z += y
    z *= x
    z /= (1.0 + y * y)
    z -= 0.5
    return (z * z).sum()


@njit
def inplace_bcast_2d(A, b):
    B = A.copy()
    B -= b
    B *= B
    return B.sum()


@njit
def row_normalize(A, W):
    norms = np.sqrt((A * A).sum(axis=1))
    B = A / norms[:, None]
    return (W * B).sum()


@njit
def sigmoid_dot(x, w):
    s = 1.0 / (1.0 + np.exp(-x))
    return np.dot(w, s)


@njit
def softplus(x):
    return np.log1p(np.exp(x)).sum()


@njit
def elementwise_fortran(A, B):
    return (np.exp(A) * B + A / B).sum()


@njit
def pairwise_sq_dist(X, W):
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(axis=2)
    return (W * D).sum()


_add("bcast_2d_1d_f64", ["broadcasting", "+", "-", "*", "/"], bcast_2d_1d,
     lambda: [normal(330, (3, 4)), normal(1330, 4)], wrt=(0, 1), hvp=True)
_add("bcast_2d_1d_f32", ["broadcasting", "+", "-", "*", "/"], bcast_2d_1d,
     lambda: [f32(normal(331, (3, 4))), f32(normal(1331, 4))], wrt=(0, 1), tags=("float32",))
_add("bcast_2d_1d_fortran", ["broadcasting", "+", "-", "*", "/"], bcast_2d_1d,
     lambda: [fortran(normal(332, (3, 4))), normal(1332, 4)], wrt=(0, 1), tags=("fortran",))
_add("bcast_2d_1d_strided", ["broadcasting", "+", "-", "*", "/"], bcast_2d_1d,
     lambda: [drop_first_col(normal(333, (3, 4))), every_other(normal(1333, 4))], wrt=(0, 1),
     tags=("strided",))
_add("bcast_column_2d_f64", ["broadcasting", "np.newaxis", "np.exp"], bcast_column,
     lambda: [normal(334, (3, 4), 0.5), normal(1334, 3, 0.5), weights(334, (3, 4))],
     wrt=(0, 1))
_add("bcast_3d_2d_f64", ["broadcasting"], bcast_3d_2d,
     lambda: [normal(335, (2, 3, 4)), normal(1335, (3, 4))], wrt=(0, 1))
_add("bcast_3d_1d_f32", ["broadcasting", "np.sin"], bcast_3d_1d,
     lambda: [f32(normal(336, (2, 2, 3))), f32(normal(1336, 3))], wrt=(0, 1),
     tags=("float32",))
_add("scalar_array_active_f64", ["broadcasting", "**"], scalar_and_array,
     lambda: [positive(337, 5), 0.8], wrt=(0, 1))
_add("scalar_array_active_f32", ["broadcasting", "**"], scalar_and_array,
     lambda: [f32(positive(338, 5)), np.float32(0.8)], wrt=(0, 1), tags=("float32",))
_add("inplace_ops_1d_f64", ["in-place operators"], inplace_ops,
     lambda: [normal(339, 5), normal(1339, 5)], wrt=(0, 1))
_add("inplace_bcast_2d_f64", ["in-place operators", "broadcasting"], inplace_bcast_2d,
     lambda: [normal(340, (3, 4)), normal(1340, 4)], wrt=(0, 1))
_add("row_normalize_2d_f64", ["ndarray.sum", "axis", "np.sqrt", "np.newaxis", "broadcasting"],
     row_normalize, lambda: [normal(341, (3, 4)), weights(341, (3, 4))])
_add("sigmoid_dot_1d_f64", ["np.exp", "np.dot"], sigmoid_dot,
     lambda: [normal(342, 6), weights(342, 6)], hvp=True, tags=("late_import",))
_add("softplus_1d_f64", ["np.log1p", "np.exp"], softplus, lambda: [normal(343, 6)])
_add("elementwise_2d_fortran", ["np.exp", "*", "/"], elementwise_fortran,
     lambda: [fortran(normal(344, (3, 3), 0.5)), fortran(positive(1344, (3, 3)))], wrt=(0, 1),
     tags=("fortran",))
_add("pairwise_sq_dist_3d_bcast", ["broadcasting", "np.newaxis", "ndarray.sum", "axis"],
     pairwise_sq_dist, lambda: [normal(345, (4, 2)), weights(345, (4, 4))], hvp=True)


# =========================================================================================
# Products: dot, vdot, @, outer, ndarray.dot
# =========================================================================================
@njit
def dot_11(x, y):
    return np.dot(x, y) ** 2 + np.dot(x, x)


@njit
def dot_21(A, x, w):
    return (w * np.dot(A, x) ** 2).sum()


@njit
def dot_12(x, A, w):
    return (w * np.dot(x, A)).sum()


@njit
def dot_22(A, B, W):
    return (W * np.dot(A, B)).sum()


@njit
def matmul_11(x, y):
    return x @ y


@njit
def matmul_21(A, x):
    r = A @ x
    return (r * r).sum()


@njit
def matmul_12(x, A, w):
    return (w * np.tanh(x @ A)).sum()


@njit
def matmul_22(A, B, W):
    return (W * (A @ B)).sum()


@njit
def matmul_AT_B(A, B, W):
    return (W * (A.T @ B)).sum()


@njit
def matmul_A_BT(A, B, W):
    return (W * (A @ B.T)).sum()


@njit
def gram_matrix(A, W):
    G = A.T @ A
    return (W * G).sum()


@njit
def quad_form(x, A):
    return x @ A @ x


@njit
def vdot_fn(x, y):
    return np.vdot(x, y) * np.vdot(x, x)


@njit
def ndarray_dot_method(A, x, w):
    return (w * A.dot(x)).sum()


@njit
def outer_via_matmul(x, y, W):
    return (W * (x[:, None] @ y[None, :])).sum()


@njit
def chain_matmul(A, B, C, W):
    return (W * (A @ B @ C)).sum()


@njit
def matmul_x_AT(x, A, w):
    return np.dot(w, x @ A.T)


_add("dot_1d_1d_f64", ["np.dot"], dot_11, lambda: [normal(400, 5), normal(1400, 5)],
     wrt=(0, 1), hvp=True)
_add("dot_1d_1d_f32", ["np.dot"], dot_11, lambda: [f32(normal(401, 5)), f32(normal(1401, 5))],
     wrt=(0, 1), tags=("float32",))
_add("dot_1d_1d_strided", ["np.dot"], dot_11,
     lambda: [every_other(normal(402, 5)), normal(1402, 5)], wrt=(0, 1), tags=("strided",))
_add("dot_2d_1d_f64", ["np.dot"], dot_21,
     lambda: [normal(403, (3, 4)), normal(1403, 4), weights(403, 3)], wrt=(0, 1),
     tags=("late_import",))
_add("dot_2d_1d_fortran", ["np.dot"], dot_21,
     lambda: [fortran(normal(404, (3, 4))), normal(1404, 4), weights(404, 3)], wrt=(0, 1),
     tags=("fortran",))
_add("dot_1d_2d_f64", ["np.dot"], dot_12,
     lambda: [normal(405, 3), normal(1405, (3, 4)), weights(405, 4)], wrt=(0, 1))
_add("dot_2d_2d_f64", ["np.dot"], dot_22,
     lambda: [normal(406, (3, 4)), normal(1406, (4, 2)), weights(406, (3, 2))], wrt=(0, 1))
_add("dot_2d_2d_f32", ["np.dot"], dot_22,
     lambda: [f32(normal(407, (3, 4))), f32(normal(1407, (4, 2))), f32(weights(407, (3, 2)))],
     wrt=(0, 1), tags=("float32",))
_add("matmul_1d_1d_f64", ["@"], matmul_11, lambda: [normal(408, 6), normal(1408, 6)],
     wrt=(0, 1))
_add("matmul_2d_1d_f64", ["@"], matmul_21, lambda: [normal(409, (3, 4)), normal(1409, 4)],
     wrt=(0, 1), hvp=True)
_add("matmul_2d_1d_f32", ["@"], matmul_21,
     lambda: [f32(normal(410, (3, 4))), f32(normal(1410, 4))], wrt=(0, 1), tags=("float32",))
_add("matmul_2d_1d_fortran", ["@"], matmul_21,
     lambda: [fortran(normal(411, (4, 3))), normal(1411, 3)], wrt=(0, 1), tags=("fortran",))
_add("matmul_2d_1d_strided", ["@"], matmul_21,
     lambda: [drop_first_col(normal(412, (3, 4))), normal(1412, 4)], wrt=(0, 1),
     tags=("strided",))
_add("matmul_1d_2d_f64", ["@", "np.tanh"], matmul_12,
     lambda: [normal(413, 3), normal(1413, (3, 4)), weights(413, 4)], wrt=(0, 1))
_add("matmul_2d_2d_f64", ["@"], matmul_22,
     lambda: [normal(414, (3, 4)), normal(1414, (4, 2)), weights(414, (3, 2))], wrt=(0, 1),
     tags=("late_import",))
_add("matmul_2d_2d_f32", ["@"], matmul_22,
     lambda: [f32(normal(415, (3, 4))), f32(normal(1415, (4, 2))), f32(weights(415, (3, 2)))],
     wrt=(0, 1), tags=("float32",))
_add("matmul_2d_2d_fortran", ["@"], matmul_22,
     lambda: [fortran(normal(416, (3, 4))), fortran(normal(1416, (4, 2))),
              weights(416, (3, 2))], wrt=(0, 1), tags=("fortran",))
_add("matmul_2d_2d_mixed_layout", ["@"], matmul_22,
     lambda: [normal(417, (3, 4)), fortran(normal(1417, (4, 2))), weights(417, (3, 2))],
     wrt=(0, 1), tags=("fortran",))
_add("matmul_2d_2d_strided", ["@"], matmul_22,
     lambda: [drop_first_col(normal(418, (3, 4))), normal(1418, (4, 2)), weights(418, (3, 2))],
     wrt=(0, 1), tags=("strided",))
_add("matmul_AT_B_f64", ["@", "ndarray.T"], matmul_AT_B,
     lambda: [normal(419, (4, 3)), normal(1419, (4, 2)), weights(419, (3, 2))], wrt=(0, 1))
_add("matmul_A_BT_f64", ["@", "ndarray.T"], matmul_A_BT,
     lambda: [normal(420, (3, 4)), normal(1420, (2, 4)), weights(420, (3, 2))], wrt=(0, 1))
_add("matmul_AT_B_fortran_f32", ["@", "ndarray.T"], matmul_AT_B,
     lambda: [f32(fortran(normal(421, (4, 3)))), f32(fortran(normal(1421, (4, 2)))),
              f32(weights(421, (3, 2)))], wrt=(0, 1), tags=("fortran", "float32"))
_add("gram_matrix_f64", ["@", "ndarray.T"], gram_matrix,
     lambda: [normal(422, (4, 3)), weights(422, (3, 3))])
_add("quad_form_f64", ["@"], quad_form, lambda: [normal(423, 4), normal(1423, (4, 4))],
     wrt=(0, 1), hvp=True)
_add("vdot_1d_f64", ["np.vdot"], vdot_fn, lambda: [normal(424, 5), normal(1424, 5)], wrt=(0, 1),
     hvp=True)
_add("ndarray_dot_method_f64", ["ndarray.dot"], ndarray_dot_method,
     lambda: [normal(425, (3, 4)), normal(1425, 4), weights(425, 3)], wrt=(0, 1), hvp=True)
_add("outer_via_matmul_f64", ["@", "np.newaxis"], outer_via_matmul,
     lambda: [normal(426, 3), normal(1426, 4), weights(426, (3, 4))], wrt=(0, 1))
_add("chain_matmul_f64", ["@"], chain_matmul,
     lambda: [normal(427, (2, 3)), normal(1427, (3, 4)), normal(2427, (4, 2)),
              weights(427, (2, 2))], wrt=(0, 1, 2))
_add("matmul_1d_2dT_f64", ["@", "ndarray.T", "np.dot"], matmul_x_AT,
     lambda: [normal(428, 4), normal(1428, (3, 4)), weights(428, 3)], wrt=(0, 1))


# =========================================================================================
# Linear algebra
# =========================================================================================
@njit
def solve_vec(A, b, w):
    x = np.linalg.solve(A, b)
    return np.dot(w, x)


@njit
def solve_mat(A, B, W):
    X = np.linalg.solve(A, B)
    return (W * X).sum()


@njit
def inv_weighted(A, W):
    return (W * np.linalg.inv(A)).sum()


@njit
def inv_quadratic(S, x):
    return x @ np.linalg.inv(S) @ x


@njit
def det_fn(A):
    return np.linalg.det(A)


@njit
def slogdet_fn(A):
    sign, logabs = np.linalg.slogdet(A)
    return sign * logabs


@njit
def cholesky_logdet(A):
    n = A.shape[0]
    S = A @ A.T + n * np.eye(n)
    L = np.linalg.cholesky(S)
    return 2.0 * np.log(np.diag(L)).sum()


@njit
def cholesky_weighted(S0, W):
    S = 0.5 * (S0 + S0.T)
    L = np.linalg.cholesky(S)
    return (W * L).sum()


@njit
def lstsq_coef(A, b, w):
    x, res, rank, sv = np.linalg.lstsq(A, b)
    return np.dot(w, x)


@njit
def lstsq_resid(A, b):
    x = np.linalg.lstsq(A, b)[0]
    r = A @ x - b
    return (r * r).sum()


@njit
def eigh_values(S0, c):
    S = 0.5 * (S0 + S0.T)
    w, v = np.linalg.eigh(S)
    return (c * w).sum()


@njit
def eigvalsh_fn(S0, c):
    S = 0.5 * (S0 + S0.T)
    w = np.linalg.eigvalsh(S)
    return (c * w * w).sum()


@njit
def eigh_vectors(S0, W):
    S = 0.5 * (S0 + S0.T)
    w, v = np.linalg.eigh(S)
    return (W * v * v).sum()          # invariant under the sign of each eigenvector


@njit
def svd_values(A, c):
    u, s, vt = np.linalg.svd(A)
    return (c * s).sum()


@njit
def svd_thin(A, c, W):
    u, s, vt = np.linalg.svd(A, full_matrices=False)
    return (c * s ** 2).sum() + (W * (u * u)).sum()


@njit
def qr_absdiag(A):
    q, r = np.linalg.qr(A)
    return np.log(np.abs(np.diag(r))).sum()


@njit
def qr_product(A, W):
    q, r = np.linalg.qr(A)
    return (W * (q @ r)).sum()


@njit
def qr_q_squares(A, W):
    q, r = np.linalg.qr(A)
    return (W * q * q).sum()


@njit
def qr_weighted(A, WQ, WR):
    q, r = np.linalg.qr(A)
    return (WQ * q).sum() + (WR * r * r).sum()


@njit
def pinv_weighted(A, W):
    return (W * np.linalg.pinv(A)).sum()


@njit
def matrix_power_fn(A, W):
    return (W * np.linalg.matrix_power(A, 3)).sum()


@njit
def cond_fn(A):
    return np.linalg.cond(A)


_add("solve_vec_f64", ["np.linalg.solve", "np.dot"], solve_vec,
     lambda: [well(500, 4), normal(1500, 4), weights(500, 4)], wrt=(0, 1), hvp=True,
     tags=("linalg", "late_import"))
_add("solve_vec_f32", ["np.linalg.solve", "np.dot"], solve_vec,
     lambda: [f32(well(501, 3)), f32(normal(1501, 3)), f32(weights(501, 3))], wrt=(0, 1),
     tags=("linalg", "float32"))
_add("solve_vec_fortran", ["np.linalg.solve", "np.dot"], solve_vec,
     lambda: [fortran(well(502, 4)), normal(1502, 4), weights(502, 4)], wrt=(0, 1),
     tags=("linalg", "fortran"))
_add("solve_mat_f64", ["np.linalg.solve"], solve_mat,
     lambda: [well(503, 3), normal(1503, (3, 2)), weights(503, (3, 2))], wrt=(0, 1),
     tags=("linalg",))
_add("inv_f64", ["np.linalg.inv"], inv_weighted, lambda: [well(504, 3), weights(504, (3, 3))],
     hvp=True, tags=("linalg",))
_add("inv_f32", ["np.linalg.inv"], inv_weighted,
     lambda: [f32(well(505, 3)), f32(weights(505, (3, 3)))], tags=("linalg", "float32"))
_add("inv_fortran", ["np.linalg.inv"], inv_weighted,
     lambda: [fortran(well(506, 4)), weights(506, (4, 4))], tags=("linalg", "fortran"))
_add("inv_quadratic_f64", ["np.linalg.inv", "@"], inv_quadratic,
     lambda: [spd(507, 3), normal(1507, 3)], wrt=(0, 1), tags=("linalg",))
_add("det_f64", ["np.linalg.det"], det_fn, lambda: [well(508, 4)], hvp=True,
     tags=("linalg", "late_import"))
_add("det_f32", ["np.linalg.det"], det_fn, lambda: [f32(well(509, 3))],
     tags=("linalg", "float32"))
_add("det_fortran", ["np.linalg.det"], det_fn, lambda: [fortran(well(510, 3))],
     tags=("linalg", "fortran"))
_add("slogdet_f64", ["np.linalg.slogdet"], slogdet_fn, lambda: [well(511, 4)], hvp=True,
     tags=("linalg",))
_add("cholesky_logdet_f64", ["np.linalg.cholesky", "np.diag", "np.eye", "@", "np.log"],
     cholesky_logdet, lambda: [normal(512, (3, 3))], hvp=True, tags=("linalg",))
_add("cholesky_weighted_f64", ["np.linalg.cholesky"], cholesky_weighted,
     lambda: [spd(513, 4), np.tril(weights(513, (4, 4)))], tags=("linalg", "late_import"))
_add("cholesky_weighted_fortran", ["np.linalg.cholesky"], cholesky_weighted,
     lambda: [fortran(spd(514, 3)), np.tril(weights(514, (3, 3)))], tags=("linalg", "fortran"))
_add("lstsq_coef_f64", ["np.linalg.lstsq", "np.dot"], lstsq_coef,
     lambda: [singular(515, 6, 3), normal(1515, 6), weights(515, 3)], wrt=(0, 1),
     tags=("linalg",), hvp=True)
# fewer rows than columns: the minimum-norm solution (was a silently wrong derivative)
_add("lstsq_coef_wide_f64", ["np.linalg.lstsq", "np.dot"], lstsq_coef,
     lambda: [singular(519, 3, 5), normal(1519, 3), weights(519, 5)], wrt=(0, 1),
     tags=("linalg",), hvp=True)
_add("lstsq_coef_f32", ["np.linalg.lstsq", "np.dot"], lstsq_coef,
     lambda: [f32(singular(520, 5, 3)), f32(normal(1520, 5)), f32(weights(520, 3))],
     wrt=(0, 1), tags=("linalg", "float32"))
_add("lstsq_resid_f64", ["np.linalg.lstsq", "@"], lstsq_resid,
     lambda: [singular(516, 5, 2), normal(1516, 5)], wrt=(0, 1), tags=("linalg",))
_add("eigh_values_f64", ["np.linalg.eigh"], eigh_values,
     lambda: [spectral(517, 4), weights(517, 4)], hvp=True, tags=("linalg",))
_add("eigh_values_f32", ["np.linalg.eigh"], eigh_values,
     lambda: [f32(spectral(518, 3)), f32(weights(518, 3))], tags=("linalg", "float32"))
_add("eigvalsh_f64", ["np.linalg.eigvalsh"], eigvalsh_fn,
     lambda: [spectral(519, 4), weights(519, 4)], tags=("linalg",), hvp=True)
_add("eigh_vectors_f64", ["np.linalg.eigh"], eigh_vectors,
     lambda: [spectral(520, 3), weights(520, (3, 3))], tags=("linalg",))
_add("eigh_vectors_fortran", ["np.linalg.eigh"], eigh_vectors,
     lambda: [fortran(spectral(521, 3)), weights(521, (3, 3))], tags=("linalg", "fortran"))
_add("svd_values_f64", ["np.linalg.svd"], svd_values,
     lambda: [singular(522, 4, 3), weights(522, 3)], tags=("linalg", "late_import"), hvp=True)
_add("svd_values_f32", ["np.linalg.svd"], svd_values,
     lambda: [f32(singular(523, 3, 3)), f32(weights(523, 3))], tags=("linalg", "float32"))
_add("svd_thin_f64", ["np.linalg.svd"], svd_thin,
     lambda: [singular(524, 4, 3), weights(524, 3), weights(1524, (4, 3))], tags=("linalg",))
_add("qr_absdiag_f64", ["np.linalg.qr", "np.diag", "np.abs", "np.log"], qr_absdiag,
     lambda: [well(525, 4)], tags=("linalg",), hvp=True)
_add("qr_product_f64", ["np.linalg.qr", "@"], qr_product,
     lambda: [normal(526, (4, 3)), weights(526, (4, 3))], tags=("linalg",))
_add("qr_q_squares_f64", ["np.linalg.qr"], qr_q_squares,
     lambda: [well(527, 3), weights(527, (3, 3))], tags=("linalg",))
_add("qr_wide_f64", ["np.linalg.qr"], qr_weighted,
     lambda: [normal(529, (3, 5)), weights(529, (3, 3)), weights(1529, (3, 5))],
     tags=("linalg",))
_add("pinv_f64", ["np.linalg.pinv"], pinv_weighted,
     lambda: [singular(528, 5, 3), weights(528, (3, 5))], tags=("linalg",), hvp=True)
_add("matrix_power_f64", ["np.linalg.matrix_power"], matrix_power_fn,
     lambda: [normal(529, (3, 3), 0.7), weights(529, (3, 3))], tags=("linalg",), hvp=True)
_add("cond_f64", ["np.linalg.cond"], cond_fn, lambda: [singular(530, 3, 3)], tags=("linalg",),
     hvp=True)


# =========================================================================================
# Composites: small models written the way users write them
# =========================================================================================
@njit
def logsumexp(x):
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


@njit
def gmm_loglik(means, X, logw, inv_var):
    n, d = X.shape
    k = means.shape[0]
    logp = np.empty((n, k))
    for j in range(k):
        diff = X - means[j]
        logp[:, j] = logw[j] - 0.5 * inv_var * (diff * diff).sum(axis=1)
    total = 0.0
    for i in range(n):
        m = np.max(logp[i])
        total += m + np.log(np.sum(np.exp(logp[i] - m)))
    return total


@njit
def mlp_mse(W1, b1, W2, b2, X, y):
    h = np.tanh(X @ W1 + b1)
    pred = h @ W2 + b2
    return np.mean((pred - y) ** 2)


@njit
def softmax_xent(logits, labels):
    n = logits.shape[0]
    loss = 0.0
    for i in range(n):
        z = logits[i] - np.max(logits[i])
        loss += np.log(np.sum(np.exp(z))) - z[labels[i]]
    return loss / n


@njit
def linear_softmax_xent(W, X, Y):
    Z = X @ W
    m = np.empty(Z.shape[0])
    for i in range(Z.shape[0]):
        m[i] = Z[i].max()
    Z = Z - m[:, None]
    logZ = np.log(np.exp(Z).sum(axis=1))
    return -(Y * (Z - logZ[:, None])).sum() / Z.shape[0]


@njit
def least_squares_solve(X, y, lam):
    d = X.shape[1]
    beta = np.linalg.solve(X.T @ X + lam * np.eye(d), X.T @ y)
    r = X @ beta - y
    return r @ r


@njit
def gp_nlml(theta, X, y):
    ell = np.exp(theta[0])
    sf2 = np.exp(2.0 * theta[1])
    sn2 = np.exp(2.0 * theta[2])
    n = X.shape[0]
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(axis=2)
    K = sf2 * np.exp(-0.5 * D / ell ** 2) + sn2 * np.eye(n)
    L = np.linalg.cholesky(K)
    a = np.linalg.solve(L, y)
    return 0.5 * (a @ a) + np.log(np.diag(L)).sum() + 0.5 * n * np.log(2.0 * np.pi)


@njit
def ode_euler_logistic(y0, k, dt, nsteps):
    y = y0.copy()
    for _ in range(nsteps):
        y = y + dt * k * y * (1.0 - y)
    return np.sum(y ** 2)


@njit
def _rhs(A, y):
    return np.tanh(A @ y)


@njit
def ode_rk4(y0, A, dt, nsteps):
    y = y0.copy()
    for _ in range(nsteps):
        k1 = _rhs(A, y)
        k2 = _rhs(A, y + 0.5 * dt * k1)
        k3 = _rhs(A, y + 0.5 * dt * k2)
        k4 = _rhs(A, y + dt * k3)
        y = y + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return y @ y


@njit
def kmeans_objective(centers, X):
    loss = 0.0
    for i in range(X.shape[0]):
        d2 = ((centers - X[i]) ** 2).sum(axis=1)
        j = np.argmin(d2)
        loss += d2[j]
    return loss


@njit
def logistic_regression(w, X, y):
    z = X @ w
    return np.logaddexp(0.0, -y * z).sum() + 0.5 * np.dot(w, w)


@njit
def attention(Q, K, V, W):
    d = Q.shape[1]
    S = Q @ K.T / np.sqrt(d)
    P = np.empty_like(S)
    for i in range(S.shape[0]):
        e = np.exp(S[i] - S[i].max())
        P[i] = e / e.sum()
    return (W * (P @ V)).sum()


@njit
def polyfit_vander(c, x, y):
    V = np.vander(x, c.shape[0])
    r = V @ c - y
    return (r * r).sum()


@njit
def cov_logdet(X):
    C = np.cov(X) + np.eye(X.shape[0])
    sign, logdet = np.linalg.slogdet(C)
    return logdet


@njit
def heat_explicit(u0, alpha, nsteps):
    u = u0.copy()
    for _ in range(nsteps):
        lap = np.zeros_like(u)
        lap[1:-1] = u[2:] - 2.0 * u[1:-1] + u[:-2]
        u = u + alpha * lap
    return (u * u).sum()


@njit
def pair_energy(X):
    n = X.shape[0]
    e = 0.0
    for i in range(n):
        d = X[i + 1:] - X[i]
        r2 = (d * d).sum(axis=1)
        e += (1.0 / r2).sum() + np.exp(-r2).sum()
    return e


def _gmm_args(seed):
    rng = _rng(seed)
    means = rng.standard_normal((3, 2)) * 2.0
    X = rng.standard_normal((6, 2)) * 1.5
    return [means, X, np.log(np.array([0.2, 0.3, 0.5])), 0.8]


def _mlp_args(seed):
    rng = _rng(seed)
    return [rng.standard_normal((3, 4)) * 0.5, rng.standard_normal(4) * 0.1,
            rng.standard_normal(4) * 0.5, 0.1, rng.standard_normal((6, 3)),
            rng.standard_normal(6)]


def _kmeans_args(seed):
    rng = _rng(seed)
    centers = np.array([[-2.0, 0.0], [2.0, 0.5], [0.0, 2.5]])
    X = centers[rng.integers(0, 3, 8)] + 0.4 * rng.standard_normal((8, 2))
    return [centers + 0.1 * rng.standard_normal((3, 2)), X]


def _onehot(seed, n, k):
    Y = np.zeros((n, k))
    Y[np.arange(n), _rng(seed).integers(0, k, n)] = 1.0
    return Y


_add("logsumexp_1d_f64", ["np.max", "np.exp", "np.log", "np.sum"], logsumexp,
     lambda: [normal(600, 6)], hvp=True, tags=("composite", "late_import"))
_add("logsumexp_1d_f32", ["np.max", "np.exp", "np.log", "np.sum"], logsumexp,
     lambda: [f32(normal(601, 6))], hvp=True, tags=("composite", "float32"))
_add("gmm_loglik_f64", ["np.max", "np.exp", "np.log", "np.sum", "ndarray.sum", "axis",
                        "broadcasting", "np.empty"], gmm_loglik,
     lambda: _gmm_args(602), wrt=(0, 2), hvp=True, tags=("composite",))
_add("mlp_mse_f64", ["@", "np.tanh", "np.mean", "broadcasting"], mlp_mse,
     lambda: _mlp_args(603), wrt=(0, 1, 2, 3), hvp=True, tags=("composite", "late_import"))
_add("softmax_xent_f64", ["np.max", "np.exp", "np.log", "np.sum", "basic indexing"],
     softmax_xent, lambda: [normal(604, (5, 4)), _rng(604).integers(0, 4, 5)], hvp=True,
     tags=("composite",))
_add("linear_softmax_xent_f64", ["@", "ndarray.max", "np.exp", "np.log", "ndarray.sum",
                                 "axis", "np.newaxis"], linear_softmax_xent,
     lambda: [normal(605, (3, 4)), normal(1605, (5, 3)), _onehot(605, 5, 4)],
     tags=("composite",))
_add("least_squares_solve_f64", ["np.linalg.solve", "@", "ndarray.T", "np.eye"],
     least_squares_solve,
     lambda: [normal(606, (6, 3)), normal(1606, 6), 0.3], wrt=(0, 1, 2), hvp=True,
     tags=("composite", "linalg"))
_add("gp_nlml_f64", ["np.linalg.cholesky", "np.linalg.solve", "np.exp", "np.log", "np.diag",
                     "np.eye", "broadcasting", "np.newaxis", "@"], gp_nlml,
     lambda: [np.array([0.1, 0.2, -1.0]), normal(607, (5, 2)), normal(1607, 5)], hvp=True,
     tags=("composite", "linalg"))
_add("ode_euler_logistic_f64", ["ndarray.copy", "np.sum", "broadcasting"], ode_euler_logistic,
     lambda: [positive(608, 4, 0.1, 0.9), positive(1608, 4, 0.5, 1.5), 0.1, 20], wrt=(0, 1),
     hvp=True, tags=("composite",))
_add("ode_rk4_tanh_f64", ["@", "np.tanh"], ode_rk4,
     lambda: [normal(609, 3), normal(1609, (3, 3), 0.5), 0.1, 10], wrt=(0, 1), hvp=True,
     tags=("composite",))
_add("kmeans_objective_f64", ["np.argmin", "ndarray.sum", "axis", "broadcasting"],
     kmeans_objective, lambda: _kmeans_args(610), tags=("composite", "late_import"))
_add("logistic_regression_f64", ["@", "np.logaddexp", "np.dot"], logistic_regression,
     lambda: [normal(611, 3), normal(1611, (8, 3)),
              np.where(_rng(611).random(8) < 0.5, -1.0, 1.0)], hvp=True, tags=("composite",))
_add("attention_f64", ["@", "ndarray.T", "np.exp", "ndarray.max", "np.empty_like"], attention,
     lambda: [normal(612, (3, 2)), normal(1612, (4, 2)), normal(2612, (4, 2)),
              weights(612, (3, 2))], wrt=(0, 1, 2), hvp=True, tags=("composite",))
_add("polyfit_vander_f64", ["np.vander", "@"], polyfit_vander,
     lambda: [normal(613, 3), np.linspace(-1.0, 1.0, 7), normal(1613, 7)], wrt=(0, 1),
     tags=("composite",), hvp=True)
_add("cov_logdet_f64", ["np.cov", "np.linalg.slogdet", "np.eye"], cov_logdet,
     lambda: [normal(614, (3, 6))], tags=("composite", "linalg"), hvp=True)
_add("heat_explicit_f64", ["np.zeros_like", "slicing", "setitem"], heat_explicit,
     lambda: [normal(615, 8), 0.2, 10], wrt=(0, 1), tags=("composite",))
_add("pair_energy_f64", ["slicing", "broadcasting", "ndarray.sum", "axis", "np.exp"],
     pair_energy, lambda: [distinct(616, (4, 2), -2.0, 2.0)], tags=("composite",))


# =========================================================================================
# Containers used inside functions: lists, tuples, dicts, a jitclass
# =========================================================================================
@njit
def list_literal(x):
    arrs = [x, x * x, np.sin(x)]
    total = 0.0
    for a in arrs:
        total += a.sum()
    return total


@njit
def list_append(x):
    out = []
    for k in range(3):
        out.append(x * (k + 1.0))
    s = 0.0
    for a in out:
        s += (a * a).sum()
    return s


@njit
def list_of_layers(x, W1, W2):
    layers = [W1, W2]
    h = x
    for W in layers:
        h = np.tanh(W @ h)
    return h.sum()


@njit
def _center_scale(x):
    return x - x.mean(), x.std()


@njit
def tuple_array_float(x):
    z, s = _center_scale(x)
    return (z * z).sum() / s


@njit
def list_of_tuples(x, y):
    pairs = [(x, 1.0), (y, 2.0)]
    s = 0.0
    for a, c in pairs:
        s += c * (a ** 2).sum()
    return s


@njit
def dict_of_arrays(x):
    d = {"a": x * 2.0, "b": np.exp(x)}
    d["c"] = d["a"] * d["b"]
    return d["c"].sum()


@njit
def dict_of_floats(x):
    params = {"scale": x[0], "shift": x[1]}
    params["scale"] = params["scale"] * 2.0
    total = 0.0
    for name, value in params.items():
        total += value * value * len(name)
    return total * params.get("missing", x[2])


@njit
def dict_of_rows(x):
    rows = {}
    for i in range(x.shape[0]):
        rows[i] = np.tanh(x[i])
    return sum([(rows[i] * rows[(i + 1) % x.shape[0]]).sum() for i in range(x.shape[0])])


@jitclass([("W", float64[:, :]), ("b", float64[:])])
class Affine:
    def __init__(self, W, b):
        self.W = W
        self.b = b

    def apply(self, x):
        return np.tanh((self.W * x).sum(axis=1) + self.b)


@jitclass([("W", float64[:, :]), ("b", float64[:])])
class DenseLayer:
    def __init__(self, W, b):
        self.W = W
        self.b = b

    def forward(self, x):
        return np.tanh(self.W @ x + self.b)


@jitclass([("centers", float32[:]), ("scale", float32)])
class Gaussian1D:
    def __init__(self, centers, scale):
        self.centers = centers
        self.scale = scale

    def logpdf_sum(self, x):
        z = (x - self.centers) / self.scale
        return -0.5 * (z * z).sum()


@njit
def jitclass_affine(W, b, x):
    layer = Affine(W, b)
    y = layer.apply(x)
    return (y * y).sum()


@njit
def jitclass_dense(x, W, b):
    layer = DenseLayer(W, b)
    return layer.forward(x).sum()


@njit
def jitclass_f32(x, c):
    g = Gaussian1D(c, np.float32(0.7))
    return g.logpdf_sum(x)


_add("list_literal_1d_f64", ["list", "np.sin", "ndarray.sum"], list_literal,
     lambda: [normal(700, 5)], hvp=True, tags=("container", "late_import"))
_add("list_append_1d_f64", ["list", "list.append"], list_append, lambda: [normal(701, 5)],
     tags=("container",), hvp=True)
_add("list_of_layers_f64", ["list", "@", "np.tanh"], list_of_layers,
     lambda: [normal(702, 3), normal(1702, (3, 3)), normal(2702, (3, 3))], wrt=(0, 1, 2),
     tags=("container", "late_import"))
_add("tuple_array_float_1d_f64", ["tuple", "ndarray.mean", "ndarray.std"], tuple_array_float,
     lambda: [normal(703, 6)], tags=("container",))
_add("list_of_tuples_1d_f64", ["list", "tuple"], list_of_tuples,
     lambda: [normal(704, 4), normal(1704, 3)], wrt=(0, 1), tags=("container",))
_add("dict_of_arrays_1d_f64", ["dict"], dict_of_arrays, lambda: [normal(705, 4)],
     hvp=True, tags=("container", "late_import"))
_add("dict_of_floats_1d_f64", ["dict"], dict_of_floats, lambda: [normal(715, 3)],
     tags=("container",))
_add("dict_of_rows_2d_f64", ["dict", "np.tanh"], dict_of_rows, lambda: [normal(716, (3, 4))],
     tags=("container",))
_add("jitclass_affine_f64", ["jitclass", "ndarray.sum", "axis", "np.tanh", "broadcasting"],
     jitclass_affine, lambda: [normal(706, (3, 4)), normal(1706, 3), normal(2706, 4)],
     wrt=(0, 1, 2), hvp=True, tags=("container", "late_import"))
_add("jitclass_dense_f64", ["jitclass", "@", "np.tanh"], jitclass_dense,
     lambda: [normal(707, 4), normal(1707, (3, 4)), normal(2707, 3)], wrt=(0, 1, 2),
     tags=("container",))
_add("jitclass_f32", ["jitclass", "broadcasting"], jitclass_f32,
     lambda: [f32(normal(708, 4)), f32(normal(1708, 4))], wrt=(0, 1),
     tags=("container", "float32", "late_import"))


# =========================================================================================
# Programs returning arrays or tuples (forward mode now; vjp later)
# =========================================================================================
@njit
def softmax(x):
    e = np.exp(x - np.max(x))
    return e / e.sum()


@njit
def matvec(A, x):
    return A @ x


@njit
def exp_times(x):
    return np.exp(x) * x


@njit
def cumsum_ret(x):
    return np.cumsum(x)


@njit
def sort_ret(x):
    return np.sort(x)


@njit
def solve_ret(A, b):
    return np.linalg.solve(A, b)


@njit
def inv_ret(A):
    return np.linalg.inv(A)


@njit
def cholesky_ret(S0):
    return np.linalg.cholesky(0.5 * (S0 + S0.T))


@njit
def outer_ret(x, y):
    return np.outer(x, y)


@njit
def where_ret(x):
    return np.where(x > 0.0, x, 0.1 * x)


@njit
def concat_ret(x, y):
    return np.concatenate((x, np.sin(y)))


@njit
def transpose_view_ret(A):
    return A.T


@njit
def slice_view_ret(A):
    return A[:, 1:]


@njit
def reshape_ret(x):
    return x.reshape((2, 4)) * 2.0


@njit
def mean_std_tuple(x):
    return x.mean(), x.std()


@njit
def normalize_tuple(x):
    s = np.linalg.norm(x)
    return x / s, s


@njit
def normalize_rows_ret(A):
    return A / np.sqrt((A * A).sum(axis=1))[:, None]


@njit
def dense_forward_ret(W, b, x):
    return np.tanh(W @ x + b)


@njit
def ode_trajectory(y0, k):
    out = np.empty((5, y0.shape[0]))
    y = y0.copy()
    for t in range(5):
        y = y + 0.1 * k * y * (1.0 - y)
        out[t] = y
    return out


@njit
def tanh_ret(A):
    return np.tanh(A)


@njit
def clip_maximum_ret(x):
    return np.maximum(np.clip(x, -1.0, 1.0), -0.5)


@njit
def diff_ret(x):
    return np.diff(x) ** 2


@njit
def kron_ret(a, b):
    return np.kron(a, b)


@njit
def pinv_ret(A):
    return np.linalg.pinv(A)


@njit
def eigvalsh_ret(S0):
    return np.linalg.eigvalsh(0.5 * (S0 + S0.T))


@njit
def svd_values_ret(A):
    return np.linalg.svd(A)[1]


@njit
def matmul_ret(A, B):
    return A @ B


@njit
def stats_tuple(x):
    return np.max(x), np.min(x), np.median(x)


_add("softmax_ret_1d_f64", ["np.exp", "np.max", "ndarray.sum"], softmax,
     lambda: [normal(800, 5)], returns="array", tags=("late_import",))
_add("softmax_ret_1d_f32", ["np.exp", "np.max", "ndarray.sum"], softmax,
     lambda: [f32(normal(801, 5))], returns="array", tags=("float32",))
_add("matvec_ret_f64", ["@"], matvec, lambda: [normal(802, (3, 4)), normal(1802, 4)],
     wrt=(0, 1), returns="array")
_add("exp_times_ret_2d_fortran", ["np.exp"], exp_times, lambda: [fortran(normal(803, (3, 3)))],
     returns="array", tags=("fortran",))
_add("exp_times_ret_1d_strided", ["np.exp"], exp_times, lambda: [every_other(normal(804, 5))],
     returns="array", tags=("strided",))
_add("cumsum_ret_1d_f64", ["np.cumsum"], cumsum_ret, lambda: [normal(805, 6)], returns="array")
_add("sort_ret_1d_f64", ["np.sort"], sort_ret, lambda: [distinct(806, 6)], returns="array",
     tags=("late_import",))
_add("solve_ret_f64", ["np.linalg.solve"], solve_ret,
     lambda: [well(807, 3), normal(1807, 3)], wrt=(0, 1), returns="array", tags=("linalg",))
_add("inv_ret_f64", ["np.linalg.inv"], inv_ret, lambda: [well(808, 3)], returns="array",
     tags=("linalg",))
_add("cholesky_ret_f64", ["np.linalg.cholesky"], cholesky_ret, lambda: [spd(809, 3)],
     returns="array", tags=("linalg",))
_add("outer_ret_f64", ["np.outer"], outer_ret, lambda: [normal(810, 3), normal(1810, 2)],
     wrt=(0, 1), returns="array")
_add("where_ret_1d_f64", ["np.where"], where_ret, lambda: [away(811, 6)], returns="array")
_add("concat_ret_1d_f64", ["np.concatenate", "np.sin"], concat_ret,
     lambda: [normal(812, 3), normal(1812, 3)], wrt=(0, 1), returns="array")
_add("transpose_view_ret_f64", ["ndarray.T"], transpose_view_ret,
     lambda: [normal(813, (2, 3))], returns="array")
_add("slice_view_ret_f64", ["slicing"], slice_view_ret, lambda: [normal(814, (3, 4))],
     returns="array")
_add("reshape_ret_1d_f64", ["ndarray.reshape"], reshape_ret, lambda: [normal(815, 8)],
     returns="array")
_add("mean_std_tuple_1d_f64", ["ndarray.mean", "ndarray.std", "tuple"], mean_std_tuple,
     lambda: [normal(816, 6)], returns="tuple")
_add("normalize_tuple_1d_f64", ["np.linalg.norm", "tuple"], normalize_tuple,
     lambda: [normal(817, 5)], returns="tuple", tags=("container",))
_add("normalize_rows_ret_2d_f64", ["ndarray.sum", "axis", "np.sqrt", "np.newaxis"],
     normalize_rows_ret, lambda: [normal(818, (3, 3))], returns="array")
_add("dense_forward_ret_f64", ["@", "np.tanh"], dense_forward_ret,
     lambda: [normal(819, (3, 4)), normal(1819, 3), normal(2819, 4)], wrt=(0, 1, 2),
     returns="array")
_add("ode_trajectory_ret_f64", ["np.empty", "setitem"], ode_trajectory,
     lambda: [positive(820, 3, 0.1, 0.9), positive(1820, 3)], wrt=(0, 1), returns="array",
     tags=("composite",))
_add("tanh_ret_2d_f32", ["np.tanh"], tanh_ret, lambda: [f32(normal(821, (2, 3)))],
     returns="array", tags=("float32",))
_add("clip_maximum_ret_1d_f64", ["np.clip", "np.maximum"], clip_maximum_ret,
     lambda: [distinct(822, 7, avoid=(-1.0, -0.5, 1.0))], returns="array")
_add("diff_ret_1d_f64", ["np.diff"], diff_ret, lambda: [normal(823, 6)], returns="array")
_add("kron_ret_f64", ["np.kron"], kron_ret, lambda: [normal(824, (2, 2)), normal(1824, (2, 2))],
     wrt=(0, 1), returns="array")
_add("pinv_ret_f64", ["np.linalg.pinv"], pinv_ret, lambda: [singular(825, 4, 2)],
     returns="array", tags=("linalg",))
_add("eigvalsh_ret_f64", ["np.linalg.eigvalsh"], eigvalsh_ret, lambda: [spectral(826, 3)],
     returns="array", tags=("linalg",))
_add("svd_values_ret_f64", ["np.linalg.svd"], svd_values_ret, lambda: [singular(827, 3, 3)],
     returns="array", tags=("linalg",))
_add("matmul_ret_2d_f32", ["@"], matmul_ret,
     lambda: [f32(normal(828, (2, 3))), f32(normal(1828, (3, 2)))], wrt=(0, 1),
     returns="array", tags=("float32",))
_add("stats_tuple_1d_f64", ["np.max", "np.min", "np.median", "tuple"], stats_tuple,
     lambda: [distinct(829, 7)], returns="tuple")


# -- coverage of the rest of Numba's list (second pass) -----------------------------------
# One program per name (a few cover two related names), for the names the first pass left
# uncovered and that have a derivative: np.atleast_1d of a scalar is refused by Numba 0.68
# (arrays only), ndarray.item takes no index there (size-1 arrays only).
def _apart(seed, n, lo=0.2, hi=1.0):
    """Two arrays whose entries differ by at least ``lo`` (fmax, fmin)."""
    x = normal(seed, n)
    return x, x + away(seed + 1, n, lo, hi)


def _wrapped_phases(seed, n):
    """Phases wrapped into [-pi, pi) whose unwrapped steps are in [0.5, 2.5]: every
    wrapped difference is at least 0.6 away from +-pi (np.unwrap's jumps)."""
    p = np.cumsum(positive(seed, n, 0.5, 2.5))
    return np.mod(p + np.pi, 2.0 * np.pi) - np.pi


def _real_spectrum(seed, n):
    """A non-symmetric matrix with real, well-separated eigenvalues (np.linalg.eigvals
    returns float64 then)."""
    S = well(seed, n)
    return S @ np.diag(np.linspace(1.0, 1.0 + 1.3 * (n - 1), n)) @ np.linalg.inv(S)


_MULTS_13 = (-2.6, -1.3, 0.0, 1.3, 2.6)       # kinks of fmod/remainder/mod by 1.3


@njit
def tril_weighted(A, W):
    L = np.tril(A)
    return (W * L * L).sum()


@njit
def triu_k1_sin(A, W):
    U = np.triu(A, 1)
    return (W * np.sin(U)).sum()


@njit
def atleast_1d_sq(x, w):
    v = np.atleast_1d(x)
    return (w * v * v).sum()


@njit
def atleast_2d_rows(x, W):
    M = np.atleast_2d(x)
    return (W * np.sin(M)).sum()


@njit
def atleast_3d_cube(A, W):
    T = np.atleast_3d(A)
    return (W * T * T * T).sum()


@njit
def broadcast_to_rows(x, W):
    B = np.broadcast_to(x, (3, 5))
    return (W * B * B).sum()


@njit
def cross_sq(a, b):
    c = np.cross(a, b)
    return (c * c).sum() + c[0]


@njit
def cross_rows_ret(P, Q):
    return np.cross(P, Q)


@njit
def trapezoid_xy(y, t):
    return np.trapezoid(y * y, t)


@njit
def trapezoid_dx(y):
    return np.trapezoid(np.exp(y), dx=0.25)


@njit
def average_weighted(x, w):
    return np.average(np.sin(x), weights=w)


@njit
def nanvar_1d(x):
    return np.nanvar(x)


@njit
def nanstd_1d(x):
    return np.nanstd(x)


@njit
def nanprod_1d(x):
    return np.nanprod(x)


@njit
def nancumsum_weighted(x, w):
    c = np.nancumsum(x)
    return (w * c * c).sum()


@njit
def nancumprod_ret(x):
    return np.nancumprod(x)


@njit
def nanpercentile_30(x):
    return np.nanpercentile(x, 30.0)


@njit
def nanquantile_70(x):
    return np.nanquantile(x, 0.7)


@njit
def ptp_sq(x):
    r = np.ptp(x)
    return r * r


@njit
def moveaxis_weighted(T, W):
    M = np.moveaxis(T, 0, -1)
    return (W * M * M).sum()


@njit
def rot90_weighted(A, W):
    R = np.rot90(A)
    return (W * R * R * R).sum()


@njit
def array_from_list(x, w):
    v = np.array([x[0] * x[1], x[2], np.sin(x[3])])
    return (w * v * v).sum()


@njit
def asarray_from_tuple(a, b):
    v = np.asarray((a * b, a, np.cos(b)))
    return (v * v).sum() + v[0]


@njit
def array_2x2_ret(x):
    return np.array([[x[0] * x[1], x[2]], [np.exp(x[3]), x[0]]])


@njit
def convolve_ret(x, k):
    return np.convolve(x, k)


@njit
def correlate_weighted(x, k, w):
    return (w * np.correlate(x, k)).sum()


@njit
def corrcoef_weighted(X, W):
    return (W * np.corrcoef(X)).sum()


@njit
def corrcoef_pair(x, y):
    return np.corrcoef(x, y)[0, 1]


@njit
def select_pieces(x, w):
    y = np.select([x > 0.5, x < -0.5], [x * x, np.sin(x)], 0.0)
    return (w * y).sum()


@njit
def append_ret(x, y):
    return np.append(x, y)


@njit
def append_scalar(x, s, w):
    z = np.append(x, s)
    return (w * z * z).sum()


@njit
def insert_scalar(x, s, w):
    z = np.insert(x, 2, s)
    return (w * z * z).sum()


@njit
def delete_index(x, w):
    z = np.delete(x, 2)
    return (w * np.exp(z)).sum()


@njit
def delete_indices(x, idx):
    z = np.delete(x, idx)
    return (z * z * z).sum()


@njit
def split_halves(x):
    parts = np.split(x, 2)
    return (parts[0] * parts[1]).sum()


@njit
def array_split_loop(x):
    s = 0.0
    for p in np.array_split(x, 3):
        s += p.sum() ** 2
    return s


@njit
def hsplit_halves(A):
    L = np.hsplit(A, 2)
    return (L[0] * L[1]).sum()


@njit
def vsplit_rows(A):
    R = np.vsplit(A, 3)
    return (R[0] * R[2] + R[1] * R[1]).sum()


@njit
def dsplit_halves(T):
    D = np.dsplit(T, 2)
    return (np.sin(D[0]) * D[1]).sum()


@njit
def take_along_axis_rows(A, idx, W):
    B = np.take_along_axis(A, idx, axis=1)
    return (W * B * B).sum()


@njit
def linspace_sin(a, b, w):
    t = np.linspace(a, b, 7)
    return (w * np.sin(t)).sum()


@njit
def diagflat_matmul(x, A, W):
    D = np.diagflat(x)
    return (W * (D @ A)).sum()


@njit
def diagflat_k1_ret(x):
    return np.diagflat(x, 1)


@njit
def fill_diagonal_values(A, d, W):
    B = A.copy()
    np.fill_diagonal(B, np.exp(d))
    return (W * B * B).sum()


@njit
def fill_diagonal_scalar(A, s):
    B = A.copy()
    np.fill_diagonal(B, s)
    return (B @ B.T).sum()


@njit
def full_scaled(s, A, W):
    F = np.full((3, 4), s)
    return (W * np.sin(F * A)).sum()


@njit
def full_like_sq(x, s):
    F = np.full_like(x, s)
    return (x * F * F).sum()


@njit
def dstack_weighted(A, B, W):
    D = np.dstack((A, B))
    return (W * D * D).sum()


@njit
def ediff1d_ret(x):
    return np.ediff1d(x)


@njit
def ediff1d_to_begin(x, w):
    d = np.ediff1d(x, to_begin=x[0])
    return (w * d * d).sum()


@njit
def nan_to_num_sq(x, w):
    y = np.nan_to_num(x)
    return (w * y * y).sum()


@njit
def resize_weighted(x, W):
    R = np.resize(x, (3, 4))
    return (W * R * R).sum()


@njit
def extract_positive(x):
    e = np.extract(x > 0.0, x)
    return (e * e * e).sum()


@njit
def unwrap_sq(p, w):
    u = np.unwrap(p)
    return (w * u * u).sum()


@njit
def sinc_weighted(x, w):
    return (w * np.sinc(x)).sum()


@njit
def permute_dims_weighted(T, W):
    P = np.permute_dims(T, (2, 0, 1))
    return (W * P * P).sum()


@njit
def concat_fn_ret(x, y):
    return np.concat((x, np.sin(y)))


@njit
def concat_fn_weighted(x, y, w):
    return (w * np.concat((x, np.sin(y))) ** 2).sum()


@njit
def nancumprod_weighted(x, w):
    return (w * np.nancumprod(x)).sum()


@njit
def convolve_sq(x, k):
    return (np.convolve(x, k) ** 2).sum()


@njit
def trim_zeros_masked(x, m):
    # the zeros trimmed are the mask's: they stay zeros as x moves
    return (np.trim_zeros(m * x) ** 3).sum()


@njit
def moving_average_sq(x):
    win = np.lib.stride_tricks.sliding_window_view(x, 3)
    m = np.empty(win.shape[0])
    for i in range(win.shape[0]):
        m[i] = win[i].mean()
    return (m * m).sum()


@njit
def partition_low(x):
    p = np.partition(x, 3)
    return p[3] ** 2 + (p[:3] ** 2).sum()


@njit
def float_power_weighted(x, w):
    return (w * np.float_power(x, 2.5)).sum()


@njit
def pow_arrays(x, y, w):
    return (w * np.pow(x, y)).sum()


@njit
def fmod_sq(x, y, w):
    r = np.fmod(x, y)
    return (w * r * r).sum()


@njit
def remainder_sq(x, y, w):
    r = np.remainder(x, y)
    return (w * r * r).sum()


@njit
def mod_sin(x, y, w):
    return (w * np.sin(np.mod(x, y))).sum()


@njit
def fmax_weighted(x, y, w):
    return (w * np.fmax(x, y)).sum()


@njit
def fmin_sq(x, y, w):
    m = np.fmin(x, y)
    return (w * m * m).sum()


@njit
def copysign_exp(x, y, w):
    return (w * np.exp(np.copysign(x, y))).sum()


@njit
def ldexp_sq(x, k, w):
    z = np.ldexp(x, k)
    return (w * z * z).sum()


@njit
def deg2rad_radians(d, w):
    return (w * (np.sin(np.deg2rad(d)) + np.radians(d) ** 2)).sum()


@njit
def rad2deg_degrees(r, w):
    return (w * (np.rad2deg(r) * np.degrees(np.sin(r)))).sum()


@njit
def asin_acos(x, w):
    return (w * (np.asin(x) + 2.0 * np.acos(x) ** 2)).sum()


@njit
def atan_atan2(x, y, w):
    return (w * (np.atan(x) + np.atan2(y, x))).sum()


@njit
def asinh_acosh_atanh(x, z, w):
    return (w * (np.asinh(x) + np.acosh(1.0 + x * x) + np.atanh(z))).sum()


@njit
def arccosh_arctanh(x, z, w):
    return (w * (np.arccosh(x) * np.arctanh(z))).sum()


@njit
def logaddexp2_weighted(x, y, w):
    return (w * np.logaddexp2(x, y)).sum()


@njit
def positive_sq(x, w):
    p = np.positive(x)
    return (w * p * p).sum()


@njit
def eigvals_sum_exp(A):
    ev = np.linalg.eigvals(A)
    return np.exp(0.3 * ev).sum() + np.max(ev)


@njit
def fill_method(x, s):
    B = np.empty(x.size)
    B.fill(s)
    return (x * np.sin(B * x)).sum()


@njit
def item_quadratic(x, A):
    return (x[np.newaxis, :] @ A @ x[:, np.newaxis]).item()


@njit
def astype_f64_sq(x, w):
    y = x.astype(np.float64)
    return (w * y * y).sum()


@njit
def round_times(x):
    return (np.round(x) * x + x).sum()


@njit
def around_1_times(x):
    return (np.around(x, 1) * x + x).sum()


@njit
def ndenumerate_weighted(A, W):
    s = 0.0
    for idx, v in np.ndenumerate(A):
        s += W[idx] * v * v
    return s


@njit
def nditer_cubes(A):
    s = 0.0
    for v in np.nditer(A):
        s += v.item() ** 3
    return s


@njit
def flat_loop(A):
    s = 0.0
    for v in A.flat:
        s += v * v * v
    return s


@njit
def flat_index(A, w):
    s = 0.0
    for i in range(A.size):
        s += w[i] * A.flat[i] ** 2
    return s


def _nan_positive(seed, shape):
    return np.where(np.isnan(with_nans(seed, shape)), np.nan, positive(seed, shape, 0.6, 1.5))


def _nan_distinct(seed, shape):
    return np.where(np.isnan(with_nans(seed, shape)), np.nan, distinct(seed, shape))


_I32 = np.array([[0, 2], [1, 1], [3, 0]])

_add("tril_2d_f64", ["np.tril"], tril_weighted,
     lambda: [normal(900, (4, 4)), weights(900, (4, 4))], hvp=True)
_add("tril_2d_fortran", ["np.tril"], tril_weighted,
     lambda: [fortran(normal(901, (3, 4))), weights(901, (3, 4))], tags=("fortran",))
_add("triu_k1_2d_f64", ["np.triu"], triu_k1_sin,
     lambda: [normal(902, (3, 4)), weights(902, (3, 4))], hvp=True)
_add("atleast_1d_f64", ["np.atleast_1d"], atleast_1d_sq,
     lambda: [normal(903, 6), weights(903, 6)], hvp=True)
_add("atleast_2d_f64", ["np.atleast_2d", "np.sin"], atleast_2d_rows,
     lambda: [normal(904, 6), weights(904, (1, 6))], hvp=True)
_add("atleast_3d_f64", ["np.atleast_3d"], atleast_3d_cube,
     lambda: [normal(905, (3, 4)), weights(905, (3, 4, 1))], hvp=True)
_add("broadcast_to_f64", ["np.broadcast_to"], broadcast_to_rows,
     lambda: [normal(906, 5), weights(906, (3, 5))], hvp=True)
_add("cross_3_f64", ["np.cross"], cross_sq, lambda: [normal(907, 3), normal(1907, 3)],
     wrt=(0, 1), hvp=True)
_add("cross_rows_ret_f64", ["np.cross"], cross_rows_ret,
     lambda: [normal(908, (4, 3)), normal(1908, (4, 3))], wrt=(0, 1), returns="array")
_add("trapezoid_xy_f64", ["np.trapezoid"], trapezoid_xy,
     lambda: [normal(909, 7), np.cumsum(positive(1909, 7, 0.2, 0.6))], wrt=(0, 1), hvp=True)
_add("trapezoid_dx_f64", ["np.trapezoid", "np.exp"], trapezoid_dx, lambda: [normal(910, 7)])
_add("average_weights_f64", ["np.average"], average_weighted,
     lambda: [normal(911, 6), positive(1911, 6)], wrt=(0, 1), hvp=True)
_add("nanvar_1d_f64", ["np.nanvar"], nanvar_1d, lambda: [with_nans(912, 8)], hvp=True)
_add("nanstd_1d_f64", ["np.nanstd"], nanstd_1d, lambda: [with_nans(913, 8)], hvp=True)
_add("nanprod_1d_f64", ["np.nanprod"], nanprod_1d, lambda: [_nan_positive(914, 7)], hvp=True)
_add("nancumsum_1d_f64", ["np.nancumsum"], nancumsum_weighted,
     lambda: [with_nans(915, 7), weights(915, 7)], hvp=True)
_add("nancumprod_ret_1d_f64", ["np.nancumprod"], nancumprod_ret,
     lambda: [_nan_positive(916, 6)], returns="array")
_add("nancumprod_weighted_1d_f64", ["np.nancumprod"], nancumprod_weighted,
     lambda: [_nan_positive(2916, 6), weights(2916, 6)], hvp=True)
_add("nanpercentile_1d_f64", ["np.nanpercentile"], nanpercentile_30,
     lambda: [_nan_distinct(917, 8)], hvp=True)
_add("nanquantile_1d_f64", ["np.nanquantile"], nanquantile_70,
     lambda: [_nan_distinct(918, 8)], hvp=True)
_add("ptp_1d_f64", ["np.ptp"], ptp_sq, lambda: [distinct(919, 7)], hvp=True)
_add("ptp_2d_f64", ["np.ptp"], ptp_sq, lambda: [distinct(920, (3, 4))])
_add("moveaxis_3d_f64", ["np.moveaxis"], moveaxis_weighted,
     lambda: [normal(921, (2, 3, 4)), weights(921, (3, 4, 2))], hvp=True)
_add("rot90_2d_f64", ["np.rot90"], rot90_weighted,
     lambda: [normal(922, (3, 4)), weights(922, (4, 3))], hvp=True)
_add("array_from_list_f64", ["np.array"], array_from_list,
     lambda: [normal(923, 5), weights(923, 3)], hvp=True)
_add("asarray_from_tuple_f64", ["np.asarray", "tuple"], asarray_from_tuple,
     lambda: [0.7, -1.2], wrt=(0, 1), hvp=True)
_add("array_2x2_ret_f64", ["np.array"], array_2x2_ret, lambda: [normal(924, 5)],
     returns="array")
_add("convolve_ret_f64", ["np.convolve"], convolve_ret,
     lambda: [normal(925, 6), normal(1925, 3)], wrt=(0, 1), returns="array")
_add("convolve_sq_f64", ["np.convolve"], convolve_sq,
     lambda: [normal(2925, 6), normal(3925, 3)], wrt=(0, 1), hvp=True)
_add("correlate_valid_f64", ["np.correlate"], correlate_weighted,
     lambda: [normal(926, 7), normal(1926, 3), weights(926, 5)], wrt=(0, 1), hvp=True)
_add("corrcoef_rows_f64", ["np.corrcoef"], corrcoef_weighted,
     lambda: [normal(927, (3, 6)), weights(927, (3, 3))], hvp=True)
_add("corrcoef_pair_f64", ["np.corrcoef"], corrcoef_pair,
     lambda: [normal(928, 7), normal(1928, 7)], wrt=(0, 1))
_add("select_1d_f64", ["np.select"], select_pieces,
     lambda: [distinct(929, 8, avoid=(-0.5, 0.5)), weights(929, 8)], hvp=True)
_add("append_ret_f64", ["np.append"], append_ret, lambda: [normal(930, 5), normal(1930, 3)],
     wrt=(0, 1), returns="array")
_add("append_scalar_f64", ["np.append"], append_scalar,
     lambda: [normal(931, 5), 0.8, weights(931, 6)], wrt=(0, 1), hvp=True)
_add("insert_scalar_f64", ["np.insert"], insert_scalar,
     lambda: [normal(932, 5), -0.6, weights(932, 6)], wrt=(0, 1), hvp=True)
_add("delete_index_f64", ["np.delete"], delete_index,
     lambda: [normal(933, 6), weights(933, 5)], hvp=True)
_add("delete_indices_f64", ["np.delete"], delete_indices,
     lambda: [normal(934, 7), np.array([0, 3, 4])])
_add("split_halves_f64", ["np.split"], split_halves, lambda: [normal(935, 8)], hvp=True)
_add("array_split_loop_f64", ["np.array_split"], array_split_loop, lambda: [normal(936, 8)],
     hvp=True)
_add("hsplit_2d_f64", ["np.hsplit"], hsplit_halves, lambda: [normal(937, (3, 4))], hvp=True)
_add("vsplit_2d_f64", ["np.vsplit"], vsplit_rows, lambda: [normal(938, (3, 4))], hvp=True)
_add("dsplit_3d_f64", ["np.dsplit", "np.sin"], dsplit_halves, lambda: [normal(939, (2, 3, 4))],
     hvp=True)
_add("take_along_axis_2d_f64", ["np.take_along_axis"], take_along_axis_rows,
     lambda: [normal(940, (3, 4)), _I32.copy(), weights(940, (3, 2))], hvp=True)
_add("linspace_endpoints_f64", ["np.linspace", "np.sin"], linspace_sin,
     lambda: [-0.4, 1.3, weights(941, 7)], wrt=(0, 1), hvp=True)
_add("diagflat_matmul_f64", ["np.diagflat", "@"], diagflat_matmul,
     lambda: [normal(942, 4), normal(1942, (4, 3)), weights(942, (4, 3))], hvp=True)
_add("diagflat_k1_ret_f64", ["np.diagflat"], diagflat_k1_ret, lambda: [normal(943, 4)],
     returns="array")
_add("fill_diagonal_values_f64", ["np.fill_diagonal", "ndarray.copy"], fill_diagonal_values,
     lambda: [normal(944, (3, 4)), normal(1944, 3), weights(944, (3, 4))], wrt=(0, 1), hvp=True)
_add("fill_diagonal_scalar_f64", ["np.fill_diagonal", "ndarray.copy"], fill_diagonal_scalar,
     lambda: [normal(945, (3, 4)), 1.4], wrt=(0, 1))
_add("full_scalar_f64", ["np.full"], full_scaled,
     lambda: [0.9, normal(946, (3, 4)), weights(946, (3, 4))], wrt=(0, 1), hvp=True)
_add("full_like_f64", ["np.full_like"], full_like_sq, lambda: [normal(947, 6), -0.7],
     wrt=(0, 1), hvp=True)
_add("dstack_2d_f64", ["np.dstack"], dstack_weighted,
     lambda: [normal(948, (3, 4)), normal(1948, (3, 4)), weights(948, (3, 4, 2))],
     wrt=(0, 1), hvp=True)
_add("ediff1d_ret_f64", ["np.ediff1d"], ediff1d_ret, lambda: [normal(949, 6)],
     returns="array")
_add("ediff1d_to_begin_f64", ["np.ediff1d"], ediff1d_to_begin,
     lambda: [normal(950, 6), weights(950, 6)], hvp=True)
_add("nan_to_num_1d_f64", ["np.nan_to_num"], nan_to_num_sq,
     lambda: [with_nans(951, 7), weights(951, 7)], hvp=True)
_add("resize_2d_f64", ["np.resize"], resize_weighted,
     lambda: [normal(952, 5), weights(952, (3, 4))], hvp=True)
_add("extract_positive_f64", ["np.extract"], extract_positive, lambda: [away(953, 8)], hvp=True)
_add("unwrap_1d_f64", ["np.unwrap"], unwrap_sq,
     lambda: [_wrapped_phases(954, 7), weights(954, 7)], hvp=True)
_add("sinc_1d_f64", ["np.sinc"], sinc_weighted, lambda: [normal(955, 7), weights(955, 7)], hvp=True)
_add("permute_dims_3d_f64", ["np.permute_dims"], permute_dims_weighted,
     lambda: [normal(956, (2, 3, 4)), weights(956, (4, 2, 3))], hvp=True)
_add("concat_ret_f64", ["np.concat", "np.sin"], concat_fn_ret,
     lambda: [normal(957, 4), normal(1957, 3)], wrt=(0, 1), returns="array")
_add("concat_weighted_f64", ["np.concat", "np.sin"], concat_fn_weighted,
     lambda: [normal(2957, 4), normal(3957, 3), weights(2957, 7)], wrt=(0, 1), hvp=True)
_add("sliding_window_mean_f64", ["np.lib.stride_tricks.sliding_window_view", "ndarray.mean"],
     moving_average_sq, lambda: [normal(958, 8)], hvp=True)
_add("partition_low_f64", ["np.partition"], partition_low, lambda: [distinct(959, 7)], hvp=True)
_add("float_power_1d_f64", ["np.float_power"], float_power_weighted,
     lambda: [positive(960, 6), weights(960, 6)], hvp=True)
_add("pow_arrays_f64", ["np.pow"], pow_arrays,
     lambda: [positive(961, 6), normal(1961, 6), weights(961, 6)], wrt=(0, 1), hvp=True)
_add("fmod_scalar_f64", ["np.fmod"], fmod_sq,
     lambda: [distinct(962, 7, -3.0, 3.0, avoid=_MULTS_13), 1.3, weights(962, 7)],
     wrt=(0, 1), hvp=True)
_add("remainder_scalar_f64", ["np.remainder"], remainder_sq,
     lambda: [distinct(963, 7, -3.0, 3.0, avoid=_MULTS_13), 1.3, weights(963, 7)],
     wrt=(0, 1), hvp=True)
_add("mod_scalar_f64", ["np.mod", "np.sin"], mod_sin,
     lambda: [distinct(964, 7, -3.0, 3.0, avoid=_MULTS_13), 1.3, weights(964, 7)],
     wrt=(0, 1), hvp=True)
_add("fmax_1d_f64", ["np.fmax"], fmax_weighted, lambda: [*_apart(965, 7), weights(965, 7)],
     wrt=(0, 1), hvp=True)
_add("fmin_1d_f64", ["np.fmin"], fmin_sq, lambda: [*_apart(966, 7), weights(966, 7)],
     wrt=(0, 1), hvp=True)
_add("copysign_1d_f64", ["np.copysign", "np.exp"], copysign_exp,
     lambda: [away(967, 6), away(1967, 6), weights(967, 6)], wrt=(0, 1), hvp=True)
_add("ldexp_1d_f64", ["np.ldexp"], ldexp_sq,
     lambda: [normal(968, 6), np.array([0, 1, -1, 2, 3, -2]), weights(968, 6)], hvp=True)
_add("deg2rad_radians_f64", ["np.deg2rad", "np.radians"], deg2rad_radians,
     lambda: [normal(969, 6, 60.0), weights(969, 6)], hvp=True)
_add("rad2deg_degrees_f64", ["np.rad2deg", "np.degrees"], rad2deg_degrees,
     lambda: [normal(970, 6), weights(970, 6)], hvp=True)
_add("asin_acos_f64", ["np.asin", "np.acos"], asin_acos,
     lambda: [distinct(971, 6, -0.8, 0.8), weights(971, 6)], hvp=True)
_add("atan_atan2_f64", ["np.atan", "np.atan2"], atan_atan2,
     lambda: [away(972, 6), away(1972, 6), weights(972, 6)], wrt=(0, 1), hvp=True)
_add("asinh_acosh_atanh_f64", ["np.asinh", "np.acosh", "np.atanh"], asinh_acosh_atanh,
     lambda: [away(973, 6), distinct(1973, 6, -0.8, 0.8), weights(973, 6)], wrt=(0, 1), hvp=True)
_add("arccosh_arctanh_f64", ["np.arccosh", "np.arctanh"], arccosh_arctanh,
     lambda: [positive(974, 6, 1.2, 3.0), distinct(1974, 6, -0.8, 0.8), weights(974, 6)],
     wrt=(0, 1), hvp=True)
_add("logaddexp2_1d_f64", ["np.logaddexp2"], logaddexp2_weighted,
     lambda: [normal(975, 6), normal(1975, 6), weights(975, 6)], wrt=(0, 1), hvp=True)
_add("positive_1d_f64", ["np.positive"], positive_sq, lambda: [normal(976, 6), weights(976, 6)],
     hvp=True)
_add("eigvals_real_f64", ["np.linalg.eigvals", "np.max"], eigvals_sum_exp,
     lambda: [_real_spectrum(977, 3)], tags=("linalg",), hvp=True)
_add("fill_method_f64", ["ndarray.fill", "np.empty"], fill_method,
     lambda: [normal(978, 6), 0.6], wrt=(0, 1), hvp=True)
_add("item_quadratic_f64", ["ndarray.item", "np.newaxis", "@"], item_quadratic,
     lambda: [normal(979, 3), normal(1979, (3, 3))], hvp=True)
_add("astype_f32_to_f64", ["ndarray.astype"], astype_f64_sq,
     lambda: [f32(normal(980, 6)), weights(980, 6)], tags=("float32",), hvp=True)
_add("round_times_f64", ["np.round"], round_times,
     lambda: [distinct(981, 7, avoid=(-1.5, -0.5, 0.5, 1.5))], hvp=True)
_add("around_1_times_f64", ["np.around"], around_1_times, lambda: [distinct(982, 7)], hvp=True)
_add("ndenumerate_2d_f64", ["np.ndenumerate"], ndenumerate_weighted,
     lambda: [normal(983, (3, 4)), weights(983, (3, 4))], hvp=True)
_add("nditer_2d_f64", ["np.nditer", "ndarray.item"], nditer_cubes, lambda: [normal(984, (3, 4))],
     hvp=True)
_add("flat_loop_2d_f64", ["ndarray.flat"], flat_loop, lambda: [normal(985, (3, 4))], hvp=True)
_add("flat_loop_2d_fortran", ["ndarray.flat"], flat_loop,
     lambda: [fortran(normal(986, (3, 4)))], tags=("fortran",))
_add("flat_index_2d_f64", ["ndarray.flat"], flat_index,
     lambda: [normal(987, (3, 4)), weights(987, 12)])


@njit
def geomspace_ends(a, w):
    return (w * np.geomspace(a[0], a[1], 5)).sum()


@njit
def logspace_ends(a, w):
    return (w * np.logspace(a[0], a[1], 5)).sum()


@njit
def broadcast_arrays_product(x, A):
    bx, bA = np.broadcast_arrays(x, A)
    return (bx * bA).sum()


@njit
def chkfinite_squares(x):
    return (np.asarray_chkfinite(x) ** 2).sum()


@njit
def real_imag_conj(x, w):
    return (w * np.real(x) + np.imag(x) + np.conj(x) * x).sum()


@njit
def trim_zeros_squares(x):
    return (np.trim_zeros(x) ** 2).sum()


@njit
def unique_weighted(x, w):
    return (np.unique(x) * w).sum()


@njit
def as_strided_pairs(x):
    s = x.strides[0]
    v = np.lib.stride_tricks.as_strided(x, shape=(x.shape[0] - 1, 2), strides=(s, s))
    return (v[:, 0] * v[:, 1]).sum()


@njit
def eig_weighted(A, w, W):
    vals, vecs = np.linalg.eig(A)
    return (w * vals).sum() + (W * vecs ** 2).sum()    # invariant under each vector's sign


def _nonsymmetric(seed, n):
    """A non-symmetric matrix with distinct real eigenvalues."""
    rng = _rng(seed)
    v = np.eye(n) + 0.3 * rng.uniform(-1, 1, (n, n))
    return v @ np.diag(np.linspace(-1.5, 2.0, n)) @ np.linalg.inv(v)


_add("geomspace_ends_f64", ["np.geomspace"], geomspace_ends,
     lambda: [np.array([0.5, 2.0]), weights(990, 5)], hvp=True)
_add("logspace_ends_f64", ["np.logspace"], logspace_ends,
     lambda: [np.array([0.1, 0.6]), weights(991, 5)], hvp=True)
_add("broadcast_arrays_2d_f64", ["np.broadcast_arrays"], broadcast_arrays_product,
     lambda: [normal(992, 4), normal(1992, (3, 4))], wrt=(0, 1), hvp=True)
_add("asarray_chkfinite_f64", ["np.asarray_chkfinite"], chkfinite_squares,
     lambda: [normal(993, 6)], hvp=True)
_add("real_imag_conj_f64", ["np.real", "np.imag", "np.conj"], real_imag_conj,
     lambda: [normal(994, 6), normal(1994, 6)], hvp=True)
_add("trim_zeros_f64", ["np.trim_zeros"], trim_zeros_squares,
     lambda: [np.array([0.0, 0.0, 1.5, -0.3, 0.0, 2.0, 0.0])])
_add("trim_zeros_masked_f64", ["np.trim_zeros"], trim_zeros_masked,
     lambda: [normal(2998, 7), np.array([0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0])], hvp=True)
_add("unique_values_f64", ["np.unique"], unique_weighted,
     lambda: [np.array([0.3, -1.2, 2.0, 0.9, -0.4]), weights(997, 5)], hvp=True)
_add("as_strided_pairs_f64", ["np.lib.stride_tricks.as_strided"], as_strided_pairs,
     lambda: [normal(995, 6)], hvp=True)
_add("eig_real_f64", ["np.linalg.eig"], eig_weighted,
     lambda: [_nonsymmetric(996, 3), weights(996, 3), weights(1996, (3, 3))],
     tags=("linalg",), hvp=True)



# -- names of the page that no program covered before -------------------------------------
@njit
def real_imag_conj_methods(x, w):
    return (w * x.real + x.imag + x.conj() * x.conjugate() + np.conjugate(x)).sum()


@njit
def view_cubes(A):
    return (A.view(np.float64) ** 3).sum()


@njit
def nanarg_selected(x):
    return 2.0 * x[np.nanargmax(x)] + x[np.nanargmin(x)] ** 2


@njit
def float_casts(x, a):
    return np.float64(a) * x.sum() + np.float64(x[0]) ** 2


@njit
def float32_casts(x):
    return np.float32(x[0]) * np.float32(x[1] * 2.0) + x.sum()


@njit
def floor_divide_divmod(x, y):
    d, m = np.divmod(x, y)
    return (np.floor_divide(x, y) * x + m * m + d * y).sum()


@njit
def spacing_plus_square(x):
    return (np.spacing(x) + x * x).sum()


@njit
def nextafter_times(x):
    return (np.nextafter(x, np.inf) * x).sum()


@njit
def angle_real_complex(x):
    return (np.angle(x) + x * x).sum() + np.angle(x[0] + 1j * x[1]) ** 2


@njit
def set_operations(x, y):
    return ((np.union1d(x, y) ** 2).sum() + (np.intersect1d(x, y) ** 3).sum()
            + (np.setdiff1d(x, y) * 2.0).sum() + (np.setxor1d(x, y) ** 2).sum())


@njit
def frombuffer_squares(x):
    return (np.frombuffer(x, np.float64) ** 2).sum()


@njit
def complex128_values(x):
    z = np.complex128(x[0]) * np.complex128(1.0 + 2.0j) + np.complex128(x[1] + 0.5j)
    return z.real * z.imag + abs(z)


@njit
def complex64_values(x):
    z = np.complex64(x[0]) * np.complex64(1.0 + 2.0j)
    return z.real * z.imag + abs(z) + x.sum()


@njit
def roots_squares(c):
    r = np.roots(c)
    return (r.real ** 2).sum() + (r.imag ** 2).sum()


def _disjoint_sets():
    """Two arrays with no value in common (a shared value would make the set operations
    non-differentiable: perturbing one copy drops it from the intersection)."""
    return [_rng(1001).permutation(np.arange(8.0)) + 0.3, np.array([20.5, 3.75, 21.25, 0.6])]


_add("real_imag_conj_methods_f64",
     ["ndarray.real", "ndarray.imag", "ndarray.conj", "ndarray.conjugate", "np.conjugate"],
     real_imag_conj_methods, lambda: [normal(1000, 6), weights(1000, 6)], hvp=True)
_add("view_float64_2d_f64", ["ndarray.view"], view_cubes, lambda: [normal(1002, (2, 3))],
     hvp=True)
_add("nanargmax_nanargmin_f64", ["np.nanargmax", "np.nanargmin"], nanarg_selected,
     lambda: [distinct(1003, 6)], hvp=True)
_add("float64_cast_f64", ["np.float64"], float_casts, lambda: [normal(1004, 6), 1.3],
     wrt=(0, 1), hvp=True)
_add("float32_cast_f32", ["np.float32"], float32_casts, lambda: [f32(normal(1005, 6))],
     tags=("float32",), hvp=True)
_add("floor_divide_divmod_f64", ["np.floor_divide", "np.divmod"], floor_divide_divmod,
     lambda: [positive(1006, 6, 0.6, 9.7), positive(1007, 6, 0.9, 2.0)], wrt=(0, 1), hvp=True)
_add("spacing_f64", ["np.spacing"], spacing_plus_square, lambda: [normal(1008, 6)], hvp=True)
_add("nextafter_f64", ["np.nextafter"], nextafter_times, lambda: [normal(1009, 6)], hvp=True)
_add("angle_real_complex_f64", ["np.angle"], angle_real_complex, lambda: [away(1010, 6)],
     hvp=True)
_add("set_operations_disjoint_f64",
     ["np.union1d", "np.intersect1d", "np.setdiff1d", "np.setxor1d"], set_operations,
     _disjoint_sets, wrt=(0, 1), hvp=True)
_add("frombuffer_f64", ["np.frombuffer"], frombuffer_squares, lambda: [normal(1011, 6)],
     hvp=True)
_add("complex128_f64", ["np.complex128"], complex128_values, lambda: [normal(1012, 2)],
     hvp=True)
_add("complex64_f32", ["np.complex64"], complex64_values, lambda: [f32(normal(1013, 2))],
     tags=("float32",), hvp=True)
_add("roots_cubic_f64", ["np.roots"], roots_squares,
     lambda: [np.array([1.0, -6.0, 11.0, -6.2])], hvp=True)


# -- float results of names once listed as having no derivative (found by a review) ------
@njit
def bincount_weights(w, idx, c):
    # (the weights' sums per bin are floats: linear in w)
    return (c * np.bincount(idx, w) ** 2).sum()


@njit
def histogram_edges(a, w):
    # (the edges span [min(a), max(a)]: they move with the extreme values)
    counts, edges = np.histogram(a, 4)
    return (w * edges).sum() + (counts * edges[:-1] ** 2).sum()


@njit
def kaiser_window(beta, w):
    return (w * np.kaiser(7, beta)).sum() ** 2


_add("bincount_weights_f64", ["np.bincount"], bincount_weights,
     lambda: [normal(1014, 7), np.array([0, 2, 2, 3, 0, 3, 3]), weights(1014, 4)], hvp=True)
_add("histogram_edges_f64", ["np.histogram"], histogram_edges,
     lambda: [distinct(1015, 9), weights(1015, 5)], hvp=True)
_add("kaiser_beta_f64", ["np.kaiser"], kaiser_window, lambda: [2.5, weights(1016, 7)],
     hvp=True)


def _check_registry():
    names = [p.name for p in PROGRAMS]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"duplicate program names: {sorted(dup)}"
    for p in PROGRAMS:
        assert p.returns in ("scalar", "array", "tuple"), p.name
        assert p.wrt, p.name


_check_registry()
