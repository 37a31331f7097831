"""Loops left from several blocks: every reverse loop has one entry block.

The reverse of a loop starts at the reverse of the block the primal left it
from. A loop left from its header's test and from its body (an early
``return`` or ``break``, or the exception exit every call in a loop has)
would get a reverse cycle with two entries, which LLVM's loop passes do not
optimize. These tests check the gradients along every exit (zero, one and
many iterations; nested loops left from the inner body) and that the control
flow of every reverse function is reducible.
"""
import math

import networkx as nx
import numpy as np
import pytest
from numba import njit

from enzpy import Active, Const, Duplicated, Reverse, autodiff
from enzpy.irtext import read_module_text

from helpers import check_reverse


@njit
def _bump(v, w):
    return v * v * w + math.sin(v)


@njit
def first_crossing(x, w, limit):
    """Sum of _bump over x until the running sum passes ``limit`` (early return)."""
    s = 0.0
    for i in range(x.shape[0]):
        s += _bump(x[i], w)
        if s > limit:
            return s * w
    return s


@njit
def nested_early_exit(x, w, limit):
    """Rows of x, left from the inner loop's body when a partial sum passes ``limit``."""
    total = 0.0
    for i in range(x.shape[0]):
        row = 0.0
        for j in range(x.shape[1]):
            row += _bump(x[i, j], w)
            if total + row > limit:
                return (total + row) * w
        total += row * w
    return total


@njit
def inner_break(x, w, limit):
    """An inner loop left by ``break`` or by its header, inside an outer loop."""
    total = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            v = _bump(x[i, j], w)
            if v > limit:
                break
            total += v
        total *= w
    return total


def _gradient(f, x, w, *const):
    dx = np.zeros_like(x)
    (grads,) = autodiff(Reverse, f, Duplicated(x, dx), Active(w), *map(Const, const))
    return dx, grads[1]


def _central(f, x, w, *const, h=1e-6):
    dx = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        up, down = x.copy(), x.copy()
        up[idx] += h
        down[idx] -= h
        dx[idx] = (f(up, w, *const) - f(down, w, *const)) / (2 * h)
    dw = (f(x, w + h, *const) - f(x, w - h, *const)) / (2 * h)
    return dx, dw


# limits chosen so that the loop runs 0, 1 or several iterations before leaving
# early, or never leaves early
@pytest.mark.parametrize("f, shape, limit", [
    (first_crossing, (0,), 1.0),
    (first_crossing, (1,), 100.0),
    (first_crossing, (6,), -10.0),          # leaves in the first iteration
    (first_crossing, (6,), 1.5),            # leaves after a few
    (first_crossing, (6,), 100.0),          # runs to the end
    (nested_early_exit, (3, 4), -10.0),
    (nested_early_exit, (3, 4), 2.5),
    (nested_early_exit, (3, 4), 100.0),
    (nested_early_exit, (0, 4), 1.0),
    (inner_break, (3, 4), 0.4),
    (inner_break, (3, 4), -10.0),
    (inner_break, (3, 4), 100.0),
])
def test_gradients_along_every_exit_of_a_loop(f, shape, limit):
    rng = np.random.default_rng(sum(shape) + abs(int(limit)))
    x = rng.uniform(0.1, 1.0, shape)
    w = 0.7
    dx, dw = _gradient(f, x, w, limit)
    want_dx, want_dw = _central(f, x, w, limit)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-6, atol=1e-8)
    assert dw == pytest.approx(want_dw, rel=1e-6, abs=1e-8)


def test_scalar_loop_with_a_call_against_central_differences():
    @njit
    def powers(x, n):
        s = 0.0
        for k in range(n):
            s += _bump(x, 0.5) / (k + 1)
            if s > 3.0:
                break
        return s

    for n in (0, 1, 7):
        check_reverse(powers, [Active(0.8), Const(n)])


def _reverse_functions(folder, name):
    module = read_module_text(open(folder / f"{name}.derivative.ll").read())
    return [fn for fn_name, fn in module.functions.items() if fn_name.endswith(".rev")]


def _retreating_edges(fn):
    """Edges of a depth-first search of ``fn``'s blocks that go back to a block
    on the search's stack, with whether their target dominates their source (it
    does for every such edge exactly when the control flow is reducible: each
    loop is entered through its header alone)."""
    graph = nx.DiGraph()
    for b in fn.blocks:
        graph.add_node(b.name)
        graph.add_edges_from((b.name, succ) for succ in b.successors)
    entry = fn.blocks[0].name
    idom = nx.immediate_dominators(graph, entry)

    def dominates(a, b):
        while b != a and idom[b] != b:
            b = idom[b]
        return a == b

    on_stack, seen, edges = {entry}, {entry}, []
    stack = [(entry, iter(graph.successors(entry)))]
    while stack:
        node, succs = stack[-1]
        succ = next(succs, None)
        if succ is None:
            on_stack.discard(node)
            stack.pop()
        elif succ in on_stack:
            edges.append((node, succ, dominates(succ, node)))
        elif succ not in seen:
            seen.add(succ)
            on_stack.add(succ)
            stack.append((succ, iter(graph.successors(succ))))
    return edges


@pytest.mark.parametrize("f, shape, loops", [(first_crossing, (5,), 1),
                                             (nested_early_exit, (3, 4), 2),
                                             (inner_break, (3, 4), 2)])
def test_every_reverse_loop_has_one_entry_block(f, shape, loops, tmp_path, monkeypatch):
    monkeypatch.setenv("ENZPY_DUMP", str(tmp_path))
    monkeypatch.setenv("ENZPY_CACHE", "0")
    # a fresh dispatcher: the derivative is built (and dumped) here
    g = njit(f.py_func)
    x = np.linspace(0.2, 0.9, int(np.prod(shape))).reshape(shape)
    autodiff(Reverse, g, Duplicated(x, np.zeros_like(x)), Active(0.7), Const(1.0))
    reverses = _reverse_functions(tmp_path, f.py_func.__name__)
    assert reverses
    back_edges = [(fn.name, edge) for fn in reverses for edge in _retreating_edges(fn)]
    assert len(back_edges) >= loops
    assert all(dominated for _, (_, _, dominated) in back_edges), back_edges


# -- the slots Numba passes for a callee's result ----------------------------------
# Numba returns a float (or a tuple of floats) through a stack slot its caller
# passes. The shadow of such a slot only ever holds an adjoint, so the reverse
# sweep keeps it on its own stack, where LLVM turns it into a register: a loop
# calling a small function then vectorises like the same loop written inline
# (test_arrays.py: test_reverse_of_an_elementwise_loop_is_vectorised).

@njit
def _pair(v, w):
    return w * v * v, math.cos(v) * w


@njit
def _ramp(n, v):
    out = np.empty(n)
    for k in range(n):
        out[k] = v * (k + 1)
    return out


@njit
def calls_in_a_loop(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        a, b = _pair(x[i], w)           # a tuple of floats through the slot
        s += a - b * _bump(x[i], w)     # a float through the slot
    return s


@njit
def calls_returning_arrays(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += _ramp(3, x[i] * w).sum()   # an array: its slot holds pointers
    return s


@pytest.mark.parametrize("f", [calls_in_a_loop, calls_returning_arrays])
@pytest.mark.parametrize("n", [0, 1, 9])
def test_gradients_through_the_slots_of_callee_results(f, n):
    x = np.linspace(-0.8, 1.1, n)
    dx, dw = _gradient(f, x, 0.6)
    want_dx, want_dw = _central(f, x, 0.6)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-6, atol=1e-8)
    assert dw == pytest.approx(want_dw, rel=1e-6, abs=1e-8)
