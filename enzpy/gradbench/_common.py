"""Input checks and output conversion shared by the eval modules.

Every eval module defines ``FUNCTIONS`` (the names the eval may ask for), ``prepare(function,
input)`` returning ``(call, to_json)`` (``call()`` runs the computation that is timed,
``to_json(result)`` turns its result into the protocol's output) and ``WARMUP``, a list of
``(function, input)`` pairs on tiny inputs of the same types, run at ``define`` so that Numba
compiles and enzpy builds every derivative before anything is timed.
"""
from __future__ import annotations

import math

import numpy as np


class InputError(ValueError):
    """A message whose input does not have the fields or shapes the eval defines."""


def field(inp, name):
    if not isinstance(inp, dict):
        raise InputError(f"input must be a JSON object, got {type(inp).__name__}")
    if name not in inp:
        raise InputError(f"input has no field '{name}'")
    return inp[name]


def integer(inp, name, minimum=None):
    v = field(inp, name)
    if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer())):
        raise InputError(f"'{name}' must be an integer, got {v!r}"[:200])
    v = int(v)
    if minimum is not None and v < minimum:
        raise InputError(f"'{name}' must be at least {minimum}, got {v}")
    return v


def number(inp, name):
    v = field(inp, name)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"'{name}' must be a number, got {v!r}"[:200])
    if not math.isfinite(v):
        raise InputError(f"'{name}' must be a finite number, got {v!r}")
    return float(v)


def array(inp, name, shape, dtype=np.float64):
    """``inp[name]`` as a C-contiguous array; ``shape`` holds ints (checked) or None (any)."""
    v = field(inp, name)
    try:
        a = np.array(v, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise InputError(f"'{name}' must be a {len(shape)}-d array of "
                         f"{np.dtype(dtype).name} (a ragged or non-numeric list?): {exc}") \
            from None
    if a.ndim != len(shape) and not (a.size == 0 and any(s == 0 for s in shape)):
        raise InputError(f"'{name}' must be a {len(shape)}-d array, got {a.ndim}-d with shape "
                         f"{a.shape}")
    if a.size == 0 and a.ndim != len(shape):
        a = a.reshape([0 if s is None else s for s in shape])
    for axis, (want, got) in enumerate(zip(shape, a.shape)):
        if want is not None and want != got:
            raise InputError(f"'{name}' must have shape "
                             f"{tuple('*' if s is None else s for s in shape)}, got {a.shape} "
                             f"(axis {axis})")
    if dtype == np.float64 and not np.all(np.isfinite(a)):
        raise InputError(f"'{name}' holds a non-finite number")
    return np.ascontiguousarray(a)


def tolist(a):
    return np.asarray(a).tolist()


def tofloat(x):
    return float(x)
