"""``autodiff`` called from inside ``@njit`` code (Reverse and Forward modes)."""
from __future__ import annotations

import math

import numba
import numpy as np
import pytest
from numba import njit
from numba.experimental import jitclass

import enzpy
from enzpy import (Active, Const, Duplicated, Forward, ForwardWithPrimal, Reverse,
                   ReverseWithPrimal, autodiff)


@njit
def residual(x, c):
    return math.exp(x) - c * x * x


@njit
def residual_slope(x, c):
    return math.exp(x) - 2.0 * c * x


@njit
def newton_reverse(x, c, steps):
    for _ in range(steps):
        (dx, dc), = autodiff(Reverse, residual, Active(x), Const(c))
        x = x - residual(x, c) / dx
    return x


@njit
def newton_forward(x, c, steps):
    for _ in range(steps):
        (t,) = autodiff(Forward, residual, Duplicated(x, 1.0), c)
        x = x - residual(x, c) / t
    return x


@njit
def newton_second_order(x, c, steps):
    """Minimise residual: Newton on its slope, the second derivative by forward mode."""
    for _ in range(steps):
        (g, _), = autodiff(Reverse, residual, Active(x), Const(c))
        (h,) = autodiff(Forward, residual_slope, Duplicated(x, 1.0), Const(c))
        x = x - g / h
    return x


@pytest.mark.parametrize("solver", [newton_reverse, newton_forward])
def test_newton_solver_without_python_in_the_loop(solver):
    root = solver(1.0, 2.0, 40)
    expected = 1.0
    for _ in range(40):           # the same iteration with the analytic derivative
        expected -= residual.py_func(expected, 2.0) / (math.exp(expected) - 4.0 * expected)
    assert abs(residual.py_func(root, 2.0)) < 1e-12
    assert root == pytest.approx(expected, rel=1e-14)


def test_second_derivative_from_forward_mode_inside_njit():
    c = 2.0
    x = newton_second_order(2.0, c, 50)
    assert abs(math.exp(x) - 2.0 * c * x) < 1e-10       # the slope vanishes there


@njit
def least_squares(w, X, y):
    s = 0.0
    for i in range(X.shape[0]):
        r = w[0] * X[i] + w[1] - y[i]
        s += r * r
    return s


@njit
def fit(w, X, y, steps, rate):
    g = np.zeros_like(w)
    for _ in range(steps):
        g[:] = 0.0
        autodiff(Reverse, least_squares, Duplicated(w, g), X, Const(y))
        w -= rate * g / X.shape[0]
    return w


def test_gradient_descent_with_duplicated_arrays():
    X = np.linspace(0.0, 1.0, 20)
    y = 3.0 * X - 0.5
    w = fit(np.zeros(2), X, y, 5000, 0.5)
    np.testing.assert_allclose(w, [3.0, -0.5], atol=1e-8)


def test_same_gradient_as_from_python():
    X = np.linspace(-1.0, 2.0, 7)
    y = np.sin(X)
    w = np.array([0.3, -0.2])

    @njit
    def grad_in_njit(w, X, y):
        g = np.zeros_like(w)
        autodiff(Reverse, least_squares, Duplicated(w, g), Const(X), Const(y))
        return g

    g = np.zeros(2)
    autodiff(Reverse, least_squares, Duplicated(w, g), Const(X), Const(y))
    np.testing.assert_array_equal(grad_in_njit(w, X, y), g)


@njit
def with_primals(x, a, da, v):
    (dx, _), y = autodiff(ReverseWithPrimal, weighted, Active(x), Duplicated(a, da))
    t, y2 = autodiff(ForwardWithPrimal, weighted, Duplicated(x, 1.0), Duplicated(a, v))
    return dx, y, t, y2


@njit
def weighted(x, a):
    s = 0.0
    for i in range(a.shape[0]):
        s += math.sin(x * a[i])
    return s


def test_with_primal_modes_and_result_shapes():
    a = np.array([0.5, -1.0, 2.0])
    da = np.zeros(3)
    v = np.array([0.1, 0.2, -0.3])
    x = 0.7
    dx, y, t, y2 = with_primals(x, a, da, v)
    assert y == pytest.approx(weighted.py_func(x, a)) and y2 == pytest.approx(y)
    assert dx == pytest.approx(np.sum(a * np.cos(x * a)))
    np.testing.assert_allclose(da, x * np.cos(x * a))
    assert t == pytest.approx(np.sum(a * np.cos(x * a)) + np.sum(x * v * np.cos(x * a)))


@njit
def depth(x, n):
    if n == 0:
        return x
    return math.sin(depth(x, n - 1)) + 0.5 * x


@njit
def recursive_gradient(x, n):
    (dx, _), = autodiff(Reverse, depth, Active(x), Const(n))
    return dx


