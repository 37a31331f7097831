"""DynamicExpressions.jl's tree evaluator, ported to Numba and differentiated by enzpy.

A port of the MWE from the Enzyme.jl issue "Extremely long compilation time on
recursive, branching functions (DynamicExpressions.jl)": a symbolic-regression
expression tree is evaluated over a data matrix ``X`` (shape
``(n_features, n)``) by a recursive evaluator with one ``if`` chain per choice
of operator (Julia's ``Base.Cartesian.@nif``), and the reverse-mode gradient of
``sum(eval_tree_array(tree, X))`` is taken with respect to ``X`` and to the
tree's constants.

How the Julia pieces map to this file:

* ``OperatorEnum(binops, unaops)``       -> :func:`operator_set` (``OperatorSet``);
  every operator is its own ``@njit`` function, so kernels that take an operator
  as an argument (``op::F``) are specialised per operator by Numba, as by Julia.
* ``Node{T}`` (a mutable struct)         -> seven flat arrays, node 0 the root,
  children by index (:class:`Tree`); ``feature`` is 0-based here.
* ``ResultOk(x, ok)``                    -> the tuple ``(x, ok)``.
* the ``@generated`` ``_eval_tree_array`` / ``_eval_constant_tree`` with
  ``@nif`` -> Python source generated per operator set and fuse level
  (:func:`evaluator_source`), exec'd and ``numba.njit``-ed (:func:`build_evaluator`).
* ``Val(fuse_level)``                    -> the global ``fuse_level`` of the
  generated module, a compile-time constant for Numba.
* ``similar(cX, axes(cX, 2))`` / ``fill_similar`` -> ``np.empty(n)`` / :func:`fill_similar`;
  ``cX[feature, :]`` copies (as in Julia), so the evaluator never writes into ``X``.

Division: the MWE uses ``/``; here ``safe_div(a, b) = a*b / (1 + b*b)`` stands in
for it so that every operator is smooth everywhere (a finite-difference check of
``a / b`` near ``b = 0`` means nothing).

Run ``python examples/dynamic_expressions.py`` (options: ``--k 2 --fuse-level 1
--nodes 30 --n 100``; the default is the MWE's 4+4 operators at fuse level 2, ~2-3 min).
"""
from __future__ import annotations

import linecache
import math
import time
from collections import namedtuple

import numba
import numpy as np
from numba import njit

# Import enzpy before anything is compiled: enzpy records the LLVM IR of every
# Numba function compiled after its import (a recursive function compiled
# earlier currently fails to build; see tests/test_seeds.py).
import enzpy
from enzpy import Const, Duplicated, Reverse, autodiff

# ---------------------------------------------------------------------------
# Operators (OperatorEnum.jl).  Smooth everywhere, so that finite differences
# are meaningful at every point.
# ---------------------------------------------------------------------------


@njit
def add(a, b):
    return a + b


@njit
def sub(a, b):
    return a - b


@njit
def mul(a, b):
    return a * b


@njit
def safe_div(a, b):
    """a / b for |b| >> 1, smooth through b = 0."""
    return a * b / (1.0 + b * b)


@njit
def soft_hypot(a, b):
    return math.sqrt(a * a + b * b + 1.0)


@njit
def mean2(a, b):
    return 0.5 * (a + b)


@njit
def cos_mul(a, b):
    return a * math.cos(b)


@njit
def gauss_mul(a, b):
    return a * math.exp(-b * b)


@njit
def tanh_mul(a, b):
    return a * math.tanh(b)


@njit
def atan_mul(a, b):
    return math.atan(a * b)


@njit
def log_sumsq(a, b):
    return math.log(1.0 + a * a + b * b)


@njit
def square_plus(a, b):
    return a * a + b


@njit
def gauss_diff(a, b):
    d = a - b
    return math.exp(-d * d)


@njit
def sqrt_mul(a, b):
    return a * math.sqrt(1.0 + b * b)


@njit
def fma1(a, b):
    return a * b + a


@njit
def smooth_max(a, b):
    d = a - b
    return 0.5 * (a + b + math.sqrt(d * d + 1.0))


@njit
def cos(x):
    return math.cos(x)


@njit
def sin(x):
    return math.sin(x)


@njit
def exp(x):
    return math.exp(x)


@njit
def tanh(x):
    return math.tanh(x)


@njit
def square(x):
    return x * x


@njit
def neg(x):
    return -x


