"""Numba's reference counting of borrowed arrays, left out of derivatives.

Which increfs and decrefs ``enzpy.refcounts`` may drop is tested on small IR
(every way a parameter can escape or be released keeps them); then programs
written the way users pass arrays around (a tuple of arrays down a recursion,
helpers returning their argument, lists and jitclass objects holding it, an
exception raised half-way) are checked against central differences in both
modes, with no allocation leaked and the caller's arrays' reference counts
unchanged over many calls.
"""
import sys

import numpy as np
import pytest
from numba import float64, njit
from numba.core.runtime import _nrt_python, rtsys
from numba.experimental import jitclass

import enzpy
from enzpy import Const, Duplicated, Forward, Reverse, autodiff, check_gradient
from enzpy.irtext import read_module_text
from enzpy.refcounts import drop_borrowed_refcounts


# -- which reference counts go, on IR ----------------------------------------------------
_DECLARATIONS = """declare void @NRT_incref(ptr)
declare void @NRT_decref(ptr)
declare void @external(ptr)

define i32 @callee(ptr %arg.a.0) {
entry:
  ret i32 0
}
"""


def _dropped(body, params="ptr %arg.x.0, i1 %c"):
    """The refcount calls left in ``f`` after dropping, and how many went."""
    model = read_module_text(_DECLARATIONS + f"\ndefine i32 @f({params}) {{\n{body}\n}}\n")
    count = drop_borrowed_refcounts(model)
    left = [ins.text for b in model.functions["f"].blocks for ins in b.instructions
            if ins.opcode == "call" and ins.callee.startswith("NRT_")]
    text_left = [line.strip() for line in model.text.splitlines() if "@NRT_" in line
                 and "declare" not in line]
    assert text_left == left          # the module text follows the model
    return count, left


def test_balanced_pairs_and_a_phi_of_the_parameter_or_null_go():
    count, left = _dropped("""entry:
  call void @NRT_incref(ptr %arg.x.0)
  call void @NRT_incref(ptr %arg.x.0)
  %r = call i32 @callee(ptr %arg.x.0)
  br i1 %c, label %a, label %b
a:
  call void @NRT_decref(ptr %arg.x.0)
  br label %m
b:
  br label %m
m:
  %p = phi ptr [ null, %a ], [ %arg.x.0, %b ]
  call void @NRT_decref(ptr %p)
  call void @NRT_decref(ptr %arg.x.0)
  ret i32 0""")
    assert (count, left) == (5, [])


def test_a_reference_leaked_on_an_exception_path_goes_too():
    count, left = _dropped("""entry:
  call void @NRT_incref(ptr %arg.x.0)
  br i1 %c, label %raise, label %done
raise:
  ret i32 1
done:
  call void @NRT_decref(ptr %arg.x.0)
  ret i32 0""")
    assert (count, left) == (2, [])


@pytest.mark.parametrize("body", [
    # a decref before the function's own incref: it releases someone else's reference
    """entry:
  call void @NRT_decref(ptr %arg.x.0)
  call void @NRT_incref(ptr %arg.x.0)
  ret i32 0""",
    # one decref per iteration of a loop, one incref before it
    """entry:
  call void @NRT_incref(ptr %arg.x.0)
  br label %loop
loop:
  call void @NRT_decref(ptr %arg.x.0)
  br i1 %c, label %loop, label %out
out:
  ret i32 0""",
    # a decref on one branch only after the increfs of the other
    """entry:
  br i1 %c, label %a, label %b
a:
  call void @NRT_incref(ptr %arg.x.0)
  br label %m
b:
  br label %m
m:
  call void @NRT_decref(ptr %arg.x.0)
  ret i32 0""",
])
def test_a_count_that_can_fall_below_zero_is_kept(body):
    count, left = _dropped(body)
    assert count == 0 and left


