"""Convenience helpers over ``autodiff``: ``gradient`` and ``check_gradient``."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .api import Active, Annotation, Const, Duplicated, Mode, Reverse, _dispatcher, autodiff


def gradient(*args):
    """``gradient([Reverse,] f, x, *consts)``: the derivative of scalar ``f`` w.r.t. ``x``.

    ``x`` is a float (the adjoint is returned) or a float array (a new array of
    the same shape is returned); further arguments are passed as ``Const``
    unless annotated.
    """
    if args and isinstance(args[0], Mode):
        if not args[0].reverse or args[0].with_primal:
            why = "returns the primal too" if args[0].with_primal else \
                "gives a directional derivative, a tangent"
            raise TypeError(f"gradient returns the derivative alone, in reverse mode: use "
                            f"Reverse, not {args[0].name} (autodiff({args[0].name}, ...) "
                            f"{why})")
        args = args[1:]
    elif args and isinstance(args[0], str):
        raise TypeError(f"gradient: the mode is enzpy.Reverse, not the string {args[0]!r}")
    if len(args) < 2:
        raise TypeError("gradient(f, x, *args) needs a function and a point")
    f, x, *rest = args
    if not (isinstance(x, (float, np.floating)) or
            (isinstance(x, np.ndarray) and x.dtype in (np.float32, np.float64))):
        raise TypeError(f"gradient: x must be a float or a float32/float64 array, got "
                        f"{type(x).__name__}" + (f" of {x.dtype}" if isinstance(x, np.ndarray)
                                                 else ""))
    for i, c in enumerate(rest):
        if type(c) is Active:
            raise TypeError(f"gradient: argument {i + 1} is Active, but gradient returns the "
                            f"derivative with respect to x alone; call autodiff(Reverse, ...) "
                            f"for the others")
    if isinstance(x, np.ndarray):
        dx = np.zeros_like(x)
        autodiff(Reverse, f, Duplicated(x, dx), *rest)
        return dx
    (dx, *_), = autodiff(Reverse, f, Active(x), *rest)
    return dx


@dataclass
class GradientCheck:
    """enzpy's derivatives against central finite differences."""
    worst_relative_error: float
    worst_argument: int = -1
    worst_index: tuple = ()
    enzpy: dict = field(default_factory=dict)               # argument -> derivative
    finite_differences: dict = field(default_factory=dict)  # argument -> estimate

    def __str__(self):
        where = f"argument {self.worst_argument}"
        if self.worst_index:
            where += f"[{', '.join(map(str, self.worst_index))}]"
        return f"worst relative error {self.worst_relative_error:.3g} at {where}"


def check_gradient(f, *args, step=None, floor=1e-8) -> GradientCheck:
    """Compare enzpy's derivatives of ``f`` at ``args`` with central differences.

    ``args`` are annotated as for ``autodiff``. The objective is ``f``'s float
    return value (0 if it returns none) plus, for every ``Duplicated`` array,
    the dot product of its shadow (the seed) with the array's content after
    the call; after the reverse sweep each shadow holds the derivative of the
    objective with respect to the array's content before the call. Inputs are
    never modified. The relative error of each entry is
    ``|enzpy - fd| / max(|enzpy|, |fd|, floor)``. The step is relative to
    each entry's size; by default 1e-6 for float64 and 5e-3 for float32
    (about the cube root of its precision: a smaller one measures rounding).
    """
    annotated = [a if isinstance(a, Annotation) else Const(a) for a in args]
    for i, a in enumerate(annotated):
        float_array = isinstance(a.val, np.ndarray) and a.val.dtype.kind == "f" and \
            isinstance(getattr(a, "dval", None), np.ndarray)
        if (isinstance(a, Active) and not isinstance(a.val, (float, np.floating))) or \
                (isinstance(a, Duplicated) and not float_array):
            raise TypeError(f"check_gradient: argument {i} is {type(a).__name__}("
                            f"{type(a.val).__name__}); it perturbs float scalars (Active) and "
                            f"float arrays with an array shadow (Duplicated) only: compare "
                            f"autodiff on containers with finite differences of your own")
    seeds = {i: a.dval.copy() for i, a in enumerate(annotated) if isinstance(a, Duplicated)}
    disp = _dispatcher(f, "check_gradient")

    def objective(values):
        work = [v.copy() if isinstance(v, np.ndarray) else v for v in values]
        result = disp(*work)
        total = float(result) if isinstance(result, (float, np.floating)) else 0.0
        for i, seed in seeds.items():
            total += float(np.sum(seed * work[i]))
        return total

    base = [a.val for a in annotated]
    work = [a.val.copy() if isinstance(a.val, np.ndarray) else a.val for a in annotated]
    shadows = {i: seed.copy() for i, seed in seeds.items()}
    call_args = [Duplicated(work[i], shadows[i]) if i in shadows else type(a)(work[i])
                 for i, a in enumerate(annotated)]
    (grads,) = autodiff(Reverse, f, *call_args)

    check = GradientCheck(0.0)
    for i, a in enumerate(annotated):
        if isinstance(a, Active):
            got = float(grads[i])
            fd = _central(objective, base, i, None, step)
            check.enzpy[i], check.finite_differences[i] = got, fd
            _record(check, i, (), got, fd, floor)
        elif isinstance(a, Duplicated):
            fd = np.zeros(a.val.shape)
            for idx in np.ndindex(*a.val.shape):
                fd[idx] = _central(objective, base, i, idx, step)
                _record(check, i, idx, shadows[i][idx], fd[idx], floor)
            check.enzpy[i], check.finite_differences[i] = shadows[i], fd
    return check


def _central(objective, base, i, idx, step):
    if step is None:
        dtype = np.asarray(base[i]).dtype
        step = 5e-3 if dtype == np.float32 else 1e-6
    values = []
    for sign in (1, -1):
        trial = [v.copy() if isinstance(v, np.ndarray) else v for v in base]
        if idx is None:
            h = step * max(1.0, abs(trial[i]))
            trial[i] = trial[i] + sign * h
        else:
            h = step * max(1.0, abs(trial[i][idx]))
            trial[i][idx] += sign * h
        values.append(objective(trial))
    return (values[0] - values[1]) / (2 * h)


def _record(check, arg, idx, got, fd, floor):
    error = abs(got - fd) / max(abs(got), abs(fd), floor)
    if error > check.worst_relative_error or check.worst_argument < 0:
        check.worst_relative_error = error
        check.worst_argument, check.worst_index = arg, tuple(idx)
