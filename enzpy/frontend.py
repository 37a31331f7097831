"""Lowering: Numba compiles the function; enzpy captures its raw LLVM IR.

Numba hands every freshly lowered IR module to ``CodeLibrary.add_ir_module``
before its own optimizer runs; a hook installed when enzpy is imported records
that text per defined symbol. A function compiled before the hook existed (or
loaded from Numba's on-disk cache) is compiled once more through the same
lowering, with Numba's cache of internal helpers set aside so that helpers such
as ``int_power`` are lowered again too. The captured modules of a function and
of every Numba function it calls are linked into one module and cleaned up with
a light pipeline (SROA, instcombine, CFG simplification, GVN; never unrolling or
vectorizing), so enzpy differentiates small, clean IR.
"""
from __future__ import annotations

import re
import threading

from llvmlite import binding as llvm
from numba.core import codegen, compiler, types
from numba.core import cgutils

from .errors import UnsupportedError

_lock = threading.RLock()
_raw_ir: dict = {}            # mangled symbol -> IR text of the module defining it
_WRAPPER_PREFIXES = ("cpython.", "cfunc.")


def _record(ir_module):
    defined = [fn.name for fn in ir_module.functions if not fn.is_declaration]
    defined = [n for n in defined if not n.startswith(_WRAPPER_PREFIXES)]
    if defined:
        text = str(ir_module)
        with _lock:
            for name in defined:
                _raw_ir[name] = text


def _install_hook():
    original = codegen.CPUCodeLibrary.add_ir_module
    if getattr(original, "_enzpy_hook", False):
        return

    def add_ir_module(self, ir_module):
        _record(ir_module)
        return original(self, ir_module)

    add_ir_module._enzpy_hook = True
    codegen.CPUCodeLibrary.add_ir_module = add_ir_module


_install_hook()


def _compile_again(dispatcher, argtypes, symbol):
    """Lower ``dispatcher.py_func`` once more to capture its raw IR."""
    flags = compiler.Flags()
    flags.no_cpython_wrapper = True
    flags.no_cfunc_wrapper = True
    flags.nrt = True
    ctx = dispatcher.targetctx
    saved = ctx.cached_internal_func
    ctx.cached_internal_func = {}
    try:
        cres = compiler.compile_extra(dispatcher.typingctx, ctx, dispatcher.py_func,
                                      tuple(argtypes), None, flags, {})
    finally:
        ctx.cached_internal_func = saved
    new = cres.fndesc.mangled_name
    with _lock:
        text = _raw_ir[new]
        # Keep the symbol the rest of the program (and recursion) refers to;
        # a recursive call already named it, so drop that declaration.
        text = re.sub(r'^declare [^\n]*@"?' + re.escape(symbol) + r'"?\(.*$\n?', "",
                      text, flags=re.M)
        _raw_ir[symbol] = text.replace(new, symbol)
        return _raw_ir[symbol], cres.fndesc


class Lowered:
    """A function's Numba compile result and the facts enzpy needs from it."""

    def __init__(self, dispatcher, argtypes):
        self.dispatcher = dispatcher
        self.argtypes = tuple(argtypes)
        self.cres = dispatcher.overloads[self.argtypes]
        self._typed = None
        self.symbol = self.cres.fndesc.mangled_name
        self.restype = self.cres.signature.return_type
        self.name = getattr(dispatcher.py_func, "__qualname__", self.symbol)

    def source_lines(self):
        """Map Numba block labels (``B54`` in IR) to Python source lines."""
        blocks = getattr(self.cres.type_annotation, "blocks", None) or {}
        return {f"B{label}": blk.loc.line for label, blk in blocks.items()}

    def data_pointer_types(self, ctx) -> dict:
        """LLVM parameter index -> element type, for float arrays' data pointers."""
        table, index = {}, 2          # after retptr and excinfo
        for ty in self.argtypes:
            if isinstance(ty, types.Array) and isinstance(ty.dtype, types.Float):
                table[index + 4] = "double" if ty.dtype.bitwidth == 64 else "float"
            index += len(ctx.get_arg_packer([ty]).argument_types)
        return table

    def typed_fndesc(self):
        """The function descriptor with Numba's typing; a function loaded from
        Numba's on-disk cache has none, so it is typed (compiled) once more."""
        if self.cres.fndesc.calltypes is not None:
            return self.cres.fndesc
        if self._typed is None:
            self._typed = _compile_again(self.dispatcher, self.argtypes, self.symbol)[1]
        return self._typed

    def callees(self):
        """(dispatcher, argtypes) of the Numba functions this one calls."""
        found = []
        fndesc = self.typed_fndesc()
        typemap = fndesc.typemap
        for name, ty in typemap.items():
            if isinstance(ty, types.Generator):
                raise UnsupportedError(f"function '{self.name}' uses a generator ({ty}), "
                                       f"which enzpy cannot differentiate")
        for expr, sig in fndesc.calltypes.items():
            func = expr._kws.get("func") if hasattr(expr, "_kws") else None
            fnty = typemap.get(getattr(func, "name", ""), None)
            if isinstance(fnty, types.Dispatcher):
                found.append((fnty.dispatcher, sig.args))
            elif isinstance(fnty, types.RecursiveCall):
                # self recursion, possibly into another specialisation
                found.append((fnty.dispatcher_type.dispatcher, sig.args))
            elif isinstance(fnty, types.Function):
                for template in fnty.templates:
                    for disp_args in getattr(template, "_impl_cache", {}).values():
                        if isinstance(disp_args, tuple) and disp_args and \
                                hasattr(disp_args[0], "overloads"):
                            disp = disp_args[0]
                            if tuple(sig.args) in disp.overloads:
                                found.append((disp, tuple(sig.args)))
        return found