@njit
def atan(x):
    return math.atan(x)


@njit
def gauss(x):
    return math.exp(-x * x)


@njit
def log1p_square(x):
    return math.log1p(x * x)


@njit
def sqrt1p_square(x):
    return math.sqrt(1.0 + x * x)


@njit
def sigmoid(x):
    return 0.5 * (1.0 + math.tanh(0.5 * x))


@njit
def erf(x):
    return math.erf(x)


@njit
def asinh(x):
    return math.asinh(x)


@njit
def cube(x):
    return x * x * x


@njit
def isru(x):
    return x / math.sqrt(1.0 + x * x)


@njit
def swish(x):
    return x * 0.5 * (1.0 + math.tanh(0.5 * x))


#: all binary operators, in the order operator sets take them
#: (the first four are the MWE's ``(+, -, *, /)``)
BINARY_OPERATORS = (add, sub, mul, safe_div, soft_hypot, mean2, cos_mul, gauss_mul,
                    tanh_mul, atan_mul, log_sumsq, square_plus, gauss_diff, sqrt_mul,
                    fma1, smooth_max)
#: all unary operators (the first four are the MWE's ``(cos, sin, exp, tanh)``)
UNARY_OPERATORS = (cos, sin, exp, tanh, square, neg, atan, gauss, log1p_square,
                   sqrt1p_square, sigmoid, erf, asinh, cube, isru, swish)

OperatorSet = namedtuple("OperatorSet", "binops unaops")


def operator_set(k):
    """The ``OperatorEnum`` with the first ``k`` binary and first ``k`` unary operators.

    ``k`` = 2 gives ``((add, sub), (cos, sin))``, ``k`` = 4 the MWE's
    ``((+, -, *, /), (cos, sin, exp, tanh))`` (with ``safe_div`` for ``/``);
    ``k`` may be 1..16.
    """
    if not 1 <= k <= len(BINARY_OPERATORS):
        raise ValueError(f"k must be in 1..{len(BINARY_OPERATORS)}, got {k}")
    return OperatorSet(BINARY_OPERATORS[:k], UNARY_OPERATORS[:k])


def operator_name(fn):
    return getattr(fn, "py_func", fn).__name__


# ---------------------------------------------------------------------------
# Trees (Equation.jl).  Node i: degree[i] (0 leaf, 1 unary, 2 binary),
# constant[i] (leaf: 1 constant, 0 feature), val[i] (a constant's value),
# feature[i] (a variable's row of X, 0-based), op[i] (0-based operator index),
# left[i], right[i] (children, -1 if none).  Node 0 is the root.
# ---------------------------------------------------------------------------

Tree = namedtuple("Tree", "degree constant val feature op left right")


def empty_tree(n_nodes):
    """A :class:`Tree` of ``n_nodes`` blank nodes (int64 fields, float64 ``val``)."""
    i = lambda: np.zeros(n_nodes, dtype=np.int64)  # noqa: E731
    return Tree(i(), i(), np.zeros(n_nodes), i(), i(), i() - 1, i() - 1)


def tree_from_nested(expr):
    """Build a :class:`Tree` from nested tuples, preorder (node 0 the root).

    ``("x", f)`` is feature ``f``, ``("c", v)`` a constant, ``("u", op, child)``
    a unary and ``("b", op, left, right)`` a binary node (``op`` 0-based).
    Example: ``("b", 0, ("x", 0), ("u", 0, ("x", 1)))`` is ``x1 + cos(x2)``.
    """
    nodes = []

    def visit(e):
        i = len(nodes)
        nodes.append(None)
        kind = e[0]
        if kind == "x":
            nodes[i] = (0, 0, 0.0, e[1], 0, -1, -1)
        elif kind == "c":
            nodes[i] = (0, 1, float(e[1]), 0, 0, -1, -1)
        elif kind == "u":
            nodes[i] = (1, 0, 0.0, 0, e[1], visit(e[2]), -1)
        elif kind == "b":
            left = visit(e[2])
            nodes[i] = (2, 0, 0.0, 0, e[1], left, visit(e[3]))
        else:
            raise ValueError(f"unknown node kind {kind!r}")
        return i

    visit(expr)
    tree = empty_tree(len(nodes))
    for i, fields in enumerate(nodes):
        for arr, v in zip(tree, fields):
            arr[i] = v
    return tree


