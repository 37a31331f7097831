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
import re

from llvmlite import binding as llvm
from llvmlite import ir as llir
from numba import njit, types
from numba.core import cgutils
from numba.core import config as numba_config
from numba.core.codegen import _parse_refprune_flags
from numba.core.callconv import excinfo_t
from numba.core.compiler import CompileResult
from numba.core.registry import cpu_target
from numba.extending import intrinsic
from numba.np.arrayobj import _empty_nd_impl

from .blas import OVERLAP_MESSAGE, PRODUCT_OVERLAPS
from .errors import UnsupportedError
from .ir import parse
from .irtext import definitions

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
    pm = pb.getModulePassManager()
    if numba_config.LLVM_REFPRUNE_PASS:
        # enzpy's copies of Numba functions come from IR taken before Numba's own
        # pipeline, which ends by pruning redundant reference counts (atomic
        # operations): without it a derivative does every one the primal skips.
        pm.add_refprune_pass(_parse_refprune_flags())
    pm.run(module, pb)


# Instructions in one block past which a function gets LLVM's fast code generation
# (``optnone``). Register allocation grows about quadratically with the values live
# at once: the reverse of a tangent of long straight-line code keeps thousands in one
# block (an hvp through 80 scalars spent 20 s there, 3 s with this; the derivative
# ran as fast). Loops, whose bodies are short blocks, keep the full code generation.
FAST_CODEGEN_INSTRUCTIONS = 3000
_LABEL = re.compile(r"^[^\s;].*:", re.M)


def fast_codegen_for_huge_blocks(module) -> list:
    """Mark ``optnone`` (and ``noinline``, which it requires) the functions of the
    optimized ``module`` with a block longer than ``FAST_CODEGEN_INSTRUCTIONS``;
    returns their names."""
    huge = [name for name, body in definitions(str(module)).items()
            if body.startswith("define") and max(
                block.count("\n  ") for block in _LABEL.split(body)) > FAST_CODEGEN_INSTRUCTIONS]
    for name in huge:
        fn = module.get_function(name)
        for attribute in ("noinline", "optnone"):
            fn.add_function_attribute(attribute)
    return huge


def compile_module(module, entry: str, codegen, keep_object=False):
    """Machine code for ``module`` in Numba's engine; returns (library, entry
    address). ``keep_object``: keep the object code, for the persistent cache."""
    library = codegen.create_library(f"enzpy.{entry}")
    if keep_object:
        library.enable_object_caching()
    # Already optimized by enzpy: Numba's own passes would only repeat the work.
    library._optimize_functions = lambda module: None
    library._optimize_final_module = lambda: None
    library.add_llvm_module(module)
    library.finalize()
    return library, library.get_pointer_to_function(entry)


_environments: list = []       # kept alive: machine code refers to them by address


def define_environment(codegen, name: str, env):
    """Point the global ``name`` of Numba's engine at the Numba environment
    ``env`` (defining the global first where no library has), as Numba does
    for a function it compiles: code raising an exception with runtime values
    reads it, and raises "missing Environment" where it is null."""
    if not codegen._engine.is_symbol_defined(name):
        library = codegen.create_library(f"environment {name}")
        library.add_llvm_module(llvm.parse_assembly(f'@"{name}" = global ptr null\n'))
        library.finalize()
        _environments.append(library)
    codegen.set_env(name, env)
    _environments.append(env)


def _product_overlaps(module):
    """The process's count of products written over an operand (``blas``), in ``module``."""
    counter = module.globals.get(PRODUCT_OVERLAPS)
    if counter is None:
        counter = llir.GlobalVariable(module, llir.IntType(64), PRODUCT_OVERLAPS)
        counter.linkage = "external"
    return counter


