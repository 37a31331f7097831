"""The text reader of the IR model agrees with llvmlite's binding on Numba's IR."""
import math

import numpy as np
import pytest
from numba import njit, typeof

from enzpy import frontend
from enzpy.ir import read_module
from enzpy.irtext import read_module_text, split_top, take_type


@njit
def scalar_mix(x, n):
    s = 0.0
    for i in range(n):
        s += math.sin(x * i) if i % 3 else -x / (i + 1.0)
    return s + max(x, 0.5) + x ** 3 + math.hypot(x, 2.0)


@njit
def array_mix(x, y):
    z = np.sin(x) * y + x ** 2
    w = x[1:4].copy()
    return z.sum() + np.dot(x, y) + w[0]


@njit
def tuple_mix(x):
    a, b = divmod(x, 0.7)
    return a * b


def cleaned(f, *args):
    f(*args)
    low = frontend.lower(f, tuple(typeof(a) for a in args))
    module, _ = frontend.link_module(low, frontend.collect_module(low))
    frontend.cleanup(module)
    return module


def same_value(a, b):
    return (a.ref, a.type, a.kind, a.name) == (b.ref, b.type, b.kind, b.name) or (
        a.kind == b.kind == "const" and a.type == b.type)


@pytest.mark.parametrize("f, args", [
    (scalar_mix, (0.4, 10)),
    (array_mix, (np.linspace(0, 1, 6), np.ones(6))),
    (tuple_mix, (2.5,)),
], ids=["scalar", "array", "tuple"])
def test_text_reader_matches_binding(f, args):
    module = cleaned(f, *args)
    by_binding = read_module(module)
    by_text = read_module_text(str(module))
    assert set(by_binding.functions) == set(by_text.functions)
    for name, fb in by_binding.functions.items():
        ft = by_text.functions[name]
        assert [(a.name, a.type) for a in fb.args] == [(a.name, a.type) for a in ft.args]
        assert fb.return_type == ft.return_type
        assert [b.name for b in fb.blocks] == [b.name for b in ft.blocks]
        for bb, bt in zip(fb.blocks, ft.blocks):
            assert len(bb.instructions) == len(bt.instructions), bb.name
            for ib, it in zip(bb.instructions, bt.instructions):
                where = f"{name}:{bb.name}: {ib.text}"
                assert (ib.name, ib.opcode, ib.type) == (it.name, it.opcode, it.type), where
                assert len(ib.operands) == len(it.operands), where
                assert all(same_value(a, b) for a, b in zip(ib.operands, it.operands)), where
                assert (ib.predicate, ib.indices, ib.callee) == \
                    (it.predicate, it.indices, it.callee), where
                assert ib.targets == it.targets and ib.cases == it.cases, where
                if ib.opcode in ("alloca", "getelementptr"):
                    assert ib.source_type == it.source_type, where
                assert [(v.ref, blk) for v, blk in ib.incoming] == \
                    [(v.ref, blk) for v, blk in it.incoming] or ib.opcode != "phi", where


def test_helpers():
    assert split_top("double %x, { i64, ptr } %y, [ %a, %b ]") == \
        ["double %x", "{ i64, ptr } %y", "[ %a, %b ]"]
    assert take_type("{ double, [2 x i64] } zeroinitializer") == \
        ("{ double, [2 x i64] }", "zeroinitializer")
    assert take_type("<4 x double> %v") == ("<4 x double>", "%v")