def random_tree(n_nodes, n_features, operators, rng, p_constant=0.3, p_unary=0.35):
    """A random :class:`Tree` with exactly ``n_nodes`` nodes (preorder, node 0 the root).

    ``operators``: an :class:`OperatorSet` (or ``(n_binary, n_unary)``);
    ``rng``: a ``numpy.random.Generator``. Leaves are constants (uniform in
    [-2, 2]) with probability ``p_constant``, else a feature in
    ``range(n_features)``; an inner node is unary with probability
    ``p_unary`` (always when exactly one node is left for its subtree).
    """
    if n_nodes < 1:
        raise ValueError("a tree has at least one node")
    if isinstance(operators, OperatorSet):
        n_bin, n_una = len(operators.binops), len(operators.unaops)
    else:
        n_bin, n_una = operators
    tree = empty_tree(n_nodes)
    counter = [0]

    def grow(m):
        i = counter[0]
        counter[0] += 1
        if m == 1:
            tree.degree[i] = 0
            if rng.random() < p_constant:
                tree.constant[i] = 1
                tree.val[i] = rng.uniform(-2.0, 2.0)
            else:
                tree.feature[i] = rng.integers(n_features)
        elif m == 2 or rng.random() < p_unary:
            tree.degree[i] = 1
            tree.op[i] = rng.integers(n_una)
            tree.left[i] = grow(m - 1)
        else:
            tree.degree[i] = 2
            tree.op[i] = rng.integers(n_bin)
            n_left = int(rng.integers(1, m - 1))          # 1 .. m-2
            tree.left[i] = grow(n_left)
            tree.right[i] = grow(m - 1 - n_left)
        return i

    grow(n_nodes)
    return tree


def tree_string(tree, operators, i=0):
    """The expression as a string, e.g. ``add(x0, cos(x1))``."""
    d = tree.degree[i]
    if d == 0:
        return f"{tree.val[i]:.4g}" if tree.constant[i] else f"x{tree.feature[i]}"
    if d == 1:
        return (f"{operator_name(operators.unaops[tree.op[i]])}"
                f"({tree_string(tree, operators, tree.left[i])})")
    return (f"{operator_name(operators.binops[tree.op[i]])}("
            f"{tree_string(tree, operators, tree.left[i])}, "
            f"{tree_string(tree, operators, tree.right[i])})")


def eval_tree_reference(tree, X, operators, i=0):
    """Plain-Python evaluation (the operators' ``py_func``), for checking the evaluator."""
    d = tree.degree[i]
    n = X.shape[1]
    if d == 0:
        return np.full(n, tree.val[i]) if tree.constant[i] else X[tree.feature[i], :].copy()
    if d == 1:
        op = operators.unaops[tree.op[i]].py_func
        x = eval_tree_reference(tree, X, operators, tree.left[i])
        return np.array([op(v) for v in x])
    op = operators.binops[tree.op[i]].py_func
    a = eval_tree_reference(tree, X, operators, tree.left[i])
    b = eval_tree_reference(tree, X, operators, tree.right[i])
    return np.array([op(u, v) for u, v in zip(a, b)])


# ---------------------------------------------------------------------------
# EvaluateEquation.jl: the kernels that do not depend on the operator set.
# ``tree`` is the tuple (degree, constant, val, feature, op, left, right);
# an operator ``op`` is an @njit function passed as an argument (``op::F``).
# ---------------------------------------------------------------------------


@njit
def fill_similar(value, cX):
    out_array = np.empty(cX.shape[1], dtype=cX.dtype)
    out_array[:] = value
    return out_array


@njit
def is_bad_array(array):
    return not (array.size == 0 or np.isfinite(np.sum(array)))


@njit
def is_constant(tree, i):
    degree, constant, val, feature, op, left, right = tree
    if degree[i] == 0:
        return constant[i] != 0
    elif degree[i] == 1:
        return is_constant(tree, left[i])
    else:
        return is_constant(tree, left[i]) and is_constant(tree, right[i])


@njit
def deg2_eval(cumulator_l, cumulator_r, op):
    for j in range(cumulator_l.shape[0]):
        x = op(cumulator_l[j], cumulator_r[j])
        cumulator_l[j] = x
    return cumulator_l, True


@njit
def deg1_eval(cumulator, op):
    for j in range(cumulator.shape[0]):
        x = op(cumulator[j])
        cumulator[j] = x
    return cumulator, True


@njit
def deg0_eval(tree, i, cX):
    degree, constant, val, feature, op, left, right = tree
    if constant[i]:
        return fill_similar(val[i], cX), True
    else:
        return cX[feature[i], :].copy(), True