@pytest.mark.parametrize("n", [0, 1, 12])
def test_recursive_function_inside_njit(n):
    h = 1e-6
    fd = (depth.py_func(0.4 + h, n) - depth.py_func(0.4 - h, n)) / (2 * h)
    assert recursive_gradient(0.4, n) == pytest.approx(fd, rel=1e-6, abs=1e-9)


def test_shadow_shape_mismatch_raises_inside_njit():
    @njit
    def bad(w, g):
        autodiff(Reverse, least_squares, Duplicated(w, g), Const(w), Const(w))
        return g

    with pytest.raises(ValueError, match="shape"):
        bad(np.zeros(2), np.zeros(3))


@njit
def _squares_into(out, a):
    s = 0.0
    for i in range(a.size):
        out[i] = a[i] * a[i]
        s += math.sin(a[i]) * out[i]
    return s


@njit
def _counts_into_held(t, a):
    out = t[0]
    s = 0.0
    for i in range(a.size):
        out[i] = i + 1.0
        s += math.sin(a[i]) * out[i]
    return s


@njit
def _squares_gradient(out, dout, x, dx):
    return autodiff(Reverse, _squares_into, Duplicated(out, dout), Duplicated(x, dx))


@njit
def _counts_gradient(buf, x, dx):
    return autodiff(Reverse, _counts_into_held, Const((buf,)), Duplicated(x, dx))


def test_written_argument_sharing_memory_raises_inside_njit():
    """The function writes one argument and its reverse re-reads another: the
    two must not overlap, as autodiff checks from Python (arrays inside a
    tuple too)."""
    x0 = np.array([0.3, 0.7, 1.1])
    x, dx = x0.copy(), np.zeros(3)
    _squares_gradient(np.zeros(3), np.zeros(3), x, dx)
    np.testing.assert_allclose(dx, 2 * x0 * np.sin(x0) + np.cos(x0) * x0 ** 2, rtol=1e-12)
    dx[:] = 0.0
    with pytest.raises(ValueError, match="share memory"):
        _squares_gradient(x, np.zeros(3), x, dx)
    with pytest.raises(ValueError, match="share memory"):
        _squares_gradient(x[::-1], np.zeros(3)[::-1], x, dx)
    assert not dx.any() and (x == x0).all()
    _counts_gradient(np.zeros(3), x, dx)
    np.testing.assert_allclose(dx, np.cos(x0) * np.arange(1, 4), rtol=1e-12)
    with pytest.raises(ValueError, match="share memory"):
        _counts_gradient(x, x, dx)


@njit
def _writes_both(x, a, b):
    a[0] = x * x
    b[1] = 1.0
    return b[0]


@njit
def _writes_both_gradient(x, a, da, b, db):
    return autodiff(Reverse, _writes_both, Active(x), Duplicated(a, da), Duplicated(b, db))


@njit
def _writes_both_tangent(x, a, da, b, db):
    return autodiff(Forward, _writes_both, Duplicated(x, 1.0), Duplicated(a, da),
                    Duplicated(b, db))


def test_two_written_arguments_sharing_memory_inside_njit():
    """As from Python: the same buffer written through two arguments needs one
    shadow, and forward mode checks aliasing too."""
    for derivative in (_writes_both_gradient, _writes_both_tangent):
        buf, d = np.zeros(2), np.zeros(2)
        out = derivative(3.0, buf, d, buf, d)
        assert (out[0][0] if derivative is _writes_both_gradient else out[0]) == 6.0
        buf = np.zeros(2)
        with pytest.raises(ValueError, match="arguments 1 and 2: the arrays and their"):
            derivative(3.0, buf, np.zeros(2), buf, np.zeros(2))


def test_shadows_that_mix_raise_inside_njit():
    """As from Python: a shadow sharing memory with its array, or two shadows sharing
    memory unlike their arrays, raise ValueError before anything is written; the same
    array twice with its shadow twice is fine."""
    out, x, d = np.zeros(3), np.array([0.3, 0.7, 1.1]), np.zeros(3)
    with pytest.raises(ValueError, match="arguments 0 and 1: the arrays and their shadows do not share memory alike"):
        _squares_gradient(out, d, x, d)
    with pytest.raises(ValueError, match="argument 1: the shadow shares memory with its array"):
        _squares_gradient(out, np.zeros(3), x, x)
    # (a shadow that is another argument's array: its value read after derivatives went in)
    with pytest.raises(ValueError, match="argument 0: its shadow shares memory with the array "
                                         "of argument 1"):
        _squares_gradient(out, x, x, np.zeros(3))
    assert not d.any() and (x == [0.3, 0.7, 1.1]).all()
    dz = np.zeros(3)
    _read_twice_gradient(x, dz, x, dz)
    np.testing.assert_allclose(dz, 2 * x + 3.0, rtol=1e-12)


