"""Derivatives of NumPy's linear algebra (what Numba sends to LAPACK), as
matrix-level rules registered on Numba's implementations: the reverse of
``solve`` is one more solve with the transpose, the reverse of ``cholesky`` a
blocked sweep of matrix products, and so on, so a derivative costs a small
multiple of the primal. Each rule is an ordinary pair of ``@njit`` functions
(``fwd``, ``bwd``) and a ``jvp``, entered through the same door as the users'
``defvjp`` rules; their own products and solves are differentiated again for
second order.

Formulas: M. Giles, "An extended collection of matrix derivative results for
forward and reverse mode algorithmic differentiation" (2008); I. Murray,
"Differentiation of the Cholesky decomposition" (2016); for ``eigh``/``svd``,
the standard perturbation results (undefined for repeated eigenvalues or
singular values, where the result follows the primal's inf/nan).
"""
from __future__ import annotations

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir as llir
from numba import njit, types
from numba.core import cgutils
from numba.extending import get_cython_function_address, intrinsic, overload
from numba.np import linalg as numba_linalg

from .userrules import builtin_vjp

_MODULE = "numba.np.linalg"


def _rule(name, fwd, bwd, jvp, inner=None):
    """A rule for ``numba.np.linalg.<name>``'s implementation (the function
    ``inner`` it returns, by default of the same name)."""
    builtin_vjp(_MODULE, f"{name}.<locals>.{inner or name}", fwd, bwd, jvp)


@njit(cache=True)
def _as_column(v):
    return np.ascontiguousarray(v).reshape(v.shape[0], -1)


# -- triangular solves (BLAS trsm), for the rules below --------------------------------------
# Numba sends no NumPy function to trsm, so the rules' triangular solves would be
# general solves (an LU factorization and two triangular solves each). SciPy's
# BLAS (which Numba's linear algebra needs anyway) has it: it is published
# under a name of enzpy's, which compiled code (and caches) refer to.
def _publish_trsm():
    for name in ("dtrsm", "strsm"):
        try:
            address = get_cython_function_address("scipy.linalg.cython_blas", name)
        except (ImportError, ValueError):
            return
        llvm.add_symbol(f"enzpy_{name}", address)


_publish_trsm()


@intrinsic
def _trsm(typingctx, side, uplo, trans, m, n, a, lda, b, ldb):
    """BLAS ``?trsm(side, uplo, trans, 'N', m, n, 1, a, lda, b, ldb)`` (column-major,
    in place in ``b``); the flags are characters' codes."""
    dtype = a.dtype
    sig = types.void(side, uplo, trans, m, n, a, lda, b, ldb)

    def codegen(context, builder, sig, args):
        side, uplo, trans, m, n, a, lda, b, ldb = args
        vp = cgutils.voidptr_t
        i32 = llir.IntType(32)

        def by_reference(value):
            return builder.bitcast(cgutils.alloca_once_value(builder, value), vp)

        def char(code):
            return by_reference(builder.trunc(code, llir.IntType(8)))

        def integer(value):
            return by_reference(builder.trunc(value, i32))

        def data(ty, value):
            return builder.bitcast(context.make_array(ty)(context, builder, value).data, vp)

        one = context.get_constant(dtype, 1.0)
        fnty = llir.FunctionType(llir.VoidType(), [vp] * 11)
        name = "enzpy_dtrsm" if dtype == types.float64 else "enzpy_strsm"
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)
        builder.call(fn, [char(side), char(uplo), char(trans), char(context.get_constant(
            types.int64, ord("N"))), integer(m), integer(n), by_reference(one),
            data(sig.args[5], a), integer(lda), data(sig.args[7], b), integer(ldb)])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True)
def _trsolve(t, b, lower, trans):
    """``op(t)^-1 b`` for ``t`` triangular (its lower triangle if ``lower``, else
    its upper one; op: the transpose if ``trans``) and ``b`` a matrix: one BLAS
    trsm on a copy of ``b``. The other triangle of ``t`` is not read."""
    t = np.ascontiguousarray(t)
    x = b.copy()                # (C-contiguous)
    n, k = x.shape
    if t.shape[0] != n or t.shape[1] != n:
        raise ValueError("triangular solve: shapes do not match")
    # Row-major t is column-major t^T: op(t) x = b is x^T op(t)^T = b^T, with x^T
    # column-major, t's triangle flipped, and trans kept.
    _trsm(ord("R"), ord("U") if lower else ord("L"), ord("T") if trans else ord("N"),
          k, n, t, max(n, 1), x, max(k, 1))
    return x


@njit(cache=True)
def _triangle(x, lower, diagonal=1.0):
    """The lower (or upper) triangle of the square ``x``, its diagonal scaled
    by ``diagonal``; zeros elsewhere. (A loop: Numba's ``np.tril`` builds a mask
    and costs as much as a triangular solve.)"""
    n = x.shape[0]
    out = np.zeros((n, n), dtype=x.dtype)
    for i in range(n):
        for j in range(i) if lower else range(i + 1, n):
            out[i, j] = x[i, j]
        out[i, i] = diagonal * x[i, i]
    return out


