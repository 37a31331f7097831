"""Exits on which a function raises: no record on the tape, gradients unchanged.

A reverse sweep runs only after the call succeeded, and Numba propagates every
callee's exception, so the reverse of a function starts only at an exit that
succeeded (``ControlFlow.failing_edges``): the edge into a return of an
exception is not recorded. These tests check the analysis on IR written the way
Numba and LLVM's cleanup leave it, gradients through functions that raise on
other inputs (every branch both ways, loops of 0, 1 and many iterations, a
callee returning ``None``), and the tape a step of a loop saves.
"""
import math
import sys

import numpy as np
import pytest
from numba import njit

import enzpy
from enzpy import Active, Const, Duplicated, Reverse, autodiff
from enzpy.analysis import ControlFlow
from enzpy.irtext import read_module_text

from helpers import check_reverse

CALLEE = 'define {attrs}i32 @callee(ptr %retptr, ptr %excinfo, double %x) {{\nentry:\n  ret i32 0\n}}\n'


def flow(body, attrs=""):
    """ControlFlow of ``@f`` (Numba's convention) calling ``@callee``."""
    text = CALLEE.format(attrs=attrs) + (
        "define i32 @f(ptr %retptr, ptr %excinfo, double %x) {\n" + body + "\n}\n")
    module = read_module_text(text)
    return ControlFlow(module.functions["f"], module.functions, failures_propagate=True)


def call_of(cfg):
    return next(i for b in cfg.fn.blocks for i in b.instructions if i.opcode == "call")


SWITCH = """entry:
  %st = call i32 @callee(ptr %retptr, ptr %excinfo, double %x)
  switch i32 %st, label %err [
    i32 0, label %ok
    i32 -2, label %ok
  ]
err:
  br label %common.ret
ok:
  %c = fcmp olt double %x, 0.0
  br i1 %c, label %raise, label %common.ret
raise:
  br label %common.ret
common.ret:
  %r = phi i32 [ %st, %err ], [ 1, %raise ], [ 0, %ok ]
  ret i32 %r"""


def test_switch_on_a_callee_status_and_constant_exceptions_fail():
    cfg = flow(SWITCH)
    assert cfg.failing_edges == {("err", "common.ret"), ("raise", "common.ret")}
    assert cfg.reverse_preds("common.ret") == ["ok"]
    assert cfg.returning_exits == ["common.ret"]
    assert cfg.doomed == {"err", "raise"}
    assert cfg.propagates_failure(call_of(cfg))


def test_a_function_whose_callers_may_not_propagate_keeps_every_exit():
    # (a parallel loop's body, whose wrapper ignores its status)
    module = read_module_text(CALLEE.format(attrs="") + (
        "define i32 @f(ptr %retptr, ptr %excinfo, double %x) {\n" + SWITCH + "\n}\n"))
    cfg = ControlFlow(module.functions["f"], module.functions)
    assert cfg.exceptions_returned == {("err", "common.ret"), ("raise", "common.ret")}
    assert cfg.failing_edges == set()
    assert cfg.reverse_preds("common.ret") == ["err", "ok", "raise"]
    assert cfg.propagates_failure(call_of(cfg))     # a property of f's own code


BRANCH = """entry:
  %st = call i32 @callee(ptr %retptr, ptr %excinfo, double %x)
  %c = icmp eq i32 %st, 0
  br i1 %c, label %ok, label %err
err:
  br label %common.ret
ok:
  br label %common.ret
common.ret:
  %r = phi i32 [ %st, %err ], [ 0, %ok ]
  ret i32 %r"""


@pytest.mark.parametrize("attrs, fails", [
    ("range(i32 0, 2) ", True),         # LLVM proved the callee never returns None (-2)
    ("range(i32 -1, 2) ", True),
    ("range(i32 -2, 2) ", False),       # -2 is a success: the branch does not prove failure
    ("", False),
])
def test_a_test_against_zero_fails_only_when_the_callee_never_returns_none(attrs, fails):
    cfg = flow(BRANCH, attrs)
    assert (("err", "common.ret") in cfg.failing_edges) == fails
    assert cfg.propagates_failure(call_of(cfg)) == fails
    assert cfg.reverse_preds("common.ret") == (["ok"] if fails else ["err", "ok"])