_MANGLED_PART = re.compile(r"(\d+)")


def demangle(symbol: str) -> str:
    """A readable name for a Numba-mangled symbol (``_ZN5numba2np...``)."""
    if not symbol.startswith("_ZN"):
        return symbol
    parts, i = [], 3
    while i < len(symbol) and symbol[i].isdigit():
        m = _MANGLED_PART.match(symbol, i)
        n = int(m.group(1))
        start = m.end()
        parts.append(symbol[start:start + n])
        i = start + n
    name = ".".join(parts) or symbol
    return re.sub(r"_([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), name)


def lower(dispatcher, argtypes) -> Lowered:
    argtypes = tuple(argtypes)
    if argtypes not in dispatcher.overloads:
        dispatcher.compile(argtypes)
    return Lowered(dispatcher, argtypes)


def _raw_text(lowered: Lowered) -> str:
    with _lock:
        text = _raw_ir.get(lowered.symbol)
    if text is None:
        text = _compile_again(lowered.dispatcher, lowered.argtypes, lowered.symbol)[0]
    return text


_INTRINSIC_OR_RUNTIME = re.compile(r"^(llvm\.|NRT_|numba_|Py|_Py)")


def collect_module(root: Lowered):
    """Link the raw IR of ``root`` and of every Numba function it reaches.

    Returns (module, lowered-by-symbol).
    """
    lowered = {root.symbol: root}
    pending = [root]
    while pending:
        for disp, args in pending.pop().callees():
            low = lower(disp, args)
            if low.symbol not in lowered:
                lowered[low.symbol] = low
                pending.append(low)

    module = llvm.parse_assembly(cgutils.normalize_ir_text(_raw_text(root)))
    linked = {root.symbol}
    while True:
        missing = [fn.name for fn in module.functions
                   if fn.is_declaration and fn.name not in linked
                   and not _INTRINSIC_OR_RUNTIME.match(fn.name)]
        missing += [g.name[len(_UNRESOLVED):] for g in module.global_variables
                    if g.name.startswith(_UNRESOLVED)
                    and g.name[len(_UNRESOLVED):] not in linked]
        added = False
        for name in missing:
            linked.add(name)
            text = _raw_ir.get(name)
            if text is None and name in lowered:
                text = _raw_text(lowered[name])
            if text is None:
                continue     # an external symbol: rules decide about it later
            other = llvm.parse_assembly(cgutils.normalize_ir_text(text))
            for fn in other.functions:
                if not fn.is_declaration:
                    linked.add(fn.name)
            _drop_duplicate_definitions(other, module)
            module.link_in(other)
            added = True
        if not added:
            break
    return _resolve_mutual_recursion(module), lowered


_UNRESOLVED = ".numba.unresolved$"


def _resolve_mutual_recursion(module):
    """Numba calls a mutually recursive function through a pointer it fills in
    at load time (``@".numba.unresolved$f"``); point it at the linked ``f`` so
    the cleanup turns those indirect calls into direct ones."""
    defined = {fn.name for fn in module.functions if not fn.is_declaration}
    targets = [g.name for g in module.global_variables if g.name.startswith(_UNRESOLVED)
               and g.name[len(_UNRESOLVED):] in defined]
    if not targets:
        return module
    text = str(module)
    for name in targets:
        symbol = name[len(_UNRESOLVED):]
        text = re.sub(r'^@"?' + re.escape(name) + r'"? = external global ptr',
                      f'@"{name}" = internal constant ptr @"{symbol}"', text, flags=re.M)
    return llvm.parse_assembly(text)


_DEFINE = re.compile(r'^define [^@]*@"?([^"(]+)"?\(')
_LABEL = re.compile(r'^"?([^":]+)"?:')
_ASSIGN = re.compile(r'^\s+%"?([^"\s]+)"? = ')


def original_blocks(module) -> dict:
    """{function: {instruction name: block label}} before cleanup merges blocks.

    Numba names blocks after bytecode offsets (``B54``), which map to source
    lines; instruction names survive the cleanup passes, block names do not.
    """
    table, current, label = {}, None, ""
    for line in str(module).splitlines():
        m = _DEFINE.match(line)
        if m:
            current = table.setdefault(m.group(1), {})
            continue
        if current is None:
            continue
        m = _LABEL.match(line)
        if m:
            label = m.group(1)
            continue
        m = _ASSIGN.match(line)
        if m:
            current[m.group(1)] = label
    return table


def _drop_duplicate_definitions(other, module):
    defined = {fn.name for fn in module.functions if not fn.is_declaration}
    for fn in other.functions:
        if not fn.is_declaration and fn.name in defined:
            raise UnsupportedError(f"symbol {fn.name} is defined twice in the linked IR")


def _target_machine():
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(opt=2, reloc="default", codemodel="jitdefault")


_tm = None


def cleanup(module):
    """The light pre-AD pipeline: small, clean, never unrolled IR."""
    global _tm
    if _tm is None:
        _tm = _target_machine()
    pto = llvm.PipelineTuningOptions(speed_level=1)
    pto.loop_unrolling = False
    pto.loop_vectorization = False
    pto.slp_vectorization = False
    pb = llvm.create_pass_builder(_tm, pto)
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_sroa_pass()
    mpm.add_instruction_combine_pass()
    mpm.add_simplify_cfg_pass()
    mpm.add_sroa_pass()
    mpm.add_new_gvn_pass()
    mpm.add_sccp_pass()
    mpm.add_instruction_combine_pass()
    mpm.add_simplify_cfg_pass()
    mpm.add_dead_code_elimination_pass()
    mpm.add_instruction_namer_pass()
    mpm.run(module, pb)
    return module