# NumPy's (and Numba's) cholesky, eigh and eigvalsh read the lower triangle only:
# their derivatives are those of the symmetric matrix that triangle mirrors, and the
# upper triangle has none (JAX and PyTorch instead symmetrize, the derivative along
# symmetric directions only: the same for a matrix symmetric by construction).
@njit(cache=True)
def _lower_mirrored(x):
    """The symmetric matrix a routine reading the lower triangle of ``x`` sees."""
    n = x.shape[0]
    out = np.empty((n, n), dtype=x.dtype)
    for i in range(n):
        for j in range(i + 1):
            out[i, j] = x[i, j]
            out[j, i] = x[i, j]
    return out


@njit(cache=True)
def _lower_folded(x):
    """The cotangent of the matrix such a routine was given, from ``x``, that of
    the symmetric matrix it saw: below the diagonal x_ij + x_ji (the entry was
    used twice), x_ii on it, and zeros above (never read)."""
    n = x.shape[0]
    out = np.zeros((n, n), dtype=x.dtype)
    for i in range(n):
        for j in range(i):
            out[i, j] = x[i, j] + x[j, i]
        out[i, i] = x[i, i]
    return out


def _trsolve_fwd(t, b, lower, trans):
    x = _trsolve(t, b, lower, trans)
    return x, (t, x, lower, trans)


def _trsolve_bwd(res, g):
    t, x, lower, trans = res
    gb = _trsolve(t, g, lower, not trans)
    gt = -(x @ gb.T) if trans else -(gb @ x.T)
    return _triangle(gt, lower), gb, None, None


def _trsolve_jvp(primals, tangents):
    t, b, lower, trans = primals
    dt, db = tangents[0], tangents[1]
    x = _trsolve(t, b, lower, trans)
    d_op = _triangle(dt.T, not lower) if trans else _triangle(dt, lower)     # op(dt)
    return x, _trsolve(t, db - d_op @ x, lower, trans)


builtin_vjp(__name__, "_trsolve", _trsolve_fwd, _trsolve_bwd, _trsolve_jvp)


# -- solve(a, b): a x = b -------------------------------------------------------------------
@njit(cache=True)
def _solve_defined(a, b):
    """``np.linalg.solve(a, b)`` for a tangent or cotangent ``b``: one that is
    undefined upstream (inf or nan, e.g. through equal eigenvalues) gives nan,
    where LAPACK's solve would raise LinAlgError."""
    if not np.all(np.isfinite(b)):
        undefined = np.linalg.solve(a, np.zeros_like(b))    # (its type: float32 stays)
        undefined.fill(np.nan)
        return undefined
    return np.linalg.solve(a, b)


def _solve_fwd(a, b):
    x = np.linalg.solve(a, b)
    return x, (a, x)


def _solve_bwd(res, g):
    a, x = res
    gb = _solve_defined(a.T, g)
    ga = -(_as_column(gb) @ _as_column(x).T)
    return ga, gb


def _solve_jvp(primals, tangents):
    a, b = primals
    da, db = tangents
    x = np.linalg.solve(a, b)
    dx = _solve_defined(a, db - (da @ _as_column(x)).reshape(x.shape))
    return x, dx


_rule("solve_impl", _solve_fwd, _solve_bwd, _solve_jvp)


# -- inv(a) ---------------------------------------------------------------------------------
def _inv_fwd(a):
    y = np.linalg.inv(a)
    return y, y


def _inv_bwd(y, g):
    return (-(y.T @ g @ y.T),)


def _inv_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    y = np.linalg.inv(a)
    return y, -(y @ da @ y)


_rule("inv_impl", _inv_fwd, _inv_bwd, _inv_jvp)


# -- det(a), slogdet(a) -----------------------------------------------------------------------
# Both derivatives need inv(a), and one LU factorization gives the determinant
# and the inverse (LAPACK getrf, then getri): the gradient costs the inverse's
# price, not a second factorization on top of it.
def _lu_slogdet_inverse(a):
    """(sign, log|det a|, inv(a), False) from one LU factorization; (.., True)
    for a singular ``a``, whose inverse and sign are then meaningless."""
    raise NotImplementedError


@overload(_lu_slogdet_inverse)
def _ol_lu_slogdet_inverse(a):
    lapack = numba_linalg._LAPACK()
    getrf = lapack.numba_xxgetrf(a.dtype)
    getri = lapack.numba_ez_xxgetri(a.dtype)
    kind = ord(numba_linalg.get_blas_kind(a.dtype, "slogdet"))
    diagonal_walk = numba_linalg._get_slogdet_diag_walker(a)
    pivot_type = numba_linalg.F_INT_nptype
    copy_to_fortran = numba_linalg._copy_to_fortran_order
    check_finite = numba_linalg._check_finite_matrix
    lapack_error = numba_linalg._inv_err_handler
    keep_alive = numba_linalg._dummy_liveness_func

    def impl(a):
        n = a.shape[-1]
        if a.shape[-2] != n:
            raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square.")
        check_finite(a)
        lu = copy_to_fortran(a)
        if n == 0:
            return 1.0, 0.0, lu, False
        pivots = np.empty(n, dtype=pivot_type)
        info = getrf(kind, n, n, lu.ctypes, n, pivots.ctypes)
        if info > 0:                # singular: no inverse
            keep_alive([lu.size, pivots.size])
            return 1.0, 0.0, lu, True
        lapack_error(info)
        parity = 1                  # np.linalg.slogdet's sign of the permutation
        for k in range(n):
            parity = parity + (pivots[k] != (k + 1))
        parity = parity & 1
        if parity == 0:
            parity = -1
        sign, logdet = diagonal_walk(n, lu, parity)
        lapack_error(getri(kind, n, lu.ctypes, n, pivots.ctypes))
        keep_alive([lu.size, pivots.size])
        return sign, logdet, lu, False

    return impl