@njit
def deg1_l2_ll0_lr0_eval(tree, i, cX, op, op_l):
    """op(op_l(x, y)) for x, y constants or variables."""
    degree, constant, val, feature, _op, left, right = tree
    l = left[i]
    ll = left[l]
    lr = right[l]
    if constant[ll] and constant[lr]:
        val_ll = val[ll]
        val_lr = val[lr]
        x_l = op_l(val_ll, val_lr)
        x = op(x_l)
        return fill_similar(x, cX), True
    elif constant[ll]:
        val_ll = val[ll]
        feature_lr = feature[lr]
        cumulator = np.empty(cX.shape[1], dtype=cX.dtype)
        for j in range(cX.shape[1]):
            x_l = op_l(val_ll, cX[feature_lr, j])
            x = op(x_l) if math.isfinite(x_l) else math.inf
            cumulator[j] = x
        return cumulator, True
    elif constant[lr]:
        feature_ll = feature[ll]
        val_lr = val[lr]
        cumulator = np.empty(cX.shape[1], dtype=cX.dtype)
        for j in range(cX.shape[1]):
            x_l = op_l(cX[feature_ll, j], val_lr)
            x = op(x_l) if math.isfinite(x_l) else math.inf
            cumulator[j] = x
        return cumulator, True
    else:
        feature_ll = feature[ll]
        feature_lr = feature[lr]
        cumulator = np.empty(cX.shape[1], dtype=cX.dtype)
        for j in range(cX.shape[1]):
            x_l = op_l(cX[feature_ll, j], cX[feature_lr, j])
            x = op(x_l) if math.isfinite(x_l) else math.inf
            cumulator[j] = x
        return cumulator, True


@njit
def deg1_l1_ll0_eval(tree, i, cX, op, op_l):
    """op(op_l(x)) for x a constant or variable."""
    degree, constant, val, feature, _op, left, right = tree
    ll = left[left[i]]
    if constant[ll]:
        val_ll = val[ll]
        x_l = op_l(val_ll)
        x = op(x_l)
        return fill_similar(x, cX), True
    else:
        feature_ll = feature[ll]
        cumulator = np.empty(cX.shape[1], dtype=cX.dtype)
        for j in range(cX.shape[1]):
            x_l = op_l(cX[feature_ll, j])
            x = op(x_l) if math.isfinite(x_l) else math.inf
            cumulator[j] = x
        return cumulator, True


@njit
def deg2_l0_r0_eval(tree, i, cX, op):
    """op(x, y) for x and y constants or variables."""
    degree, constant, val, feature, _op, left, right = tree
    l = left[i]
    r = right[i]
    if constant[l] and constant[r]:
        val_l = val[l]
        val_r = val[r]
        x = op(val_l, val_r)
        return fill_similar(x, cX), True
    elif constant[l]:
        cumulator = np.empty(cX.shape[1], dtype=cX.dtype)
        val_l = val[l]
        feature_r = feature[r]
        for j in range(cX.shape[1]):
            x = op(val_l, cX[feature_r, j])
            cumulator[j] = x
        return cumulator, True
    elif constant[r]:
        cumulator = np.empty(cX.shape[1], dtype=cX.dtype)
        feature_l = feature[l]
        val_r = val[r]
        for j in range(cX.shape[1]):
            x = op(cX[feature_l, j], val_r)
            cumulator[j] = x
        return cumulator, True
    else:
        cumulator = np.empty(cX.shape[1], dtype=cX.dtype)
        feature_l = feature[l]
        feature_r = feature[r]
        for j in range(cX.shape[1]):
            x = op(cX[feature_l, j], cX[feature_r, j])
            cumulator[j] = x
        return cumulator, True


@njit
def deg2_l0_eval(tree, i, cumulator, cX, op):
    """op(x, y) for x a constant or variable, y arbitrary (already in ``cumulator``)."""
    degree, constant, val, feature, _op, left, right = tree
    l = left[i]
    if constant[l]:
        v = val[l]
        for j in range(cumulator.shape[0]):
            x = op(v, cumulator[j])
            cumulator[j] = x
        return cumulator, True
    else:
        f = feature[l]
        for j in range(cumulator.shape[0]):
            x = op(cX[f, j], cumulator[j])
            cumulator[j] = x
        return cumulator, True


