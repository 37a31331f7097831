"""A small Python model of LLVM IR, read from ``llvmlite.binding``.

This is the only module that knows llvmlite's binding quirks: operand order of
``br``/``switch``, details that only the instruction text carries (predicates,
aggregate indices, allocated types, switch case values) and how constants print.
Everything downstream works on these plain objects.
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from functools import cached_property

from llvmlite import binding as llvm

FLOAT_TYPES = ("double", "float", "half")


def quote(name: str) -> str:
    """An IR identifier for ``name`` (always quoted, so any name is valid)."""
    return '"' + name.replace('"', r'\22') + '"'


def local(name: str) -> str:
    return "%" + quote(name)


def tangent_name(name: str) -> str:
    """Names of tangents and shadows in forward mode's tangent functions
    (distinct from reverse mode's shadows, so reverse mode can differentiate
    tangent functions again)."""
    return "~t." + name


def is_float_type(ty: str) -> bool:
    return ty in FLOAT_TYPES


def contains_pointer(ty: str) -> bool:
    return re.search(r"\bptr\b", ty) is not None


def contains_float(ty: str) -> bool:
    """True for float scalars and aggregates/vectors holding floats."""
    return any(re.search(r"\b%s\b" % t, ty) for t in FLOAT_TYPES)


def fields_of(ty: str) -> list:
    """The field types of a struct, array or vector type (empty for a scalar)."""
    ty = ty.strip()
    if ty.startswith("<{"):
        return split_top(ty[2:-2])
    if ty.startswith("{"):
        return split_top(ty[1:-1])
    if ty.startswith("[") or ty.startswith("<"):
        count, elt = ty[1:-1].split(" x ", 1)
        return [elt.strip()] * int(count)
    return []


_SCALAR_SIZES = {"ptr": 8, "double": 8, "float": 4, "half": 2, "i1": 1}


def size_and_alignment(ty: str):
    """(size, alignment) in bytes of an LLVM type on x86-64/aarch64 (natural
    alignment; packed structs have none)."""
    ty = ty.strip()
    if ty in _SCALAR_SIZES:
        return _SCALAR_SIZES[ty], _SCALAR_SIZES[ty]
    if re.fullmatch(r"i\d+", ty):
        size = max(1, (int(ty[1:]) + 7) // 8)
        return size, min(size, 16)
    if ty.startswith("[") or ty.startswith("<") and not ty.startswith("<{"):
        count, elt = ty[1:-1].split(" x ", 1)
        size, align = size_and_alignment(elt)
        return size * int(count), align
    if ty.startswith("{") or ty.startswith("<{"):
        packed = ty.startswith("<{")
        offset, align = 0, 1
        for field in fields_of(ty):
            size, a = size_and_alignment(field)
            if not packed:
                offset = -(-offset // a) * a
                align = max(align, a)
            offset += size
        return -(-offset // align) * align, align
    raise ValueError(f"no layout for type {ty}")


def field_offsets(ty: str) -> list:
    """Byte offsets of the fields of a struct or array type."""
    offsets, offset = [], 0
    packed = ty.strip().startswith("<{")
    for field in fields_of(ty):
        size, align = size_and_alignment(field)
        if not packed:
            offset = -(-offset // align) * align
        offsets.append(offset)
        offset += size
    return offsets


def leaf_kinds(ty: str) -> set:
    """What a value of type ``ty`` holds: 'int', 'ptr' and float type names."""
    fields = fields_of(ty)
    if fields:
        return set().union(*(leaf_kinds(f) for f in set(fields)))
    if ty == "ptr" or is_float_type(ty):
        return {ty}
    return {"int"}


@dataclass(frozen=True)
class Value:
    """An operand: ``ref`` is its text in IR (``%"x"``, ``1.0``, ``@g``)."""
    ref: str
    type: str
    kind: str                  # 'inst', 'arg', 'const', 'global', 'block'
    name: str = ""

    @property
    def is_const(self) -> bool:
        return self.kind in ("const", "global")

    def typed(self) -> str:
        return f"{self.type} {self.ref}"


@dataclass
class Instruction:
    name: str                  # '' for instructions without a result
    opcode: str
    type: str
    operands: list
    text: str
    block: "Block" = None
    # Details the binding does not expose, parsed from the text:
    predicate: str = ""        # fcmp / icmp
    indices: tuple = ()        # extractvalue / insertvalue
    source_type: str = ""      # getelementptr / alloca / load result type
    callee: str = ""           # call: name of the called function ('' if indirect)
    incoming: list = field(default_factory=list)   # phi: [(Value, block name)]
    targets: list = field(default_factory=list)    # br / switch: successor block names
    cases: list = field(default_factory=list)      # switch: [(const text, block)]

    @property
    def value(self) -> Value:
        return Value(local(self.name), self.type, "inst", self.name)

    def set_incoming(self, incoming):
        """Give a phi the (value, block name) pairs ``incoming``, its text too."""
        self.incoming = list(incoming)
        self.operands = [v for v, _ in self.incoming]
        arms = ", ".join(f"[ {v.ref}, {local(b)} ]" for v, b in self.incoming)
        self.text = f"{local(self.name)} = phi {self.type} {arms}"

    @property
    def args(self) -> list:
        """Call arguments (the callee operand removed)."""
        return self.operands[:-1] if self.opcode == "call" else self.operands


@dataclass
class Block:
    name: str
    instructions: list
    function: "Function" = None

    @property
    def terminator(self) -> Instruction:
        return self.instructions[-1]

    @property
    def successors(self) -> list:
        return self.terminator.targets


@dataclass
class Function:
    name: str
    return_type: str
    args: list                 # [Value]
    blocks: list
    attributes: str = ""       # what the definition says before the name (text reader)

    def __post_init__(self):
        self.block_map = {b.name: b for b in self.blocks}
        self.defs = {}
        for b in self.blocks:
            b.function = self
            for ins in b.instructions:
                ins.block = b
                if ins.name:
                    self.defs[ins.name] = ins

    @property
    def entry(self) -> Block:
        return self.blocks[0]

    @cached_property
    def users(self) -> dict:
        """value name -> instructions using it."""
        table = {}
        for b in self.blocks:
            for ins in b.instructions:
                for o in ins.operands:
                    if o.kind in ("inst", "arg"):
                        table.setdefault(o.name, []).append(ins)
        return table


@dataclass
class Module:
    functions: dict            # name -> Function (definitions only)
    declarations: dict         # name -> function type text of declared-only functions
    text: str                  # the module as IR text


_CALL_RE = re.compile(r'call\s.*?@("(?:[^"\\]|\\.)*"|[-\w.$]+)\s*\(')
_PRED_RE = re.compile(r"^\s*(?:%\S+\s*=\s*)?[fi]cmp\s+(?:\w+\s+)*?(oeq|ogt|oge|olt|ole|one|ord|ueq|ugt|uge|ult|ule|une|uno|true|false|eq|ne|sgt|sge|slt|sle)\b")
_AGG_IDX_RE = re.compile(r"((?:,\s*\d+)+)\s*(?:,\s*!.*)?$")
_GEP_RE = re.compile(r"getelementptr\s+(?:inbounds\s+|nuw\s+|nusw\s+|inrange\(\S+\)\s+)*(.+?),\s*ptr\b")
_CASE_RE = re.compile(r"(\w+\s+-?\d+|\w+\s+true|\w+\s+false),\s*label\s+%(\"(?:[^\"\\]|\\.)*\"|[-\w.$]+)")


def split_top(text: str) -> list:
    """Split at commas outside brackets and quotes (operand lists, struct fields)."""
    parts, depth, start, quoted = [], 0, 0, False
    for i, ch in enumerate(text):
        if ch == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def leading_type(text: str) -> str:
    """The type at the start of ``text`` (up to the first top-level comma)."""
    parts = split_top(text)
    return parts[0] if parts else ""


def _unquote(name: str) -> str:
    return name[1:-1] if name.startswith('"') else name


def read_value(op) -> Value:
    kind = op.value_kind.name if hasattr(op.value_kind, "name") else str(op.value_kind)
    ty = str(op.type)
    if kind == "argument":
        return Value(local(op.name), ty, "arg", op.name)
    if kind == "instruction":
        return Value(local(op.name), ty, "inst", op.name)
    if kind == "basic_block":
        return Value(local(op.name), "label", "block", op.name)
    if kind in ("function", "global_variable", "global_alias"):
        return Value("@" + quote(op.name), ty, "global", op.name)
    text = str(op).strip()
    if text.startswith(ty + " "):
        text = text[len(ty) + 1:]
    return Value(text, ty, "const")


def read_instruction(ins) -> Instruction:
    text = str(ins).strip()
    operands = [read_value(o) for o in ins.operands]
    opcode = ins.opcode
    node = Instruction(ins.name, opcode, str(ins.type), operands, text)
    if opcode in ("fcmp", "icmp"):
        m = _PRED_RE.match(text)
        node.predicate = m.group(1)
    elif opcode in ("extractvalue", "insertvalue"):
        m = _AGG_IDX_RE.search(text)
        node.indices = tuple(int(x) for x in re.findall(r"\d+", m.group(1)))
    elif opcode == "getelementptr":
        node.source_type = _GEP_RE.search(text).group(1)
    elif opcode == "alloca":
        rest = text.split("=", 1)[1].strip()[len("alloca"):].strip()
        if rest.startswith("inalloca "):
            rest = rest[len("inalloca "):]
        node.source_type = leading_type(rest)
    elif opcode == "call":
        callee = operands[-1]
        node.callee = callee.name if callee.kind == "global" else ""
    elif opcode == "phi":
        node.incoming = list(zip(operands, [b.name for b in ins.incoming_blocks]))
    elif opcode == "br":
        blocks = [o.name for o in operands if o.kind == "block"]
        # A conditional branch lists (cond, false-target, true-target).
        node.targets = blocks[::-1] if len(operands) == 3 else blocks
    elif opcode == "switch":
        node.targets = [o.name for o in operands if o.kind == "block"]
        node.cases = [(c, _unquote(b)) for c, b in _CASE_RE.findall(text)]
    return node


def read_function(fn) -> Function:
    args = [Value(local(a.name), str(a.type), "arg", a.name) for a in fn.arguments]
    blocks = [Block(b.name, [read_instruction(i) for i in b.instructions]) for b in fn.blocks]
    return_type = str(fn.global_value_type).split(" (", 1)[0]
    header = next(line for line in str(fn).splitlines() if line.startswith("define"))
    return Function(fn.name, return_type, args, blocks, header.split("@", 1)[0][len("define"):])


@contextlib.contextmanager
def _quiet_binding_lock():
    """Numba hooks an event recorder onto every llvmlite call; reading IR makes
    thousands of tiny calls, so the hooks are set aside meanwhile."""
    lock = getattr(getattr(llvm.ffi, "lib", None), "_lock", None)
    saved = getattr(lock, "_cblist", None)
    if saved is None:
        yield
        return
    lock._cblist = []
    try:
        yield
    finally:
        lock._cblist = saved


def read_module(mod) -> Module:
    functions, declarations = {}, {}
    with _quiet_binding_lock():
        for fn in mod.functions:
            if fn.is_declaration:
                declarations[fn.name] = str(fn.global_value_type)
            else:
                functions[fn.name] = read_function(fn)
        text = str(mod)
    return Module(functions, declarations, text)


def parse(text: str):
    """Parse IR text into a verified llvmlite module."""
    mod = llvm.parse_assembly(text)
    mod.verify()
    return mod