@pytest.mark.parametrize("escape", [
    "store ptr %arg.x.0, ptr %slot",                              # stored
    "call void @external(ptr %arg.x.0)",                          # handed to C
    "%agg = insertvalue { ptr } undef, ptr %arg.x.0, 0",          # returned or packed
    "%s = select i1 %c, ptr %arg.x.0, ptr %arg.y.0",              # merged with another
])
def test_a_parameter_that_can_escape_keeps_its_counts(escape):
    count, left = _dropped(f"""entry:
  %slot = alloca ptr
  call void @NRT_incref(ptr %arg.x.0)
  {escape}
  call void @NRT_decref(ptr %arg.x.0)
  ret i32 0""", params="ptr %arg.x.0, ptr %arg.y.0, i1 %c")
    assert (count, left) == (0, ["call void @NRT_incref(ptr %arg.x.0)",
                                 "call void @NRT_decref(ptr %arg.x.0)"])


def test_a_phi_with_two_parameters_keeps_both():
    count, left = _dropped("""entry:
  call void @NRT_incref(ptr %arg.x.0)
  call void @NRT_incref(ptr %arg.y.0)
  br i1 %c, label %a, label %b
a:
  br label %m
b:
  br label %m
m:
  %p = phi ptr [ %arg.x.0, %a ], [ %arg.y.0, %b ]
  call void @NRT_decref(ptr %p)
  call void @NRT_decref(ptr %arg.x.0)
  ret i32 0""", params="ptr %arg.x.0, ptr %arg.y.0, i1 %c")
    assert count == 0 and len(left) == 4


# -- programs ----------------------------------------------------------------------------
@njit
def _node(tree, i, x):
    kind, left, right, w = tree
    if kind[i] == 0:
        return w[i] * x[i % x.shape[0]]
    a = _node(tree, left[i], x)
    if kind[i] == 1:
        return np.sin(a) * w[i]
    return a * _node(tree, right[i], x) + w[i]


@njit
def tree_of_arrays(kind, left, right, w, x):
    return _node((kind, left, right, w), 0, x)


# depth 0 (a leaf), 1 (sin of a leaf) and many (a chain of products and sines)
TREES = {
    "leaf": ([0], [0], [0]),
    "one": ([1, 0], [1, 0], [0, 0]),
    "many": ([2, 1, 2, 0, 1, 0, 2, 0, 0], [1, 2, 3, 0, 5, 0, 7, 0, 0],
             [4, 0, 6, 0, 0, 0, 8, 0, 0]),
}


@njit
def _same(a):
    return a


@njit
def through_identity(x):
    y = _same(x)
    return np.sum(_same(y) * y)


@njit
def _pair(a, b):
    return [a, b]


@njit
def list_of_parameters(x, w):
    s = 0.0
    for arr in _pair(x, w):
        s += np.sum(arr * arr * w[0])
    return s


@jitclass([("arr", float64[:])])
class Holder:
    def __init__(self, a):
        self.arr = a

    def energy(self):
        return np.sum(np.cos(self.arr))


@njit
def _hold(a):
    return Holder(a)


@njit
def via_jitclass(x):
    h = _hold(x)
    return h.energy() + x[0] * h.arr[1]


@njit
def _checked(a, k):
    if k < 0:
        raise ValueError("k must not be negative")
    return a[k] * a[k]


@njit
def raising_half_way(x, k):
    return np.sum(x) * _checked(x, k)


X = np.array([0.3, -0.7, 1.1, 0.5])


def _tree_args(name):
    kind, left, right = (np.array(a, dtype=np.int64) for a in TREES[name])
    w = np.linspace(0.4, 1.2, len(kind))
    return [Const(kind), Const(left), Const(right)], w


PROGRAMS = {
    "tree_leaf": lambda: (tree_of_arrays, _tree_args("leaf")),
    "tree_one": lambda: (tree_of_arrays, _tree_args("one")),
    "tree_many": lambda: (tree_of_arrays, _tree_args("many")),
    "through_identity": lambda: (through_identity, None),
    "list_of_parameters": lambda: (list_of_parameters, ([], np.array([0.9, 1.3]))),
    "via_jitclass": lambda: (via_jitclass, None),
    "raising_half_way": lambda: (raising_half_way, None),
}


