"""The cache-hit path of ``autodiff`` as generated Python: one small function
per built derivative and call style, checking the arguments' kinds inline.

``autodiff`` finds a derivative by a key of the arguments' annotations and
Numba types, then checks the shadows, aliasing and the layout of each shadow.
For plain arguments (float scalars and arrays, annotated or not) all of that
becomes a handful of ``is`` and ``==`` tests written out per argument, so a
repeated call costs little more than Numba's own dispatch. The types of arrays
and shadows (dtype, dimensions, layout, a read-only shadow) are left to that
dispatch: the compiled entry has exactly one signature and compiles no other,
so an array of another type raises Numba's "No matching definition" before any
code runs. Anything the guards do not recognise (another type, a shadow that
does not fit, shared memory, a shadow laid out unlike its array) returns
``MISS`` and takes the general path, which raises the right error or handles
the case.
"""
from __future__ import annotations

import weakref

import numpy as np

from .arguments import conflicting_shadows, overlaps_itself, share_memory
from .errors import raise_exception_set_by

MISS = object()
# Fast paths kept per (dispatcher, mode): most recent first.
KEPT_PER_FUNCTION = 4


def _dead():
    return None


def _unmatched(error: TypeError) -> bool:
    """Numba's dispatch found no signature for the arguments (nothing ran)."""
    return str(error).startswith("No matching definition for argument type(s)")


_SCALAR_TYPES = (float, int, bool, np.float64, np.float32, np.int64, np.int32, np.bool_)


