"""Record or recompute (enzpy/remat.py): the minimum cut's choices, and what they save on
the tape of real programs, with the derivatives checked against analytic ones.

Keys stand for primal values; the graphs are the ones planning builds: ``visit(key, type,
pushed, recomputable, parent)`` with ``parent`` None for a value a rule asks for.
"""
import math
import re

import numpy as np
import pytest
from numba import njit

import enzpy
from enzpy import Const, Duplicated, Reverse, autodiff
from enzpy.remat import DependenceGraph


def graph_of(values, in_loop=True):
    """values: key -> (recomputable, parents); a parent None is a rule's demand."""
    graph = DependenceGraph(in_loop)
    for key, (recomputable, parents) in values.items():
        for parent in parents:
            graph.visit(key, "double", True, recomputable, parent)
    return graph


def test_a_product_of_two_loads_is_recorded_instead_of_its_operands():
    # x = a * b, only x needed: one record instead of two
    graph = graph_of({"x": (True, [None]), "a": (False, ["x"]), "b": (False, ["x"])})
    assert graph.recorded() == {"x"}


def test_operands_needed_anyway_make_recomputing_free():
    # a is needed by a rule too: recording a and b (x recomputed) beats a and x
    graph = graph_of({"x": (True, [None]), "a": (False, ["x", None]), "b": (False, ["x"])})
    assert graph.recorded() == {"a", "b"}


def test_a_tie_recomputes():
    # x = a + 1.0: recording x or a costs the same; a is recorded, x recomputed
    graph = graph_of({"x": (True, [None]), "a": (False, ["x"])})
    assert graph.recorded() == {"a"}


def test_values_recomputed_from_free_operands_are_never_recorded():
    graph = graph_of({"x": (True, [None]), "y": (True, ["x", None])})
    assert graph.recorded() == frozenset()


def test_a_shared_operand_is_recorded_once_for_many_values():
    # x1 = a * b1, x2 = a * b2, x3 = a * b3 with b1..b3 needed anyway: record a
    values = {f"x{i}": (True, [None]) for i in range(3)}
    values.update({f"b{i}": (False, [f"x{i}", None]) for i in range(3)})
    values["a"] = (False, ["x0", "x1", "x2"])
    assert graph_of(values).recorded() == {"a", "b0", "b1", "b2"}


def test_a_loop_block_prefers_the_frame():
    # x = a * c inside a loop, c loop-invariant (in the frame, once per call), a a
    # recorded load: recording a each iteration and c once beats recording x
    graph = DependenceGraph(in_loop=True)
    graph.visit("x", "double", True, True, None)
    graph.visit("a", "double", True, False, "x")
    graph.visit("c", "double", False, False, "x")
    graph.visit("a", "double", True, False, None)
    assert graph.recorded() == {"a", "c"}


# -- real programs -------------------------------------------------------------------------
@njit
def sin_of_scaled(x, w, v):
    """c = w[i] * v[i] is needed (for sin's derivative and x's adjoint), w and v are
    not: they are overwritten, so they would be recorded, two values where c is one."""
    s = 0.0
    for i in range(x.shape[0]):
        c = w[i] * v[i]
        if c > 0.25:
            s += math.sin(c * x[i])
        else:
            s += c * x[i] * x[i]
        w[i] = 2.0
        v[i] = 3.0
    return s


def sin_of_scaled_gradient(x, w, v):
    c = w * v
    return np.where(c > 0.25, np.cos(c * x) * c, 2 * c * x)


def tape_bytes(n):
    """The tape of one gradient call of sin_of_scaled on n elements."""
    rng = np.random.default_rng(n)
    x, w, v = rng.random(n), rng.random(n), rng.random(n)
    dx = np.zeros(n)
    autodiff(Reverse, sin_of_scaled, Duplicated(x.copy(), dx), Const(w.copy()), Const(v.copy()))
    report = enzpy.build_report(sin_of_scaled)[-1]
    report.peak_tape_bytes = 0
    autodiff(Reverse, sin_of_scaled, Duplicated(x.copy(), dx), Const(w.copy()), Const(v.copy()))
    return report.peak_tape_bytes


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_recomputing_less_records_less(n):
    rng = np.random.default_rng(n)
    x, w, v = rng.random(n), rng.random(n), rng.random(n)
    dx = np.zeros(n)
    autodiff(Reverse, sin_of_scaled, Duplicated(x.copy(), dx), Const(w.copy()), Const(v.copy()))
    np.testing.assert_allclose(dx, sin_of_scaled_gradient(x, w, v), rtol=1e-12)
    assert n < 7 or ((w * v > 0.25).any() and (w * v <= 0.25).any())    # both branches


def test_one_record_per_iteration_where_the_greedy_rule_kept_two():
    # per iteration: c (8 bytes) and the branch taken (a tag slot), not w[i] and v[i]
    ten, thousand = tape_bytes(10), tape_bytes(1000)
    assert thousand - ten <= 16 * 990, (ten, thousand)


# -- values defined before a loop: once per run of the loop ---------------------------------
@njit
def weighted_sum(s, w):
    return (w * s).sum()


@njit
def broadcast_and_shifted(s, v):
    return (s * v.reshape(1, -1)).sum() + (np.exp(0.5 * s[1:]) * s[:-1]).sum()


def broadcast_and_shifted_gradient(s, v):
    ds = np.broadcast_to(v, s.shape).copy()
    ds[1:] += 0.5 * np.exp(0.5 * s[1:]) * s[:-1]
    ds[:-1] += np.exp(0.5 * s[1:])
    return ds, s.sum(axis=0)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (1, 1), (1, 5), (4, 1), (6, 7)])
