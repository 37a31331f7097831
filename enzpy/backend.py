"""Backend: optimize and JIT the derivative module through Numba's codegen.

The module joins the code library of a small ``@njit`` wrapper, so Numba's
runtime and math symbols resolve and Numba's optimizer (O3, vectorization)
runs on the derivative once, together with the wrapper. The entry point is then wrapped as an ``@njit`` function through an
intrinsic, so one call from Python is one Numba dispatch, exceptions raised in
the primal propagate with their type and message, and the derivative can be
called from other ``@njit`` code.
"""
from __future__ import annotations

import itertools

from llvmlite import binding as llvm
from llvmlite import ir as llir
from numba import njit, types
from numba.core import cgutils
from numba.core.callconv import excinfo_t
from numba.extending import intrinsic

from .ir import parse

_ids = itertools.count()


def prepare_module(text: str, entry: str, exported=()):
    """Parse and verify ``text``; every function but ``entry`` and the
    ``exported`` derivatives becomes internal."""
    module = parse(text)
    for fn in module.functions:
        if fn.is_declaration:
            continue
        if fn.name == entry or fn.name in exported:
            fn.linkage = llvm.Linkage.external
        else:
            fn.linkage = llvm.Linkage.internal
    return module


def numba_entry(module, entry: str, argtypes, adjoint_types, restype, linked=()):
    """Returns the dispatcher and the code library the derivative was compiled into."""
    """An ``@njit`` function ``f(*args) -> (adjoints..., primal, peak tape bytes)``."""
    primal_type = restype if restype != types.none else types.none
    result = types.Tuple(tuple(adjoint_types) + (primal_type, types.int64))

    def typer(typingctx, args):
        def codegen(context, builder, sig, llargs):
            # The derivative joins the wrapper's own library: it is optimized
            # (O3) and turned into machine code once, with the wrapper.
            context.active_code_library.add_llvm_module(module)
            for library in linked:
                context.active_code_library.add_linking_library(library)
            flat = list(context.call_conv._get_arg_packer(sig.args).as_arguments(builder, llargs))
            adj_ll = [context.get_value_type(t) for t in adjoint_types]
            if restype == types.none:
                ret_ll = llir.IntType(8)
            else:
                ret_ll = context.data_model_manager[restype].get_return_type()
            out_ty = llir.LiteralStructType(adj_ll + [ret_ll, llir.IntType(64)])
            fnty = llir.FunctionType(llir.IntType(32), [llir.PointerType(out_ty),
                                                        llir.PointerType(llir.PointerType(excinfo_t))]
                                     + [a.type for a in flat])
            fn = cgutils.get_or_insert_function(builder.module, fnty, entry)
            out = cgutils.alloca_once(builder, out_ty)
            excinfo = cgutils.alloca_once(builder, llir.PointerType(excinfo_t))
            code = builder.call(fn, [out, excinfo] + flat)
            status = context.call_conv._get_return_status(builder, code, builder.load(excinfo))
            with cgutils.if_unlikely(builder, status.is_error):
                context.call_conv.return_status_propagate(builder, status)
            packed = builder.load(out)
            values = [builder.extract_value(packed, i) for i in range(len(adj_ll))]
            raw = builder.extract_value(packed, len(adj_ll))
            if restype == types.none:
                values.append(context.get_dummy_value())
            else:
                values.append(context.data_model_manager[restype].from_return(builder, raw))
            values.append(builder.extract_value(packed, len(adj_ll) + 1))
            return context.make_tuple(builder, result, values)
        return result(*args), codegen

    # Numba intrinsics need a fixed arity: write the two small wrappers out.
    names = ", ".join(f"a{i}" for i in range(len(argtypes)))
    namespace = {"typer": typer, "intrinsic": intrinsic}
    exec(f"def call_typer(typingctx{', ' if names else ''}{names}):\n"
         f"    return typer(typingctx, ({names}{',' if names else ''}))\n"
         f"call = intrinsic(call_typer)\n"
         f"def entry({names}):\n    return call({names})\n", namespace)
    dispatcher = njit(result(*argtypes), cache=False)(namespace["entry"])
    (compiled,) = dispatcher.overloads.values()
    return dispatcher, compiled.library