def generate(entry, mode, args, annotations, stats, float_tangents):
    """A function ``fast(args)`` returning ``autodiff``'s result for calls
    shaped like ``args`` (a tuple), or ``MISS``; None when ``args`` holds a kind
    the guards do not cover (containers, objects, tuples of floats)."""
    active, const, duplicated = annotations
    names = {"MISS": MISS, "ndarray": np.ndarray, "share": share_memory,
             "overlapping": overlaps_itself, "conflicting": conflicting_shadows,
             "unmatched": _unmatched, "raise_exception_set_by": raise_exception_set_by,
             "ref": weakref.ref,
             "call": entry.call, "report": entry.report, "stats": stats,
             "float_tangents": float_tangents,
             "Active": active, "Const": const, "Duplicated": duplicated}
    lines, values, shadows = [], [], []

    def bind(obj, hint):
        name = f"{hint}{len(names)}"
        names[name] = obj
        return name

    def checked_while_same(hint, objects, failures):
        """Lines running the tests ``failures`` (true when the call must miss)
        only when one of ``objects`` is another object than at the last call
        that passed them: an array's memory stays where it is while the array
        lives. (Weak references: the arrays are not kept alive; one tuple, read
        and replaced whole: threads never see half of it.)"""
        cell = bind([(_dead,) * len(objects)], hint)
        same = " or ".join(f"p[{k}]() is not {o}" for k, o in enumerate(objects))
        return [f"    p = {cell}[0]", f"    if {same}:"] + \
            [f"        if {test}: return MISS" for test in failures] + \
            [f"        {cell}[0] = ({''.join(f'ref({o}), ' for o in objects)})"]

    def guard_value(v, x):
        """Guards that ``v`` has the Numba type of the value ``x``."""
        if type(x) in _SCALAR_TYPES:
            lines.append(f"    if type({v}) is not {bind(type(x), 't')}: return MISS")
            return True
        if type(x) is np.ndarray and x.dtype.fields is None:
            # (its dimensions and layout: the entry's dispatch. The dtype object too:
            # Numba's dispatch once took a byte-swapped float64 for a native one.)
            lines.append(f"    if type({v}) is not ndarray or {v}.dtype is not "
                         f"{bind(x.dtype, 'dtype')}: return MISS")
            return True
        return False

    for i, a in enumerate(args):
        cls = type(a)
        v = f"v{i}"
        if cls in (active, const, duplicated):
            lines.append(f"    if type(a{i}) is not {cls.__name__}: return MISS")
            lines.append(f"    {v} = a{i}.val")
            x = a.val
        else:
            lines.append(f"    {v} = a{i}")
            x = a
        if not guard_value(v, x):
            return None
        values.append(v)
        if cls is duplicated:
            d, dx = f"d{i}", a.dval
            lines.append(f"    {d} = a{i}.dval")
            if type(x) is np.ndarray:
                # (its dtype and that it is writeable: the entry's dispatch)
                lines.append(f"    if type({d}) is not ndarray or {d}.dtype is not {v}.dtype "
                             f"or {d}.shape != {v}.shape or {d}.strides != {v}.strides: "
                             f"return MISS")
                lines += checked_while_same("apart", [v, d],
                                            [f"share({v}, {d}) or overlapping({v})"])
            elif type(dx) in _SCALAR_TYPES:
                lines.append(f"    if type({d}) is not {bind(type(dx), 't')}: return MISS")
            else:
                return None
            shadows.append(d)
    if entry.shadow_positions != [i for i, a in enumerate(args) if type(a) is duplicated]:
        return None
    arrays = [i for i, a in enumerate(args) if type(a) is duplicated and type(a.val) is np.ndarray]
    if len(arrays) > 1:
        # shadows apart, or sharing memory as their arrays do (written arrays: and
        # the other way round)
        pairs = ", ".join(f"({i}, v{i}, d{i})" for i in arrays)
        lines += checked_while_same("shadows_apart",
                                    [name for i in arrays for name in (f"v{i}", f"d{i}")],
                                    [f"conflicting([{pairs}], {set(entry.written_shadowed)!r})"])
    array_values = [i for i, a in enumerate(args)
                    if type(a.val if type(a) in (active, const, duplicated) else a) is np.ndarray]
    off_values = [(j, i) for i in arrays for j in array_values if j != i]
    if off_values:
        # no shadow is memory another argument's value also is
        lines += checked_while_same("off_values",
                                    [f"v{j}" for j in array_values] + [f"d{i}" for i in arrays],
                                    [f"share(v{j}, d{i})" for j, i in off_values])
    if entry.alias_checks:
        checked = sorted({i for pair in entry.alias_checks for i in pair})
        lines += checked_while_same("disjoint", [f"v{i}" for i in checked],
                                    [f"share(v{written}, v{reread})"
                                     for written, reread in entry.alias_checks])
    lines += ["    try:",
              f"        out = call({', '.join(values + shadows)})",
              "    except TypeError as error:",
              "        if unmatched(error): return MISS",
              "        raise",
              "    except SystemError as error:",
              "        raise_exception_set_by(error)"]
    lines.append("    stats.hits += 1")
    if mode.reverse:
        if list(entry.adjoint_counts) != [1] * len(entry.active_positions):
            return None
        lines.append("    if out[-1] > report.peak_tape_bytes: report.peak_tape_bytes = out[-1]")
        grads = ["None"] * len(args)
        for k, pos in enumerate(entry.active_positions):
            grads[pos] = f"out[{k}]"
        result = f"({''.join(g + ', ' for g in grads)})"
        k = len(entry.active_positions)
        lines.append(f"    return ({result}, out[{k}])" if mode.with_primal else
                     f"    return ({result},)")
    else:
        if entry.returns_tangent:
            lines.append("    tangent = out[0]")
            lines.append("    if type(tangent) is tuple: tangent = float_tangents(tangent)")
        else:
            lines.append("    tangent = None")
        lines.append("    return (tangent, out[-2])" if mode.with_primal else
                     "    return (tangent,)")
    unpack = f"    if len(a) != {len(args)}: return MISS\n" + \
        (f"    {''.join(f'a{i}, ' for i in range(len(args)))}= a\n" if args else "")
    source = "def fast(a):\n" + unpack + "\n".join(lines) + "\n"
    exec(compile(source, "<enzpy fast path>", "exec"), names)
    return names["fast"]