@njit(cache=True)
def _slogdet_inverse(a):
    """``np.linalg.slogdet(a)`` and ``np.linalg.inv(a)`` (one factorization). At
    a singular ``a`` (sign 0, logdet -inf) the inverse, adj(a) / det(a), is
    infinite (nan where a cofactor is 0 too), as the derivative of logdet is."""
    sign, logdet, inverse, singular = _lu_slogdet_inverse(a)
    if singular:
        adjugate = np.asfortranarray(_singular_cofactors(a).T).astype(inverse.dtype)
        return 0.0 * sign, logdet - np.inf, adjugate * np.float32(np.inf)   # (/ det = 0)
    return sign, logdet, inverse


def _slogdet_inverse_fwd(a):
    sign, logdet, ainv = _slogdet_inverse(a)
    return (sign, logdet, ainv), ainv


def _slogdet_inverse_bwd(ainv, g):
    _, glog, ginv = g
    return (glog * ainv.T - ainv.T @ ginv @ ainv.T,)


# (reverse mode only: second order differentiates det's and slogdet's jvp rules
# in reverse, and no rule's forward mode calls it)
builtin_vjp(__name__, "_slogdet_inverse", _slogdet_inverse_fwd, _slogdet_inverse_bwd)


@njit(cache=True)
def _singular_cofactors(a):
    """The cofactor matrix of a singular ``a`` (the gradient of det there, which
    the inverse cannot give): from a = U S V^T, det(U) det(V) U adj(S) V^T, with
    adj(S) = diag(prod of the other singular values)."""
    u, s, vt = np.linalg.svd(a)
    others = np.diag(_products_of_others(s))
    return (np.linalg.det(u) * np.linalg.det(vt)) * ((u * others.reshape(1, -1)) @ vt)


@njit(cache=True)
def _products_of_others(s):
    """p with p_ij the product of the entries of ``s`` other than s_i and s_j
    (p_ii: other than s_i), by prefix and suffix products: no division, so
    exact where entries are 0."""
    n = s.size
    others = np.empty((n, n), dtype=s.dtype)
    prefix, suffix = np.empty(n + 1, dtype=s.dtype), np.empty(n + 1, dtype=s.dtype)
    for i in range(n):
        prefix[0] = suffix[n] = 1.0
        for k in range(n):
            prefix[k + 1] = prefix[k] * (s[k] if k != i else 1.0)
            suffix[n - 1 - k] = suffix[n - k] * (s[n - 1 - k] if n - 1 - k != i else 1.0)
        for j in range(n):
            others[i, j] = prefix[j] * suffix[j + 1]
    return others


@njit(cache=True)
def _det_parts(a):
    """(det(a), its cofactor matrix: the gradient of det, a^-T) from one LU
    factorization; where ``a`` is singular, the cofactors from the SVD and an
    empty a^-T."""
    sign, logdet, ainv, singular = _lu_slogdet_inverse(a)
    if singular:
        return np.linalg.det(a), _singular_cofactors(a), np.empty((0, 0), dtype=ainv.dtype)
    d = sign * np.exp(logdet)           # (as np.linalg.det)
    ainv_t = np.ascontiguousarray(ainv.T)
    return d, d * ainv_t, ainv_t


@njit(cache=True)
def _det_cofactors(a):
    """(det(a), its cofactor matrix), for every mode's rule of det."""
    d, cofactors, _ = _det_parts(a)
    return d, cofactors


def _det_cofactors_fwd(a):
    d, cofactors, _ = _det_parts(a)
    return (d, cofactors), (cofactors, a)


def _det_cofactors_bwd(res, g):
    cofactors, a = res
    gd, gc = g
    return (gd * cofactors + _cofactors_cotangent(a, gc),)


@njit(cache=True)
def _cofactors_cotangent(a, gc):
    """The cotangent of ``a`` from ``gc``, that of its cofactor matrix C. In the
    SVD a = U S V^T a step E = U F V^T moves C by det(U V^T) U dC(S)[F] V^T,
    where for the diagonal S, with p_ij the product of the singular values
    other than s_i and s_j, dC(S)[F]_ii = sum_(k != i) F_kk p_ik and
    dC(S)[F]_ij = -F_ji p_ij. No division: exact at singular and nearly
    singular matrices, where C = det(a) a^-T cancels a tiny det against a huge
    inverse. (det of a float32 matrix is a float64, and so are C and gc.)"""
    u, s, vt = np.linalg.svd(a.astype(gc.dtype))
    n = s.size
    g = u.T @ gc @ vt.T
    others = _products_of_others(s)
    fbar = -(g * others).T
    for k in range(n):
        fbar[k, k] = 0.0
        for i in range(n):
            if i != k:
                fbar[k, k] += g[i, i] * others[i, k]
    return (np.linalg.det(u) * np.linalg.det(vt)) * (u @ fbar @ vt)