@njit
def deg2_r0_eval(tree, i, cumulator, cX, op):
    """op(x, y) for x arbitrary (already in ``cumulator``), y a constant or variable."""
    degree, constant, val, feature, _op, left, right = tree
    r = right[i]
    if constant[r]:
        v = val[r]
        for j in range(cumulator.shape[0]):
            x = op(cumulator[j], v)
            cumulator[j] = x
        return cumulator, True
    else:
        f = feature[r]
        for j in range(cumulator.shape[0]):
            x = op(cumulator[j], cX[f, j])
            cumulator[j] = x
        return cumulator, True


@njit
def deg0_eval_constant(tree, i):
    output = tree[2][i]
    out = np.empty(1)
    out[0] = output
    return out, True


_KERNELS = dict(
    math=math, np=np, fill_similar=fill_similar, is_bad_array=is_bad_array,
    is_constant=is_constant, deg0_eval=deg0_eval, deg1_eval=deg1_eval, deg2_eval=deg2_eval,
    deg1_l2_ll0_lr0_eval=deg1_l2_ll0_lr0_eval, deg1_l1_ll0_eval=deg1_l1_ll0_eval,
    deg2_l0_r0_eval=deg2_l0_r0_eval, deg2_l0_eval=deg2_l0_eval, deg2_r0_eval=deg2_r0_eval,
    deg0_eval_constant=deg0_eval_constant,
)


# ---------------------------------------------------------------------------
# The generated part (the @generated functions of the MWE).
# ---------------------------------------------------------------------------


def _nif(n, cond, expr, indent):
    """``Base.Cartesian.@nif(n, i -> cond(i), i -> expr(i))`` as Python source lines:
    ``if cond(0): expr(0) elif ... else: expr(n-1)``."""
    pad = " " * indent
    lines = []
    for i in range(n):
        if n == 1:
            head = None
        elif i == 0:
            head = f"if {cond(i)}:"
        elif i < n - 1:
            head = f"elif {cond(i)}:"
        else:
            head = "else:"
        if head is None:
            lines += [pad + line for line in expr(i)]
        else:
            lines.append(pad + head)
            lines += [pad + "    " + line for line in expr(i)]
    return lines


