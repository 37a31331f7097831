"""Backend: optimize the derivative module, JIT it in Numba's engine, wrap it.

The derivative is optimized by enzpy's own pipeline (LLVM's O2 with loop
vectorization, no SLP vectorizer: it is where Enzyme's own builds blew up on
big functions) and compiled to machine code in Numba's JIT engine, so Numba's
runtime and math symbols resolve, and derivatives of later builds can call it
by name. The entry point is exposed as an ``@njit`` function (one Numba
dispatch per call from Python, callable from other ``@njit`` code) that calls
the machine code by address and propagates exceptions raised by the primal
with their type and message.
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


def prepare_module(text: str, entry: str, exported=(), big_primals=()):
    """Parse and verify ``text``; every function but ``entry`` and the
    ``exported`` derivatives becomes internal; ``big_primals`` are not inlined."""
    module = parse(text)
    for fn in module.functions:
        if fn.is_declaration:
            continue
        if fn.name in big_primals:
            fn.add_function_attribute("noinline")
        if fn.name == entry or fn.name in exported:
            fn.linkage = llvm.Linkage.external
            continue
        fn.linkage = llvm.Linkage.internal
        if not fn.name.startswith("enzpy."):
            # Numba resolves the pointers of mutually recursive calls by name
            # (RuntimeLinker), looking at every function a new library
            # defines, internal ones included: a copy keeping a Numba name
            # (and optimized here to another signature) could be picked.
            fn.name = "enzpy.copy." + fn.name
    return module


def optimize(module, codegen):
    pto = llvm.PipelineTuningOptions(speed_level=2)
    pto.loop_vectorization = True
    pto.slp_vectorization = False
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(codegen._tm, pto)
    pb.getModulePassManager().run(module, pb)


def compile_module(module, entry: str, codegen):
    """Machine code for ``module`` in Numba's engine; returns (library, entry address)."""
    library = codegen.create_library(f"enzpy.{entry}")
    # Already optimized by enzpy: Numba's own passes would only repeat the work.
    library._optimize_functions = lambda module: None
    library._optimize_final_module = lambda: None
    library.add_llvm_module(module)
    library.finalize()
    return library, library.get_pointer_to_function(entry)


def numba_entry(address: int, argtypes, adjoint_types, restype, tangent=False):
    """An ``@njit`` function ``f(*args) -> (adjoints..., primal, peak tape bytes)``
    calling the derivative's entry point at ``address``; with ``tangent``,
    ``(tangent, primal, 0)`` where the tangent has the primal's type."""
    fields = [(t, False) for t in adjoint_types] + [(restype, True)] * (1 + tangent)
    result = types.Tuple(tuple(t for t, _ in fields) + (types.int64,))

    def typer(typingctx, args):
        def codegen(context, builder, sig, llargs):
            flat = list(context.call_conv._get_arg_packer(sig.args).as_arguments(builder, llargs))

            def slot_type(ty, returned):
                if not returned:
                    return context.get_value_type(ty)
                if ty == types.none:
                    return llir.IntType(8)
                return context.data_model_manager[ty].get_return_type()

            out_ty = llir.LiteralStructType([slot_type(t, r) for t, r in fields]
                                            + [llir.IntType(64)])
            fnty = llir.FunctionType(llir.IntType(32),
                                     [llir.PointerType(out_ty),
                                      llir.PointerType(llir.PointerType(excinfo_t))]
                                     + [a.type for a in flat])
            # A dynamic address: Numba then refuses to cache code calling it
            # (the address is only valid in this process).
            fn = builder.bitcast(context.add_dynamic_addr(builder, address, "enzpy derivative"),
                                 llir.PointerType(fnty))
            out = cgutils.alloca_once(builder, out_ty)
            excinfo = cgutils.alloca_once(builder, llir.PointerType(excinfo_t))
            code = builder.call(fn, [out, excinfo] + flat)
            status = context.call_conv._get_return_status(builder, code, builder.load(excinfo))
            with cgutils.if_unlikely(builder, status.is_error):
                context.call_conv.return_status_propagate(builder, status)
            packed = builder.load(out)
            values = []
            for i, (ty, returned) in enumerate(fields):
                raw = builder.extract_value(packed, i)
                if not returned:
                    values.append(raw)
                elif ty == types.none:
                    values.append(context.get_dummy_value())
                else:
                    values.append(context.data_model_manager[ty].from_return(builder, raw))
            values.append(builder.extract_value(packed, len(fields)))
            return context.make_tuple(builder, result, values)
        return result(*args), codegen

    # Numba intrinsics need a fixed arity: write the two small wrappers out.
    names = ", ".join(f"a{i}" for i in range(len(argtypes)))
    namespace = {"typer": typer, "intrinsic": intrinsic}
    exec(f"def call_typer(typingctx{', ' if names else ''}{names}):\n"
         f"    return typer(typingctx, ({names}{',' if names else ''}))\n"
         f"call = intrinsic(call_typer)\n"
         f"def entry({names}):\n    return call({names})\n", namespace)
    return njit(result(*argtypes), cache=False)(namespace["entry"])