# (second order differentiates det's jvp rule in reverse, through this rule)
builtin_vjp(__name__, "_det_cofactors", _det_cofactors_fwd, _det_cofactors_bwd)


def _det_fwd(a):
    return _det_cofactors(a)


def _det_bwd(cofactors, g):
    return (g * cofactors,)


def _det_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    d, cofactors = _det_cofactors(a)
    return d, np.sum(cofactors * da)


_rule("det_impl", _det_fwd, _det_bwd, _det_jvp)


def _slogdet_fwd(a):
    sign, logdet, ainv = _slogdet_inverse(a)
    return (sign, logdet), ainv


def _slogdet_bwd(ainv, g):
    return (g[1] * ainv.T,)


def _slogdet_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    sign, logdet, ainv = _slogdet_inverse(a)
    return (sign, logdet), (0.0 * sign, np.sum(ainv.T * da))


_rule("slogdet_impl", _slogdet_fwd, _slogdet_bwd, _slogdet_jvp)


# -- cholesky(a) = L, a = L L^T -----------------------------------------------------------------
@njit(cache=True)
def _phi(x):
    """The lower triangle of x with its diagonal halved."""
    return _triangle(x, True, 0.5)


def _cholesky_fwd(a):
    lower = np.linalg.cholesky(a)
    return lower, lower


@njit(cache=True)
def _cholesky_adjoint_block(lower, abar, j0, k0):
    """Murray's unblocked reverse sweep over the diagonal block rows and columns
    j0:k0 of ``lower``, in place in ``abar`` (its columns j0:k0 below the block
    are already done)."""
    for j in range(k0 - 1, j0 - 1, -1):
        d = lower[j, j]
        dbar = abar[j, j]
        for i in range(j + 1, k0):
            dbar -= lower[i, j] * abar[i, j] / d
        dbar /= d
        for i in range(j + 1, k0):
            abar[i, j] /= d
        for m in range(j0, j):
            abar[j, m] -= dbar * lower[j, m]
        for i in range(j + 1, k0):
            c = abar[i, j]
            for m in range(j0, j):
                abar[j, m] -= c * lower[i, m]
                abar[i, m] -= c * lower[j, m]
        abar[j, j] = dbar / 2


@njit(cache=True)
def _cholesky_adjoint(lower, g):
    """abar of a = L L^T from Lbar = g (its lower triangle), in the lower
    triangle of a, the one cholesky reads (``_lower_folded`` of the symmetric
    cotangent): the blocked reverse sweep of Murray's "Differentiation of the
    Cholesky decomposition" (2016), from the last block of rows to the first, each
    block's products done by BLAS: about twice the primal's n^3/3 flops, where the
    closed form sym(L^-T Phi(L^T Lbar) L^-1) takes a product and two triangular
    solves (4 n^3)."""
    n = lower.shape[0]
    width = 32 if n < 400 else 64        # (level-2 work in the blocks vs. BLAS's)
    abar = np.zeros((n, n), dtype=lower.dtype)
    for i in range(n):
        for j in range(i + 1):
            abar[i, j] = g[i, j]
    k = n
    while k > 0:
        j = max(0, k - width)
        # rows and columns j:k: the block D; R = L[j:k, :j] left of it, C = L[k:, j:k]
        # below it, B = L[k:, :j] below R (and their adjoints at the same places)
        left = np.ascontiguousarray(lower[j:k, :j])
        if k < n:
            below = np.ascontiguousarray(lower[k:, j:k])
            cbar = np.ascontiguousarray(
                _trsolve(lower[j:k, j:k], abar[k:, j:k].T, True, True).T)     # Cbar D^-1
            abar[k:, j:k] = cbar
            if j > 0:
                abar[k:, :j] -= cbar @ left
            cbar_t = np.ascontiguousarray(cbar.T)
            ctc = cbar_t @ below
            for a in range(k - j):
                for b in range(a + 1):
                    abar[j + a, j + b] -= ctc[a, b]
        _cholesky_adjoint_block(lower, abar, j, k)
        if j > 0:
            dbar = np.zeros((k - j, k - j), dtype=lower.dtype)
            for a in range(k - j):
                for b in range(a + 1):
                    dbar[a, b] = abar[j + a, j + b]
            update = (dbar + dbar.T) @ left
            if k < n:
                update += cbar_t @ np.ascontiguousarray(lower[k:, :j])
            abar[j:k, :j] -= update
        k = j
    return abar


def _cholesky_bwd(lower, g):
    return (_cholesky_adjoint(lower, g),)


def _cholesky_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    lower = np.linalg.cholesky(a)
    y = _trsolve(lower, _lower_mirrored(da), True, False)             # L^-1 dA
    s = _trsolve(lower, y.T, True, False)                           # L^-1 dA L^-T (symmetric)
    return lower, lower @ _phi(s)


_rule("cho_impl", _cholesky_fwd, _cholesky_bwd, _cholesky_jvp)