def evaluator_source(nbin, nuna):
    """Python source of the evaluator for ``nbin`` binary and ``nuna`` unary operators.

    The operators are the globals ``BINOPS_i`` / ``UNAOPS_i``, the fuse level the
    global ``fuse_level``; :func:`build_evaluator` supplies both.
    """
    L = []
    w = L.append

    # _eval_tree_array ----------------------------------------------------
    def unary_branch(i):
        fused_bin = _nif(nbin, lambda j: f"l_op_idx == {j}",
                         lambda j: [f"return deg1_l2_ll0_lr0_eval(tree, i, cX, op, BINOPS_{j})"],
                         0)
        fused_una = _nif(nuna, lambda j: f"l_op_idx == {j}",
                         lambda j: [f"return deg1_l1_ll0_eval(tree, i, cX, op, UNAOPS_{j})"],
                         0)
        return ([f"op = UNAOPS_{i}",
                 "if fuse_level > 1 and degree[l] == 2 and degree[left[l]] == 0 "
                 "and degree[right[l]] == 0:",
                 "    # op(op2(x, y)), where x, y are constants or variables.",
                 "    l_op_idx = op_arr[l]"]
                + ["    " + s for s in fused_bin]
                + ["elif fuse_level > 1 and degree[l] == 1 and degree[left[l]] == 0:",
                   "    # op(op2(x)), where x is a constant or variable.",
                   "    l_op_idx = op_arr[l]"]
                + ["    " + s for s in fused_una]
                + ["else:",
                   "    # op(x), for any x.",
                   "    result, ok = _eval_tree_array(tree, l, cX)",
                   "    if not ok:",
                   "        return result, ok",
                   "    return deg1_eval(result, op)"])

    def binary_branch(i):
        return [f"op = BINOPS_{i}",
                "if fuse_level > 1 and degree[l] == 0 and degree[r] == 0:",
                "    return deg2_l0_r0_eval(tree, i, cX, op)",
                "elif degree[r] == 0:",
                "    result_l, ok_l = _eval_tree_array(tree, l, cX)",
                "    if not ok_l:",
                "        return result_l, ok_l",
                "    # op(x, y), where y is a constant or variable but x is not.",
                "    return deg2_r0_eval(tree, i, result_l, cX, op)",
                "elif degree[l] == 0:",
                "    result_r, ok_r = _eval_tree_array(tree, r, cX)",
                "    if not ok_r:",
                "        return result_r, ok_r",
                "    # op(x, y), where x is a constant or variable but y is not.",
                "    return deg2_l0_eval(tree, i, result_r, cX, op)",
                "else:",
                "    result_l, ok_l = _eval_tree_array(tree, l, cX)",
                "    if not ok_l:",
                "        return result_l, ok_l",
                "    result_r, ok_r = _eval_tree_array(tree, r, cX)",
                "    if not ok_r:",
                "        return result_r, ok_r",
                "    # op(x, y), for any x or y",
                "    return deg2_eval(result_l, result_r, op)"]

    w("def _eval_tree_array(tree, i, cX):")
    w("    degree, constant, val, feature, op_arr, left, right = tree")
    w("    # First, we see if there are only constants in the tree - meaning")
    w("    # we can just return the constant result.")
    w("    if degree[i] == 0:")
    w("        return deg0_eval(tree, i, cX)")
    w("    elif is_constant(tree, i):")
    w("        # Speed hack for constant trees.")
    w("        const_x, const_ok = _eval_constant_tree(tree, i)")
    w("        if not const_ok:")
    w("            return np.empty(cX.shape[1], dtype=cX.dtype), False")
    w("        return fill_similar(const_x[0], cX), True")
    w("    elif degree[i] == 1:")
    w("        op_idx = op_arr[i]")
    w("        l = left[i]")
    L.extend(_nif(nuna, lambda i: f"op_idx == {i}", unary_branch, 8))
    w("    else:")
    w("        op_idx = op_arr[i]")
    w("        l = left[i]")
    w("        r = right[i]")
    L.extend(_nif(nbin, lambda i: f"op_idx == {i}", binary_branch, 8))
    w("")

    # _eval_constant_tree, deg1_eval_constant, deg2_eval_constant ----------
    w("def _eval_constant_tree(tree, i):")
    w("    degree = tree[0]")
    w("    op_idx = tree[4][i]")
    w("    if degree[i] == 0:")
    w("        return deg0_eval_constant(tree, i)")
    w("    elif degree[i] == 1:")
    L.extend(_nif(nuna, lambda i: f"op_idx == {i}",
                  lambda i: [f"return deg1_eval_constant(tree, i, UNAOPS_{i})"], 8))
    w("    else:")
    L.extend(_nif(nbin, lambda i: f"op_idx == {i}",
                  lambda i: [f"return deg2_eval_constant(tree, i, BINOPS_{i})"], 8))
    w("")
    w("def deg1_eval_constant(tree, i, op):")
    w("    result, ok = _eval_constant_tree(tree, tree[5][i])")
    w("    if not ok:")
    w("        return result, ok")
    w("    output = op(result[0])")
    w("    out = np.empty(1)")
    w("    out[0] = output")
    w("    return out, math.isfinite(output)")
    w("")
    w("def deg2_eval_constant(tree, i, op):")
    w("    cumulator, ok = _eval_constant_tree(tree, tree[5][i])")
    w("    if not ok:")
    w("        return cumulator, ok")
    w("    result_r, ok_r = _eval_constant_tree(tree, tree[6][i])")
    w("    if not ok_r:")
    w("        return result_r, ok_r")
    w("    output = op(cumulator[0], result_r[0])")
    w("    out = np.empty(1)")
    w("    out[0] = output")
    w("    return out, math.isfinite(output)")
    w("")

    # eval_tree_array and the losses ---------------------------------------
    w("def eval_tree_array(tree, cX):")
    w("    # The root is node 0.  np.int64(0), not the literal 0: Numba would")
    w("    # otherwise compile a Literal[int](0) specialisation of the recursive")
    w("    # _eval_tree_array, which enzpy cannot differentiate yet (see the report).")
    w("    result, ok = _eval_tree_array(tree, np.int64(ROOT), cX)")
    w("    return result, ok and not is_bad_array(result)")
    w("")
    w("def loss(degree, constant, val, feature, op, left, right, X, output):")
    w("    # the MWE's f: output[] = sum(eval_tree_array(tree, X, operators, Val(fuse_level))[1])")
    w("    tree = (degree, constant, val, feature, op, left, right)")
    w("    output[0] = np.sum(eval_tree_array(tree, X)[0])")
    w("")
    w("def loss_sumsq(degree, constant, val, feature, op, left, right, X, output):")
    w("    tree = (degree, constant, val, feature, op, left, right)")
    w("    result = eval_tree_array(tree, X)[0]")
    w("    output[0] = np.sum(result * result)")
    w("")
    w("def predict(degree, constant, val, feature, op, left, right, X):")
    w("    tree = (degree, constant, val, feature, op, left, right)")
    w("    return eval_tree_array(tree, X)")
    return "\n".join(L) + "\n"