@njit
def _read_twice(a, b):
    return (a * a).sum() + 3.0 * b.sum()


@njit
def _read_twice_gradient(a, da, b, db):
    return autodiff(Reverse, _read_twice, Duplicated(a, da), Duplicated(b, db))


def test_active_on_array_is_refused_when_compiling():
    @njit
    def bad(w):
        return autodiff(Reverse, least_squares, Active(w), Const(w), Const(w))

    with pytest.raises(Exception, match="Active expects a float scalar"):
        bad(np.zeros(2))


def test_active_in_forward_mode_is_refused_when_compiling():
    @njit
    def bad(x):
        return autodiff(Forward, residual, Active(x), Const(1.0))

    with pytest.raises(Exception, match="Duplicated"):
        bad(1.0)


def test_an_integer_tangent_is_refused_inside_njit_as_from_python():
    @njit
    def bad(x):
        return autodiff(Forward, residual, Duplicated(x, 1), Const(1.0))

    for call in (lambda: bad(2.0),
                 lambda: autodiff(Forward, residual, Duplicated(2.0, 1), Const(1.0))):
        with pytest.raises(Exception, match="tangent of a float scalar must be a float"):
            call()


@njit
def shifted_exp(x):
    return math.exp(x) - 3.0


@njit
def newton_on(g, x):
    for _ in range(30):
        (d,), = autodiff(Reverse, g, Active(x))
        x -= g(x) / d
    return x


def test_function_passed_as_an_argument():
    assert newton_on(shifted_exp, 1.0) == pytest.approx(math.log(3.0), rel=1e-15)


def test_callers_compiled_after_recompile_get_the_new_derivative():
    """A caller compiled after ``f.recompile()`` (a changed global) got the
    derivative Numba had typed into ``autodiff`` for an earlier caller: 2.0, not 5.0."""
    namespace = {"njit": njit, "autodiff": autodiff, "Reverse": Reverse, "Forward": Forward,
                 "Active": Active, "Duplicated": Duplicated, "A": 2.0}
    make_callers = ("@njit\ndef reverse(x):\n    (d,), = autodiff(Reverse, f, Active(x))\n"
                    "    return d\n"
                    "@njit\ndef forward(x):\n    return autodiff(Forward, f, Duplicated(x, 1.0))[0]\n")
    exec("@njit\ndef f(x):\n    return A * x * x\n" + make_callers, namespace)
    assert (namespace["reverse"](0.5), namespace["forward"](0.5)) == (2.0, 2.0)
    namespace["A"] = 5.0
    namespace["f"].recompile()
    exec(make_callers, namespace)
    assert (namespace["reverse"](0.5), namespace["forward"](0.5)) == (5.0, 5.0)
    assert namespace["f"](0.5) == 1.25


@njit
def _slope_squared(x, c):
    (dx, _), = autodiff(Reverse, residual, Active(x), Const(c))
    return dx * dx


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_differentiating_code_that_calls_autodiff_is_refused_by_name(mode):
    """Nested AD: the refusal names the autodiff call and its line, not enzpy's
    internal entry function."""
    x = Active(0.5) if mode is Reverse else Duplicated(0.5, 1.0)
    with pytest.raises(enzpy.UnsupportedError,
                       match=r"enzpy.autodiff at test_jitted.py:\d+: code calling enzpy.autodiff"
                             r" inside @njit cannot itself be differentiated") as info:
        autodiff(mode, _slope_squared, x, Const(2.0))
    line = int(str(info.value).split("test_jitted.py:")[1].split(":")[0])
    assert "autodiff(Reverse, residual" in _source_line(line)
    assert "'entry'" not in str(info.value)


@njit
def _log_density(q):
    return -0.5 * np.sum(q * q * q)


@njit
def _gradient_of_log_density(q):
    g = np.zeros_like(q)
    autodiff(Reverse, _log_density, Duplicated(q, g))
    return g


@njit
def _leapfrog_like(q):
    return np.sum(q + 0.1 * _gradient_of_log_density(q))


def test_nested_autodiff_of_an_array_is_refused_by_name_too():
    # (a Duplicated array handed to the inner autodiff said "call to 'an indirect
    # function' with differentiable memory in function 'entry'")
    with pytest.raises(enzpy.UnsupportedError,
                       match=r"enzpy.autodiff at test_jitted.py:\d+: code calling enzpy.autodiff"
                             r" inside @njit cannot itself be differentiated"):
        enzpy.gradient(_leapfrog_like, np.array([0.3, -0.2, 0.5]))


def _source_line(number):
    with open(__file__) as fh:
        return fh.read().splitlines()[number - 1]


@njit
def _pair_product(t):
    return t[0].sum() * t[1].sum()


@njit
def _pair_gradient(t, dt):
    return autodiff(Reverse, _pair_product, Duplicated(t, dt))