def _arguments(name):
    """(f, annotated arguments with fresh shadows, the float arrays among them)."""
    f, extra = PROGRAMS[name]()
    x = X.copy()
    arrays = [x]
    if extra is None:
        args = [Duplicated(x, np.zeros_like(x))]
    else:
        consts, w = extra
        arrays.append(w)
        args = consts + [Duplicated(w, np.zeros_like(w)), Duplicated(x, np.zeros_like(x))]
        if not consts:
            args = [args[1], args[0]]
    if f is raising_half_way:
        args.append(Const(2))
    return f, args, arrays


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_reverse_matches_central_differences(name):
    f, args, _ = _arguments(name)
    check = check_gradient(f, *args)
    assert check.worst_relative_error < 1e-6, (name, str(check))


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_forward_matches_central_differences(name):
    f, args, _ = _arguments(name)
    rng = np.random.default_rng(3)
    directions = [rng.standard_normal(a.val.shape) if isinstance(a, Duplicated) else None
                  for a in args]
    call = [Duplicated(a.val.copy(), d) if d is not None else a
            for a, d in zip(args, directions)]
    (tangent,) = autodiff(Forward, f, *call)
    h = 1e-6

    def at(sign):
        return f(*[a.val + sign * h * d if d is not None else a.val
                   for a, d in zip(args, directions)])
    assert tangent == pytest.approx((at(1) - at(-1)) / (2 * h), rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_no_leak_and_the_callers_references_are_untouched(name):
    f, args, arrays = _arguments(name)
    autodiff(Reverse, f, *args)
    autodiff(Forward, f, *args)
    counts = [sys.getrefcount(a) for a in arrays]
    _nrt_python.memsys_enable_stats()
    before = rtsys.get_allocation_stats()
    for _ in range(200):
        autodiff(Reverse, f, *args)
        autodiff(Forward, f, *args)
    after = rtsys.get_allocation_stats()
    assert after.mi_alloc - before.mi_alloc == after.mi_free - before.mi_free, name
    assert after.alloc - before.alloc == after.free - before.free, name
    assert [sys.getrefcount(a) for a in arrays] == counts, name


def test_the_recursive_evaluator_sheds_its_reference_counting(monkeypatch):
    monkeypatch.setenv("ENZPY_CACHE", "0")        # built here, not loaded
    fresh = njit(tree_of_arrays.py_func)
    _, args, _ = _arguments("tree_many")
    autodiff(Reverse, fresh, *args)
    assert enzpy.build_report(fresh)[-1].refcounts_dropped > 0


def _references_kept_by_raising(call, x):
    count = sys.getrefcount(x)
    for _ in range(20):
        with pytest.raises(ValueError, match="negative"):
            call()
    return sys.getrefcount(x) - count


def test_an_exception_half_way_leaves_the_arrays_alive():
    """Numba's own code keeps a reference to its arguments when it raises (its
    reference-count pruning leaks on raising paths): the derivative keeps no
    more, and frees nothing the caller still uses."""
    x, dx, y = X.copy(), np.zeros(4), X.copy()
    numba_kept = _references_kept_by_raising(lambda: raising_half_way(y, -1), y)
    kept = _references_kept_by_raising(
        lambda: autodiff(Reverse, raising_half_way, Duplicated(x, dx), Const(-1)), x)
    assert 0 <= kept <= numba_kept
    dx[:] = 0.0
    autodiff(Reverse, raising_half_way, Duplicated(x, dx), Const(1))
    assert dx == pytest.approx([x[1] ** 2, x[1] ** 2 + 2 * x[1] * np.sum(x), x[1] ** 2,
                                x[1] ** 2])