# -- eigh(a) = (w, v): a v = v diag(w) ------------------------------------------------------------
# (NumPy's error model: equal eigenvalues give inf, as the derivative of their
# vectors is undefined, instead of raising ZeroDivisionError)
@njit(cache=True, error_model="numpy")
def _eigh_f(w):
    n = w.shape[0]
    f = np.zeros((n, n), dtype=w.dtype)
    for i in range(n):
        for j in range(n):
            if i != j:
                f[i, j] = 1.0 / (w[j] - w[i])
    return f


def _eigh_fwd(a):
    w, v = np.linalg.eigh(a)
    return (w, v), (w, v)


def _eigh_bwd(res, g):
    w, v = res
    gw, gv = g
    inner = np.diag(gw)
    if np.any(gv != 0.0):       # (the eigenvalues alone have a derivative when some are equal)
        inner = inner + _eigh_f(w) * (v.T @ gv)
    abar = v @ inner @ v.T
    return (_lower_folded(abar),)


def _eigh_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    w, v = np.linalg.eigh(a)
    s = v.T @ _lower_mirrored(da) @ v
    return (w, v), (np.diag(s).copy(), v @ (_eigh_f(w) * s))


_rule("eigh_impl", _eigh_fwd, _eigh_bwd, _eigh_jvp)


def _eigvalsh_fwd(a):
    w, v = np.linalg.eigh(a)
    return w, v


def _eigvalsh_bwd(v, g):
    abar = (v * g) @ v.T
    return (_lower_folded(abar),)


def _eigvalsh_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    w, v = np.linalg.eigh(a)
    return w, np.sum(v * (_lower_mirrored(da) @ v), axis=0)


_rule("eigvalsh_impl", _eigvalsh_fwd, _eigvalsh_bwd, _eigvalsh_jvp)


# -- eigvals(a) of a real matrix with real eigenvalues: a = v diag(w) v^-1 ----------------------
# dw = diag(v^-1 da v), so abar = v^-T diag(g) v^T. (Numba raises for complex eigenvalues.)
def _eigvals_fwd(a):
    w, v = np.linalg.eig(a)
    return w, v


def _eigvals_bwd(v, g):
    return (_solve_defined(v.T, _as_column(g) * v.T),)


def _eigvals_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    w, v = np.linalg.eig(a)
    return w, np.diag(_solve_defined(v, da @ v)).copy()


_rule("eigvals_impl", _eigvals_fwd, _eigvals_bwd, _eigvals_jvp, inner="real_eigvals_impl")


# -- eig(a) = (w, v) of a real matrix with real eigenvalues, columns of v of unit norm ----------
# With m = v^-1 da v: dw = diag(m), dv = p(v (f o m)), f as for eigh (1 / (w[j] - w[i]) off
# the diagonal), and p(x) = x - v diag(diag(v^T x)) keeping the columns' norms.
def _eig_fwd(a):
    w, v = np.linalg.eig(a)
    return (w, v), (w, v)


def _eig_bwd(res, g):
    w, v = res
    gw, gv = g
    vt = np.ascontiguousarray(v.T)
    mbar = np.diag(gw)
    if np.any(gv != 0.0):       # (as for eigh: equal eigenvalues leave w's derivative defined)
        kept = gv - v * np.sum(v * gv, axis=0).reshape(1, -1)   # the adjoint of p
        mbar = mbar + _eigh_f(w) * (vt @ kept)
    return (_solve_defined(vt, mbar @ vt),)


def _eig_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    w, v = np.linalg.eig(a)
    m = _solve_defined(v, da @ v)
    raw = v @ (_eigh_f(w) * m)
    dv = raw - v * np.sum(v * raw, axis=0).reshape(1, -1)
    return (w, v), (np.diag(m).copy(), dv)


_rule("eig_impl", _eig_fwd, _eig_bwd, _eig_jvp, inner="real_eig_impl")


# -- svd(a, full_matrices) = (u, s, vh), a = u diag(s) vh -------------------------------------
@njit(cache=True, error_model="numpy")       # (equal singular values: inf, as for eigh)
def _svd_f(s):
    k = s.shape[0]
    f = np.zeros((k, k), dtype=s.dtype)
    for i in range(k):
        for j in range(k):
            if i != j:
                f[i, j] = 1.0 / (s[j] * s[j] - s[i] * s[i])
    return f


def _svd_fwd(a, full_matrices):
    u, s, vh = np.linalg.svd(a, full_matrices)
    return (u, s, vh), (a, u, s, vh)