def test_container_shadow_inside_njit_is_a_clear_type_error():
    """Containers are differentiated from Python; inside @njit a TypeError says so."""
    t = (np.ones(3), np.ones(2))
    with pytest.raises(TypeError, match=r"inside @njit code, Duplicated takes a float array.*"
                                        r"containers \(tuples, lists, jitclass objects\)"):
        _pair_gradient(t, (np.zeros(3), np.zeros(2)))
    dt = (np.zeros(3), np.zeros(2))
    autodiff(Reverse, _pair_product, Duplicated(t, dt))
    np.testing.assert_allclose(dt[0], 2.0)
    np.testing.assert_allclose(dt[1], 3.0)


@njit
def scaled_sine(x, k=2.0, power=1):
    return k * math.sin(x) ** power


@njit
def product_of(x, *ys):
    s = x
    for y in ys:
        s = s * y
    return s


def test_omitted_defaults_inside_njit():
    # before: Numba's bare "Signature mismatch: 1 argument types given" from inside @njit
    @njit
    def derivatives(x):
        (t,) = autodiff(Forward, scaled_sine, Duplicated(x, 1.0))
        (d,), = autodiff(Reverse, scaled_sine, Active(x))
        (d3, dk), = autodiff(Reverse, scaled_sine, Active(x), Active(3.0))
        return t, d, d3, dk

    t, d, d3, dk = derivatives(0.5)
    assert t == pytest.approx(2.0 * math.cos(0.5)) and d == pytest.approx(2.0 * math.cos(0.5))
    assert d3 == pytest.approx(3.0 * math.cos(0.5)) and dk == pytest.approx(math.sin(0.5))
    assert (d,) == autodiff(Reverse, scaled_sine, Active(0.5))[0]


def test_star_args_and_missing_arguments_inside_njit_are_named():
    @njit
    def star(x):
        return autodiff(Reverse, product_of, Active(x), Active(2.0))

    @njit
    def missing(x):
        return autodiff(Reverse, least_squares, Active(x))

    with pytest.raises(Exception, match=r"product_of takes \*args, which only autodiff called "
                                        r"from Python packs"):
        star(1.5)
    with pytest.raises(Exception, match="least_squares: missing the argument"):
        missing(1.5)


@njit
def _squares_a_slice_into(x, part, out):
    out[0] = (x[part] ** 2).sum()


@njit
def _through_a_slice(x, part):
    dx, out = np.zeros_like(x), np.zeros(1)
    autodiff(Reverse, _squares_a_slice_into, Duplicated(x, dx), Const(part),
             Duplicated(out, np.ones(1)))
    return dx


_link = numba.deferred_type()


@jitclass([("v", numba.float64), ("next", numba.optional(_link))])
class _Link:
    def __init__(self, v):
        self.v = v
        self.next = None


_link.define(_Link.class_type.instance_type)


@njit
def _scaled_by_the_head_into(x, head, out):
    out[0] = x[0] * head.v


@njit
def _through_a_linked_object(x, head):
    dx, out = np.zeros_like(x), np.zeros(1)
    autodiff(Reverse, _scaled_by_the_head_into, Duplicated(x, dx), Const(head),
             Duplicated(out, np.ones(1)))
    return dx


def test_const_arguments_holding_no_array_beside_a_written_one_inside_njit():
    # (a slice, or a linked jitclass of floats, was refused as a container enzpy could not
    # walk for arrays sharing the written one's memory)
    np.testing.assert_allclose(_through_a_slice(np.arange(1.0, 5.0), slice(1, 3)),
                               [0.0, 4.0, 6.0, 0.0])
    np.testing.assert_allclose(_through_a_linked_object(np.ones(2), _Link(3.0)), [3.0, 0.0])


@njit
def _sum_of_squares(x):
    return np.sum(x * x)


@njit
def _gradient_inside(x):
    dx = np.zeros_like(x)
    autodiff(Reverse, _sum_of_squares, Duplicated(x, dx))
    return dx


@pytest.mark.parametrize("x", [np.zeros(0), np.arange(3.0)[None, :], np.arange(5.0)[::5],
                               np.zeros((2, 0, 3))],
                         ids=["empty", "row", "one_of_a_stride", "empty_3d"])
def test_shadow_strides_need_to_fit_only_along_axes_longer_than_one(x):
    """NumPy and Numba give an empty array, or an axis of length 1, other strides
    (np.zeros(0).strides == (0,), Numba's zeros_like: (8,)): ``zeros_like`` of
    such an array inside @njit was refused as a shadow of another layout,
    though nothing is read there."""
    np.testing.assert_array_equal(_gradient_inside(x), 2 * x)
    with pytest.raises(ValueError, match="strides"):     # (a real difference: refused)
        _gradient_inside(np.arange(6.0).reshape(3, 2)[:, :1])