def test_a_status_used_otherwise_is_not_propagated():
    ignored = """entry:
  %st = call i32 @callee(ptr %retptr, ptr %excinfo, double %x)
  ret i32 0"""
    cfg = flow(ignored)
    assert cfg.failing_edges == set() and cfg.returning_exits == ["entry"]
    assert not cfg.propagates_failure(call_of(cfg))
    returned = """entry:
  %st = call i32 @callee(ptr %retptr, ptr %excinfo, double %x)
  ret i32 %st"""
    cfg = flow(returned)
    assert cfg.propagates_failure(call_of(cfg))
    # a failure going on to a return of success is not propagated
    recovered = SWITCH.replace("[ %st, %err ]", "[ 0, %err ]")
    cfg = flow(recovered)
    assert ("err", "common.ret") not in cfg.failing_edges
    assert not cfg.propagates_failure(call_of(cfg))


def test_separate_returns_of_exceptions_are_no_exits_of_the_reverse():
    body = """entry:
  %st = call i32 @callee(ptr %retptr, ptr %excinfo, double %x)
  switch i32 %st, label %err [
    i32 0, label %ok
    i32 -2, label %none
  ]
err:
  ret i32 %st
none:
  ret i32 -2
ok:
  ret i32 0"""
    cfg = flow(body)
    assert cfg.failing_edges == {(None, "err")}
    assert cfg.returning_exits == ["none", "ok"]


# -- gradients through functions that raise on other inputs ---------------------
@njit
def checked_step(s, y):
    """A step big enough to stay a call (a new array, as a scan's step makes)."""
    if y == 0.0:
        raise ZeroDivisionError("y")
    return s / y + np.sin(s)


@njit
def run_steps(x, n):
    s = x[:2].copy()
    for i in range(n):
        s = checked_step(s, x[2 + i % 2])
    return (s * s).sum()


def run_steps_gradient(x, n):
    states = [x[:2].copy()]
    for i in range(n):
        states.append(states[-1] / x[2 + i % 2] + np.sin(states[-1]))
    g = np.zeros(4)
    ds = 2.0 * states[n]
    for i in range(n - 1, -1, -1):
        y = x[2 + i % 2]
        g[2 + i % 2] += -(ds * states[i]).sum() / (y * y)
        ds = ds * (1.0 / y + np.cos(states[i]))
    g[:2] = ds
    return g


X = np.array([0.3, -0.4, 1.7, -2.1])


@pytest.mark.parametrize("n", [0, 1, 2, 9])
def test_a_loop_of_calls_that_may_raise(n):
    dx = np.zeros(4)
    autodiff(Reverse, run_steps, Duplicated(X.copy(), dx), Const(n))
    np.testing.assert_allclose(dx, run_steps_gradient(X, n), rtol=1e-12, atol=1e-15)


def test_the_exception_still_raises():
    x = X.copy()
    x[3] = 0.0
    with pytest.raises(ZeroDivisionError):
        autodiff(Reverse, run_steps, Duplicated(x, np.zeros(4)), Const(3))
    # and the next call differentiates again
    dx = np.zeros(4)
    autodiff(Reverse, run_steps, Duplicated(X.copy(), dx), Const(3))
    np.testing.assert_allclose(dx, run_steps_gradient(X, 3), rtol=1e-12)


@njit
def three_ways(x, y):
    if x > 1.0:
        return x * y
    if x < -1.0:
        raise ValueError("too small")
    if y > 0.0:
        return math.exp(x) * y
    return x - y


@njit
def sum_of_three_ways(x, y, n):
    s = 0.0
    for i in range(n):
        s += three_ways(x + 0.5 * i, y)
    return s