def _svd_bwd(res, g):
    # Reduced SVD (Townsend 2016); the extra columns of a full SVD of a
    # non-square matrix are not unique, so they may carry no cotangent.
    a, u_full, s, vh_full = res
    gu_full, gs, gvh_full = g
    m, n = a.shape
    k = s.shape[0]
    if np.any(gu_full[:, k:] != 0.0) or np.any(gvh_full[k:, :] != 0.0):
        raise ValueError("np.linalg.svd: the derivative through the extra singular vectors "
                         "of a full SVD of a non-square matrix is not defined; use "
                         "full_matrices=False")
    u = np.ascontiguousarray(u_full[:, :k])
    v = np.ascontiguousarray(vh_full[:k, :].T)
    gu = np.ascontiguousarray(gu_full[:, :k])
    gv = np.ascontiguousarray(gvh_full[:k, :].T)
    if not (np.any(gu != 0.0) or np.any(gv != 0.0)):
        # singular values alone: defined even where some are equal or zero
        return u @ (gs.reshape(k, 1) * v.T), None
    f = _svd_f(s)
    ut_gu = u.T @ gu
    vt_gv = v.T @ gv
    inner = (f * (ut_gu - ut_gu.T)) * s.reshape(1, k) + np.diag(gs) + \
        s.reshape(k, 1) * (f * (vt_gv - vt_gv.T))
    abar = u @ inner @ v.T
    inv_s = np.ones_like(s) / s          # (1.0 / s would be float64 for float32 s)
    abar += (gu - u @ ut_gu) * inv_s.reshape(1, k) @ v.T
    abar += u @ ((gv - v @ vt_gv) * inv_s.reshape(1, k)).T
    return abar, None


def _svd_jvp(primals, tangents):
    a, full_matrices = primals
    da = tangents[0]
    u_full, s, vh_full = np.linalg.svd(a, full_matrices)
    k = s.shape[0]
    u = np.ascontiguousarray(u_full[:, :k])
    v = np.ascontiguousarray(vh_full[:k, :].T)
    p = u.T @ da @ v
    ds = np.diag(p).copy()
    f = _svd_f(s)
    sk = s.reshape(1, k)
    du = u @ (f * (p * sk + (sk.T * p.T))) + (da @ v - u @ p) / sk
    dv = v @ (f * (sk.T * p + p.T * sk)) + (da.T @ u - v @ p.T) / sk
    du_full = np.full(u_full.shape, np.nan, dtype=a.dtype)     # extra columns: undefined
    du_full[:, :k] = du
    dvh_full = np.full(vh_full.shape, np.nan, dtype=a.dtype)
    dvh_full[:k, :] = dv.T
    return (u_full, s, vh_full), (du_full, ds, dvh_full)


_rule("svd_impl", _svd_fwd, _svd_bwd, _svd_jvp)


# -- qr(a) = (q, r), reduced ----------------------------------------------------------------
@njit(cache=True)
def _copy_lower_to_upper(x):
    return np.tril(x) + np.tril(x, -1).T


@njit(cache=True)
def _qr_bwd_tall(q, r, gq, gr):
    # m >= n (Walter & Lehmann): abar = (gq + q copyltu(M)) r^-T, M = r gr^T - gq^T q
    mm = r @ gr.T - gq.T @ q
    b = gq + q @ _copy_lower_to_upper(mm)
    return _solve_defined(r, b.T).T


def _qr_fwd(a):
    q, r = np.linalg.qr(a)
    return (q, r), (q, r)


def _qr_bwd(res, g):
    q, r = res
    gq, gr = g
    m, n = q.shape[0], r.shape[1]
    if m >= n:
        return (_qr_bwd_tall(q, r, gq, gr),)
    # m < n (Liao et al. 2019): a = [x | y], x = q u, y = q v
    u = np.ascontiguousarray(r[:, :m])
    v = np.ascontiguousarray(r[:, m:])
    gu = np.ascontiguousarray(gr[:, :m])
    gv = np.ascontiguousarray(gr[:, m:])
    y = q @ v
    abar = np.empty((m, n), dtype=q.dtype)
    abar[:, :m] = _qr_bwd_tall(q, u, gq + y @ gv.T, gu)
    abar[:, m:] = q @ gv
    return (abar,)


@njit(cache=True)
def _qr_jvp_tall(q, r, da):
    # m >= n: dq = q omega + (I - q q^T) da r^-1, dr = (q^T da r^-1 - omega) r
    c = _solve_defined(r.T, (q.T @ da).T).T            # q^T da r^-1
    omega = np.tril(c, -1) - np.tril(c, -1).T
    dq = q @ omega + (da - q @ (q.T @ da)) @ np.linalg.inv(r)
    return dq, (c - omega) @ r


def _qr_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    q, r = np.linalg.qr(a)
    m, n = a.shape
    if m >= n:
        return (q, r), _qr_jvp_tall(q, r, da)
    # m < n: a = [x | y] with x = q u square and v = q^T y, so dv = dq^T y + q^T dy
    dq, du = _qr_jvp_tall(q, np.ascontiguousarray(r[:, :m]), np.ascontiguousarray(da[:, :m]))
    dr = np.empty((m, n), dtype=r.dtype)
    dr[:, :m] = du
    y, dy = np.ascontiguousarray(a[:, m:]), np.ascontiguousarray(da[:, m:])
    dr[:, m:] = np.ascontiguousarray(dq).T @ y + q.T @ dy
    return (q, r), (dq, dr)


_rule("qr_impl", _qr_fwd, _qr_bwd, _qr_jvp)


# -- pinv(a) --------------------------------------------------------------------------------
# The derivative of the pseudo-inverse where the rank is constant (Golub & Pereyra 1973).
@njit(cache=True)
def _pinv_cotangent(a, p, g):
    m, n = a.shape
    ap = np.eye(m, dtype=a.dtype) - a @ p
    pa = np.eye(n, dtype=a.dtype) - p @ a
    return -(p.T @ g @ p.T) + ap @ g.T @ p @ p.T + p.T @ p @ g.T @ pa