def numba_entry(target, argtypes, adjoint_types, restype, tangent=False, name="entry"):
    """An ``@njit`` function ``name(*args) -> (adjoints..., primal, peak tape
    bytes)`` calling the derivative's entry point ``target``: its address, or
    its symbol (machine code that can be saved and loaded in another process,
    once the entry point is loaded); with ``tangent``, ``(tangent, primal, 0)``
    where the tangent has the primal's type. A result that may be None
    (``Optional``) raises ``ValueError`` when it is None (it has no tangent)."""
    optional = isinstance(restype, types.Optional)
    if optional:
        restype = restype.type
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
            if isinstance(target, str):
                fn = cgutils.get_or_insert_function(builder.module, fnty, target)
            else:
                # A dynamic address: Numba then refuses to cache code calling
                # it (the address is only valid in this process).
                fn = builder.bitcast(context.add_dynamic_addr(builder, target,
                                                              "enzpy derivative"),
                                     llir.PointerType(fnty))
            out = cgutils.alloca_once(builder, out_ty)
            # (a tangent the derivative does not write stays zero: see _zeros_for_null)
            builder.store(llir.Constant(out_ty, None), out)
            excinfo = cgutils.alloca_once(builder, llir.PointerType(excinfo_t))
            overlaps = _product_overlaps(builder.module)
            overlaps_before = builder.load_atomic(overlaps, "monotonic", 8)
            code = builder.call(fn, [out, excinfo] + flat)
            status = context.call_conv._get_return_status(builder, code, builder.load(excinfo))
            overlapped = builder.icmp_unsigned(
                "!=", overlaps_before, builder.load_atomic(overlaps, "monotonic", 8))

            def release_arguments():
                # Numba took a reference to each argument when the wrapper's body
                # read it, which it drops after this call returns: returning early
                # with an exception, this code drops them (each a leaked array and
                # shadow per raise otherwise)
                if context.enable_nrt:
                    for ty, value in zip(sig.args, llargs):
                        context.nrt.decref(builder, ty, value)
            with cgutils.if_unlikely(builder, status.is_error):
                release_arguments()
                context.call_conv.return_status_propagate(builder, status)
            # (the entry point skipped the reverse sweep; a call on another thread
            # that overlapped at the same time is refused here too)
            with cgutils.if_unlikely(builder, overlapped):
                release_arguments()
                context.call_conv.return_user_exc(builder, UnsupportedError, (OVERLAP_MESSAGE,))
            if optional:
                with cgutils.if_unlikely(builder, status.is_none):
                    release_arguments()
                    context.call_conv.return_user_exc(
                        builder, ValueError, ("the function returned None, which has no "
                                              "derivative",))
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
            if tangent:
                values[-2] = _zeros_for_null(context, builder, restype, values[-2], values[-1])
            values.append(builder.extract_value(packed, len(fields)))
            return context.make_tuple(builder, result, values)
        return result(*args), codegen

    # Numba intrinsics need a fixed arity: write the two small wrappers out.
    namespace = _entry_source(name, len(argtypes))
    namespace.update(typer=typer, intrinsic=intrinsic)
    exec(namespace.pop("source"), namespace)
    return njit(result(*argtypes), cache=False)(namespace[name])


def _zeros_for_null(context, builder, ty, tangent, primal):
    """``tangent`` with each array in it that has no memory replaced by zeros
    shaped like ``primal``'s: the tangent of a result that does not depend on
    the differentiated inputs (a Const argument returned, a global array) is
    the zero derivative, which has no memory inside derivatives."""
    if isinstance(ty, types.BaseTuple):
        for i, item in enumerate(ty):
            zeroed = _zeros_for_null(context, builder, item, builder.extract_value(tangent, i),
                                     builder.extract_value(primal, i))
            tangent = builder.insert_value(tangent, zeroed, i)
        return tangent
    if not isinstance(ty, types.Array):
        return tangent
    slot = cgutils.alloca_once_value(builder, tangent)
    memory = context.make_array(ty)(context, builder, value=tangent).data
    with builder.if_then(cgutils.is_null(builder, memory), likely=False):
        shape = cgutils.unpack_tuple(builder, context.make_array(ty)(context, builder,
                                                                     value=primal).shape)
        zeros = _empty_nd_impl(context, builder, ty.copy(layout="C"), shape)
        cgutils.memset(builder, zeros.data, builder.mul(zeros.itemsize, zeros.nitems), 0)
        builder.store(zeros._getvalue(), slot)
    return builder.load(slot)


def _entry_source(name, n) -> dict:
    names = ", ".join(f"a{i}" for i in range(n))
    # a module name: Numba can then save the compiled function (its environment
    # refers to the module by name)
    return {"__name__": __name__, "source": (
        f"def call_typer(typingctx{', ' if names else ''}{names}):\n"
        f"    return typer(typingctx, ({names}{',' if names else ''}))\n"
        f"call = intrinsic(call_typer)\n"
        f"def {name}({names}):\n    return call({names})\n")}


_PLAIN = (types.Number, types.Boolean, types.NoneType)


def _plain(ty) -> bool:
    if isinstance(ty, types.BaseTuple):
        return all(_plain(t) for t in ty)
    if isinstance(ty, types.Array):
        return isinstance(ty.dtype, _PLAIN)
    return isinstance(ty, _PLAIN)


def saved_entry(call):
    """The compiled ``numba_entry`` (called by symbol) as picklable state, or
    None when its signature holds types that do not survive pickling
    (functions, classes)."""
    (sig, cres), = call.overloads.items()
    if not all(_plain(t) for t in sig) or not _plain(cres.signature.return_type):
        return None
    return cres._reduce()


def loaded_entry(state, name):
    """The ``numba_entry`` saved by ``saved_entry``, without compiling."""
    cres = CompileResult._rebuild(cpu_target.target_context, *state)
    namespace = _entry_source(name, len(cres.signature.args))
    namespace.update(typer=None, intrinsic=lambda fn: fn)
    exec(namespace.pop("source"), namespace)
    call = njit(cache=False)(namespace[name])
    call.add_overload(cres)
    call.disable_compile()
    return call