def test_array_expressions_over_rows_and_columns(shape):
    # loops of 0, 1 and many iterations in each dimension, broadcasting and shifted views
    rng = np.random.default_rng(sum(shape))
    s, w, v = rng.standard_normal(shape), rng.standard_normal(shape), rng.standard_normal(shape[1])
    ds = np.zeros_like(s)
    autodiff(Reverse, weighted_sum, Duplicated(s, ds), Const(w))
    np.testing.assert_allclose(ds, w, rtol=1e-14)
    ds, dv = np.zeros_like(s), np.zeros_like(v)
    autodiff(Reverse, broadcast_and_shifted, Duplicated(s, ds), Duplicated(v, dv))
    want_s, want_v = broadcast_and_shifted_gradient(s, v)
    np.testing.assert_allclose(ds, want_s, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dv, want_v, rtol=1e-12, atol=1e-14)


def weighted_sum_tape(rows, cols):
    s, w = np.ones((rows, cols)), np.ones((rows, cols))
    autodiff(Reverse, weighted_sum, Duplicated(s, np.zeros_like(s)), Const(w))
    report = enzpy.build_report(weighted_sum)[-1]
    report.peak_tape_bytes = 0
    autodiff(Reverse, weighted_sum, Duplicated(s, np.zeros_like(s)), Const(w))
    return report.peak_tape_bytes


def test_an_array_expression_records_per_row_not_per_element():
    # Numba's broadcasting index of the outer dimension is recorded once per row (at
    # the inner loop's exit), the inner one is the loop's own index, and w[i, j] is read
    # again (the sum's new array, made by a callee, is no write to unknown memory):
    # before, 24 bytes per element (the two indices and w[i, j])
    narrow, wide = weighted_sum_tape(20, 5), weighted_sum_tape(20, 500)
    assert wide == narrow, (narrow, wide)


UNTIE_IR = """
define i64 @f(i64 %n, i1 %c, i64 %init) {
entry:
  br label %h
h:
  %i = phi i64 [ 0, %entry ], [ %i1, %body ]
  %p = phi i64 [ %init, %entry ], [ %s, %body ]
  %q = phi i64 [ %init, %entry ], [ %t, %body ]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %exit
body:
  %c2 = icmp sgt i64 %i, 3
  %s = select i1 %c, i64 %i, i64 %p
  %t = select i1 %c2, i64 %i, i64 %q
  %i1 = add i64 %i, 1
  br label %h
exit:
  %r = add i64 %p, %q
  ret i64 %r
}
"""


def test_a_select_kept_by_an_invariant_condition_is_untied_from_its_phi():
    from enzpy.analysis import untie_carried_selects
    from enzpy.irtext import read_module_text
    fn = read_module_text(UNTIE_IR).functions["f"]
    untie_carried_selects(fn)
    # %c is the same in every iteration: %p stays %init while it is false
    assert [o.name for o in fn.defs["s"].operands] == ["c", "i", "init"]
    assert fn.defs["s"].text.endswith('select i1 %"c", i64 %"i", i64 %"init"')
    # %c2 changes with %i: %q carries the last %i > 3 (untouched)
    assert [o.name for o in fn.defs["t"].operands] == ["c2", "i", "q"]


@njit
def _fresh_pair(level, s):
    return 1.0 / level + 0.5 * s          # a new 2-vector each step


@njit
def _steps_allocating(s0, level, steps):
    s = s0.copy()
    total = 0.0
    for _ in range(steps):
        s = _fresh_pair(level, s)
        total += s[0] * s[1]
    return total


def test_numbas_allocation_helpers_are_inlined_not_differentiated(tmp_path, monkeypatch):
    """``np.empty`` reaches the allocation through a chain of Numba helpers; inlined
    before differentiation, they get no derivative functions (and record nothing)."""
    monkeypatch.setenv("ENZPY_DUMP", str(tmp_path))
    monkeypatch.setenv("ENZPY_CACHE", "0")
    f = njit(_steps_allocating.py_func)
    s0, ds0 = np.array([0.3, 0.8]), np.zeros(2)
    autodiff(Reverse, f, Duplicated(s0, ds0), Const(2.0), Const(3))
    h = 1e-6
    for i in range(2):
        up, down = s0.copy(), s0.copy()
        up[i] += h
        down[i] -= h
        assert ds0[i] == pytest.approx((f(up, 2.0, 3) - f(down, 2.0, 3)) / (2 * h), rel=1e-6)
    text = (tmp_path / "_steps_allocating.derivative.ll").read_text()
    derivatives = set(re.findall(r'define internal \S+ @"enzpy\.d\d+\.([^"]+)\.aug"', text))
    assert any("_fresh_pair" in name for name in derivatives)
    helpers = ("_call_allocator", "_ol_array_allocate", "ol_np_empty")
    assert not any(h in name for h in helpers for name in derivatives), derivatives


def test_a_step_allocating_an_array_records_little():
    """Each step allocates a 2-vector through Numba's helpers: what the step records is
    its values and its shadow, not the helpers' edges (the allocation's null check is
    threaded away before differentiation: 88 bytes per step before, then 80)."""
    f = njit(_steps_allocating.py_func)
    per_call = []
    for steps in (10, 20):
        s0, ds0 = np.array([0.3, 0.8]), np.zeros(2)
        autodiff(Reverse, f, Duplicated(s0, ds0), Const(2.0), Const(steps))
        report = enzpy.build_report(f)[-1]
        per_call.append(report.peak_tape_bytes)
        report.peak_tape_bytes = 0
    assert (per_call[1] - per_call[0]) / 10 <= 64