_GENERATED = ("_eval_tree_array", "_eval_constant_tree", "deg1_eval_constant",
              "deg2_eval_constant", "eval_tree_array", "loss", "loss_sumsq", "predict")
_build_counter = [0]


class Evaluator:
    """The jitted functions generated for one operator set and fuse level.

    * ``loss(*tree, X, output)``: ``output[0] = sum(eval_tree_array(tree, X)[0])``
      (the MWE's ``f``), returns None;
    * ``loss_sumsq(*tree, X, output)``: the same with the sum of squares;
    * ``predict(*tree, X)``: ``(values, ok)``;
    * ``eval_tree_array``, ``_eval_tree_array``, ... : the generated internals;
    * ``source``: the generated Python source.
    """

    def __init__(self, operators, fuse_level, source, namespace):
        self.operators = operators
        self.fuse_level = fuse_level
        self.source = source
        for name in _GENERATED:
            setattr(self, name, namespace[name])

    def __repr__(self):
        b = ", ".join(map(operator_name, self.operators.binops))
        u = ", ".join(map(operator_name, self.operators.unaops))
        return f"Evaluator(binops=({b}), unaops=({u}), fuse_level={self.fuse_level})"


def build_evaluator(k=4, fuse_level=2, operators=None):
    """Generate, exec and ``njit`` the evaluator for ``operator_set(k)`` (or ``operators``).

    Nothing is compiled until the first call. Each call returns new dispatchers.
    """
    if fuse_level not in (1, 2):
        raise ValueError("fuse_level must be 1 or 2")
    ops = operators if operators is not None else operator_set(k)
    source = evaluator_source(len(ops.binops), len(ops.unaops))
    _build_counter[0] += 1
    filename = f"<dynamic_expressions evaluator {_build_counter[0]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(_KERNELS, fuse_level=fuse_level, ROOT=0)
    namespace.update({f"BINOPS_{i}": f for i, f in enumerate(ops.binops)})
    namespace.update({f"UNAOPS_{i}": f for i, f in enumerate(ops.unaops)})
    exec(compile(source, filename, "exec"), namespace)
    for name in _GENERATED:
        namespace[name] = numba.njit(namespace[name])
    return Evaluator(ops, fuse_level, source, namespace)


# ---------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------


def gradients(evaluator, tree, X, wrt=("X", "val"), loss="loss"):
    """enzpy gradient of ``evaluator.<loss>`` w.r.t. ``X`` and/or the tree's ``val``.

    Returns ``(value, dX, dval)`` (``None`` for what is not in ``wrt``); ``X``
    and ``tree`` are not modified.
    """
    f = getattr(evaluator, loss)
    output, doutput = np.zeros(1), np.ones(1)
    dX = np.zeros_like(X) if "X" in wrt else None
    dval = np.zeros_like(tree.val) if "val" in wrt else None
    args = [Const(a) for a in tree]
    if dval is not None:
        args[2] = Duplicated(tree.val, dval)
    args.append(Duplicated(X, dX) if dX is not None else Const(X))
    args.append(Duplicated(output, doutput))
    autodiff(Reverse, f, *args)
    return output[0], dX, dval


def loss_value(evaluator, tree, X, loss="loss"):
    """The primal value of ``evaluator.<loss>`` (computed by Numba)."""
    out = np.zeros(1)
    getattr(evaluator, loss)(*tree, X, out)
    return out[0]


def central_difference(evaluator, tree, X, what, index, h=1e-5, loss="loss"):
    """Central difference of the loss w.r.t. ``X[index]`` or ``tree.val[index]``."""
    vals = []
    for sign in (1.0, -1.0):
        t = Tree(*(a.copy() for a in tree))
        x = X.copy()
        if what == "X":
            x[index] += sign * h
        else:
            t.val[index] += sign * h
        vals.append(loss_value(evaluator, t, x, loss))
    return (vals[0] - vals[1]) / (2 * h)