@pytest.mark.parametrize("x, y", [(1.5, 2.0), (0.2, 3.0), (0.2, -3.0), (-0.45, -1.0)])
def test_several_returns_beside_a_raise(x, y):
    # each return taken (for -0.45, two of them in turn along the loop)
    check_reverse(sum_of_three_ways, [Active(x), Active(y), Const(4)])


@njit
def maybe_half(x):
    if x > 0.0:
        return 0.5 * x * x
    return None


@njit
def sum_of_maybe(x):
    s = 0.0
    for i in range(x.shape[0]):
        h = maybe_half(x[i])
        if h is not None:
            s += h * x[i]
    return s


def test_a_callee_returning_none_is_a_success():
    # Numba returns None from an Optional function with status -2: it is no failure
    x = np.array([0.5, -1.0, 2.0, -0.1, 3.0])
    dx = np.zeros_like(x)
    autodiff(Reverse, sum_of_maybe, Duplicated(x, dx))
    np.testing.assert_allclose(dx, np.where(x > 0, 1.5 * x * x, 0.0), rtol=1e-14)


def _tape_bytes(n):
    autodiff(Reverse, run_steps, Duplicated(X.copy(), np.zeros(4)), Const(n))
    report = enzpy.build_report(run_steps)[-1]
    report.peak_tape_bytes = 0
    autodiff(Reverse, run_steps, Duplicated(X.copy(), np.zeros(4)), Const(n))
    return report.peak_tape_bytes


def test_a_step_that_may_raise_records_no_exit():
    # the exit the step left by (one of its raises, or its return) is not recorded:
    # 80 bytes per step, 88 before
    growth = (_tape_bytes(1001) - _tape_bytes(1)) / 1000
    assert growth <= 80, growth


@njit
def raises_past(x, threshold):
    s = math.exp(x[0]) * x[1]          # (no loop, nothing allocated)
    if s > threshold:
        raise ValueError("past the threshold")
    return s * x[2]


@njit
def _checked_scale(v):
    return 2.0 * v


@njit
def _checked_scale_fwd(v):
    return 2.0 * v, v


@njit
def _checked_scale_bwd(v, g):
    if g > 100.0:
        raise ValueError("cotangent too large")
    return (2.0 * g,)


enzpy.defvjp(_checked_scale, _checked_scale_fwd, _checked_scale_bwd)


@njit
def scaled_past(x, scale):
    return _checked_scale(x[0]) * scale + x[1]


def test_a_raise_keeps_no_reference_to_the_arguments():
    """Found by review: every raising call kept one reference to each Duplicated array and
    its shadow (loop or not; the arrays hvp and gradient allocate too: 30 MB per call at
    n = 10^6), in the primal and in the reverse sweep (a rule's backward function)."""
    from enzpy import Forward
    x = np.array([0.5, 2.0, 3.0])
    dx, tx = np.zeros(3), np.ones(3)
    calls = [
        lambda: autodiff(Reverse, raises_past, Duplicated(x, dx), Const(0.0)),
        lambda: autodiff(Forward, raises_past, Duplicated(x, tx), Const(0.0)),
        lambda: enzpy.hvp(raises_past, x, tx, 0.0),
        lambda: enzpy.gradient(raises_past, x, 0.0),
        lambda: autodiff(Reverse, scaled_past, Duplicated(x, dx), Const(1000.0)),
        lambda: enzpy.vjp(scaled_past, x, Const(1000.0))[1](1.0),
    ]
    for call in calls:
        with pytest.raises(ValueError):
            call()               # (built, and the reference counts settle)
        before = sys.getrefcount(x), sys.getrefcount(dx), sys.getrefcount(tx)
        for _ in range(5):
            with pytest.raises(ValueError):
                call()
        assert (sys.getrefcount(x), sys.getrefcount(dx), sys.getrefcount(tx)) == before
    dx[:] = 0.0
    autodiff(Reverse, raises_past, Duplicated(x, dx), Const(1e9))
    s = math.exp(x[0]) * x[1]
    np.testing.assert_allclose(dx, [s * x[2], math.exp(x[0]) * x[2], s], rtol=1e-12)