@njit(cache=True)
def _pinv_tangent(a, p, da):
    m, n = a.shape
    ap = np.eye(m, dtype=a.dtype) - a @ p
    pa = np.eye(n, dtype=a.dtype) - p @ a
    return -(p @ da @ p) + p @ p.T @ da.T @ ap + pa @ da.T @ p.T @ p


# A cut-off (pinv's rcond, lstsq's rank) that drops singular values makes the
# pseudo-inverse that of the truncation a_k = U_k S_k V_k^T, not of a: its derivative
# is Golub & Pereyra's for a_k along the derivative of the truncation. In the
# singular bases that derivative keeps the kept block, drops the dropped one, and
# mixes each kept i with each dropped j (s_i > s_j): c_ij -> (s_i^2 c_ij + s_i s_j c_ji)
# / (s_i^2 - s_j^2), alike for c_ji; the null spaces' directions are dropped ones
# with s_j = 0, kept as they are. The map is self-adjoint: it takes cotangents too.
@njit(cache=True)
def _truncation_weights(c, s, rank):
    r = c.shape[0]
    out = np.zeros_like(c)
    for i in range(rank):
        for j in range(rank):
            out[i, j] = c[i, j]
        si = s[i]
        for j in range(rank, r):
            sj = s[j]
            d = si * si - sj * sj
            out[i, j] = (si * si * c[i, j] + si * sj * c[j, i]) / d
            out[j, i] = (si * si * c[j, i] + si * sj * c[i, j]) / d
    return out


@njit(cache=True)
def _truncation_derivative(u, s, vh, rank, x):
    """The derivative of the rank-``rank`` truncation of u diag(s) vh (the thin
    SVD) along ``x``; or, the same map, the cotangent of the matrix from ``x``,
    that of its truncation."""
    ut = np.ascontiguousarray(u.T)
    v = np.ascontiguousarray(vh.T)
    out = u @ _truncation_weights(ut @ x @ v, s, rank) @ vh
    uk, vhk = np.ascontiguousarray(u[:, :rank]), np.ascontiguousarray(vh[:rank])
    ukt, vk = np.ascontiguousarray(uk.T), np.ascontiguousarray(vhk.T)
    left = ukt @ x                                  # kept rows, null-space columns
    out += uk @ (left - (left @ v) @ vh)
    right = x @ vk                                  # null-space rows, kept columns
    out += (right - u @ (ut @ right)) @ vhk
    return out


@njit(cache=True)
def _truncation(u, s, vh, rank):
    """The rank-``rank`` truncation of u diag(s) vh."""
    return np.ascontiguousarray(u[:, :rank] * s[:rank].reshape(1, -1)) \
        @ np.ascontiguousarray(vh[:rank])


@njit(cache=True)
def _pinv_of_rank(u, s, vh, rank):
    """The pseudo-inverse of the rank-``rank`` truncation of u diag(s) vh."""
    return np.ascontiguousarray(vh[:rank].T / s[:rank].reshape(1, -1)) \
        @ np.ascontiguousarray(u[:, :rank].T)


@njit(cache=True)
def _cut_pinv_cotangent(a, p, g, u, s, vh, rank):
    """The cotangent of ``a`` from ``g``, that of ``p``, its pseudo-inverse cut at
    ``rank`` (``u, s, vh``: its thin SVD)."""
    if rank >= min(a.shape[0], a.shape[1]):
        return _pinv_cotangent(a, p, g)
    ak = _truncation(u, s, vh, rank)
    return _truncation_derivative(u, s, vh, rank, _pinv_cotangent(ak, p, g))


@njit(cache=True)
def _cut_pinv_tangent(a, p, da, u, s, vh, rank):
    """The tangent of that pseudo-inverse along ``da``."""
    if rank >= min(a.shape[0], a.shape[1]):
        return _pinv_tangent(a, p, da)
    ak = _truncation(u, s, vh, rank)
    return _pinv_tangent(ak, p, _truncation_derivative(u, s, vh, rank, da))


@njit(cache=True)
def _pinv_svd(a, rcond):
    """(u, s, vh, rank): the thin SVD of ``a`` and the number of singular values
    Numba's pinv keeps, those above rcond s_max."""
    m, n = a.shape
    if m == 0 or n == 0:        # (Numba's svd refuses empty arrays; its pinv does not)
        return (np.zeros((m, 0), dtype=a.dtype), np.zeros(0, dtype=a.dtype),
                np.zeros((0, n), dtype=a.dtype), 0)
    u, s, vh = np.linalg.svd(a, False)
    return u, s, vh, np.sum(s > s[0] * rcond)


def _pinv_fwd(a, rcond):
    p = np.linalg.pinv(a, rcond)
    return p, (a, p, rcond)


def _pinv_bwd(res, g):
    a, p, rcond = res
    return _cut_pinv_cotangent(a, p, g, *_pinv_svd(a, rcond)), None


def _pinv_jvp(primals, tangents):
    a, rcond = primals
    p = np.linalg.pinv(a, rcond)
    return p, _cut_pinv_tangent(a, p, tangents[0], *_pinv_svd(a, rcond))