def pick_tree(n_nodes, n_features, operators, X, seed=0, min_constants=2):
    """The first random tree (seeds ``seed``, ``seed + 1``, ...) with at least
    ``min_constants`` constant leaves whose values on ``X`` are finite and below
    1e6 in magnitude (checked in plain Python, so nothing is compiled)."""
    while True:
        tree = random_tree(n_nodes, n_features, operators, np.random.default_rng(seed))
        n_const = int(((tree.degree == 0) & (tree.constant == 1)).sum())
        if n_const >= min(min_constants, n_nodes):
            with np.errstate(all="ignore"):
                values = eval_tree_reference(tree, X, operators)
            if np.all(np.abs(values) < 1e6):
                return tree, seed
        seed += 1


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description="DynamicExpressions.jl MWE with enzpy")
    parser.add_argument("--k", type=int, default=4, help="k binary + k unary operators")
    parser.add_argument("--fuse-level", type=int, default=2, choices=(1, 2))
    parser.add_argument("--nodes", type=int, default=30, help="nodes of the random tree")
    parser.add_argument("--n", type=int, default=100, help="data points (columns of X)")
    args = parser.parse_args(argv)
    k, fuse_level, n_nodes, n_features, n = args.k, args.fuse_level, args.nodes, 3, args.n
    ops = operator_set(k)
    X = np.random.default_rng(2024).standard_normal((n_features, n))
    tree, seed = pick_tree(n_nodes, n_features, ops, X)
    evaluator = build_evaluator(k, fuse_level)
    print(f"operators: binary {[operator_name(f) for f in ops.binops]}, "
          f"unary {[operator_name(f) for f in ops.unaops]}, fuse_level={fuse_level}")
    print(f"tree ({n_nodes} nodes, seed {seed}): {tree_string(tree, ops)}")

    t0 = time.perf_counter()
    value = loss_value(evaluator, tree, X)
    numba_seconds = time.perf_counter() - t0
    ref = eval_tree_reference(tree, X, ops).sum()
    print(f"loss = sum(eval_tree_array(tree, X)) = {value:.10g} "
          f"(plain Python: {ref:.10g})")
    print(f"Numba compile + first call of the primal: {numba_seconds:.2f} s")

    t0 = time.perf_counter()
    _, dX, dval = gradients(evaluator, tree, X)
    first_grad = time.perf_counter() - t0
    reports = enzpy.build_report(evaluator.loss)
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        gradients(evaluator, tree, X)
    later_grad = (time.perf_counter() - t0) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        loss_value(evaluator, tree, X)
    primal = (time.perf_counter() - t0) / reps
    print(f"|dX| = {np.linalg.norm(dX):.10g}, |dval| = {np.linalg.norm(dval):.10g}")

    worst = 0.0
    big = np.unravel_index(int(np.argmax(np.abs(dX))), dX.shape)
    for index in [(0, 0), (1, n // 3), (2, n // 2), (0, n - 1), tuple(map(int, big))]:
        fd = central_difference(evaluator, tree, X, "X", index)
        err = abs(dX[index] - fd) / max(1.0, abs(fd))
        worst = max(worst, err)
        print(f"  dX{index}: enzpy {dX[index]: .10e}   finite difference {fd: .10e}   "
              f"rel. error {err:.1e}")
    constants = np.flatnonzero((tree.degree == 0) & (tree.constant == 1))
    for c in constants:
        fd = central_difference(evaluator, tree, X, "val", c)
        err = abs(dval[c] - fd) / max(1.0, abs(fd))
        worst = max(worst, err)
        print(f"  dval[{c}] (constant {tree.val[c]:+.4f}): enzpy {dval[c]: .10e}   "
              f"finite difference {fd: .10e}   rel. error {err:.1e}")
    print(f"largest relative error vs central differences: {worst:.1e}")
    for r in reports:
        stages = ", ".join(f"{name} {sec:.2f}" for name, sec in r.timings.items())
        print(f"enzpy build: {r.total:.2f} s (excluding Numba's compile) [{stages}]; "
              f"{r.primal_instructions} primal instructions, "
              f"{r.derivative_functions} derivative functions")
    print(f"first autodiff call (build + run): {first_grad:.2f} s")
    print(f"per call: primal {primal * 1e3:.3f} ms, gradient (X and constants) "
          f"{later_grad * 1e3:.3f} ms")
    print("cache:", enzpy.cache_info())


if __name__ == "__main__":
    main()
