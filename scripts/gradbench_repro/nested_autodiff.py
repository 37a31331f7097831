"""Nested AD: an outer autodiff (either mode) of an @njit function that itself calls autodiff
(either mode) is refused: "a value that depends on the differentiated inputs flows into an
indirect call ... in function 'entry'" (the inner derivative is called by address). The
particle and saddle evals need all four combinations (rr, ff, fr, rf). Expected: 6.0 each.
Run: python scripts/gradbench_repro/nested_autodiff.py"""
from numba import njit

from enzpy import Active, Const, Duplicated, Forward, Reverse, autodiff


@njit
def f(x, w):
    return w * x * x


@njit
def inner_reverse(w):           # d f / d x at x = 3 = 6 w
    (dx, _), = autodiff(Reverse, f, Active(3.0), Const(w))
    return dx


@njit
def inner_forward(w):
    (t,) = autodiff(Forward, f, Duplicated(3.0, 1.0), Const(w))
    return t


for inner in (inner_reverse, inner_forward):
    for outer in ("Reverse", "Forward"):
        try:
            if outer == "Reverse":
                (d,), = autodiff(Reverse, inner, Active(2.0))
            else:
                (d,) = autodiff(Forward, inner, Duplicated(2.0, 1.0))
            print(f"outer {outer} over {inner.__name__}: {d} (expected 6.0)")
        except Exception as exc:                                        # noqa: BLE001
            print(f"outer {outer} over {inner.__name__}: {type(exc).__name__}: {exc}")