_rule("pinv_impl", _pinv_fwd, _pinv_bwd, _pinv_jvp)


# -- lstsq(a, b, rcond) = (x, residuals, rank, s) -------------------------------------------
# With at least as many rows as columns (full column rank) x = (a^T a)^-1 a^T b; with fewer
# (full row rank) LAPACK's x is the minimum-norm solution a^T (a a^T)^-1 b. Below full rank
# (a rank-deficient a, or rcond cutting off singular values), x = pinv(a_k) b, the
# pseudo-inverse cut at the rank LAPACK found, with its derivative (above).
def _lstsq_fwd(a, b, rcond):
    x, residues, rank, s = np.linalg.lstsq(a, b, rcond)
    return (x, residues, rank, s), (a, b, x, rank)


def _lstsq_bwd(res, g):
    a, b, x, rank = res
    gx, gres, _, gs = g
    x2 = _as_column(x)
    gx2 = _as_column(gx).astype(a.dtype)
    if rank < min(a.shape):  # (then LAPACK returns no residuals)
        u, sv, vh = np.linalg.svd(a, False)
        p = _pinv_of_rank(u, sv, vh, rank)
        abar = _cut_pinv_cotangent(a, p, gx2 @ _as_column(b).T, u, sv, vh, rank)
        bbar = np.ascontiguousarray(p.T @ gx2)
    elif a.shape[0] >= a.shape[1]:
        r = _as_column(b) - a @ x2
        z = _solve_defined(a.T @ a, gx2)
        abar = r @ z.T - a @ z @ x2.T
        bbar = np.ascontiguousarray(a @ z)
        if gres.size:        # residuals: the squared norms of the columns of r
            twice = (r + r) * gres.astype(a.dtype).reshape(1, -1)   # (float32 stays)
            abar -= twice @ x2.T
            bbar += twice
    else:                    # x = a^T y, y = (a a^T)^-1 b
        k = a @ a.T
        y = np.linalg.solve(k, _as_column(b))
        w = _solve_defined(k, a @ gx2)
        abar = y @ gx2.T - (w @ y.T + y @ w.T) @ a
        bbar = np.ascontiguousarray(w)
    if np.any(gs != 0.0):    # the singular values of a
        u, s, vh = np.linalg.svd(a, False)
        abar += (u * gs.astype(a.dtype).reshape(1, -1)) @ vh
    return abar, bbar.reshape(b.shape), None


def _lstsq_jvp(primals, tangents):
    a, b, rcond = primals
    da, db = tangents[0], tangents[1]
    x, residues, rank, s = np.linalg.lstsq(a, b, rcond)
    x2 = _as_column(x)
    r = _as_column(b) - a @ x2
    if rank < min(a.shape):
        u, sv, vh = np.linalg.svd(a, False)
        p = _pinv_of_rank(u, sv, vh, rank)
        dx = _cut_pinv_tangent(a, p, da, u, sv, vh, rank) @ _as_column(b) + p @ _as_column(db)
    elif a.shape[0] >= a.shape[1]:
        dx = _solve_defined(a.T @ a, da.T @ r + a.T @ (_as_column(db) - da @ x2))
    else:
        k = a @ a.T
        y = np.linalg.solve(k, _as_column(b))
        dy = _solve_defined(k, _as_column(db) - (da @ a.T + a @ da.T) @ y)
        dx = da.T @ y + a.T @ dy
    dres = np.zeros_like(residues)
    if residues.size:
        # (a float literal times a float32 array is float64 in Numba)
        dres = (-2.0 * np.sum(r * (da @ x2 - _as_column(db) + a @ dx), axis=0)).astype(
            residues.dtype)
    u, s2, vh = np.linalg.svd(a, False)
    ds = np.sum(u * (da @ vh.T), axis=0)
    return (x, residues, rank, s), (np.ascontiguousarray(dx).reshape(x.shape), dres, rank, ds)


_rule("lstsq_impl", _lstsq_fwd, _lstsq_bwd, _lstsq_jvp)


# -- helpers of np.linalg.norm and np.linalg.cond ----------------------------------------------
def _norm2_fwd(a):
    r = np.linalg.norm(a)          # (BLAS's scaled sum: no overflow or underflow)
    return r, (a, r)


def _norm2_bwd(res, g):
    a, r = res
    if r == 0.0:                   # a kink: the subgradient 0, as PyTorch
        return (np.zeros_like(a),)
    return (a * (g / r),)


def _norm2_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    r = np.linalg.norm(a)
    if r == 0.0:
        return r, 0.0 * r
    return r, np.sum((a / r) * da)


_rule("_oneD_norm_2_impl", _norm2_fwd, _norm2_bwd, _norm2_jvp, inner="impl")


def _singular_values_fwd(a):
    u, s, vh = np.linalg.svd(a, False)
    return s, (u, vh)


def _singular_values_bwd(res, g):
    u, vh = res
    return ((u * g.reshape(1, -1)) @ vh,)


def _singular_values_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    u, s, vh = np.linalg.svd(a, False)
    return s, np.sum(u * (da @ vh.T), axis=0)


_rule("_compute_singular_values_impl", _singular_values_fwd, _singular_values_bwd,
      _singular_values_jvp, inner="sv_function")
