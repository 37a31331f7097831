"""Read the IR model from LLVM's textual IR, in one pass over the text.

Reading through llvmlite's binding costs a few dozen foreign calls per
instruction; the printed IR carries everything the model needs and is parsed
here with plain string handling, linear in the size of the module. LLVM prints
IR in a canonical form, which is what this reader expects.
"""
from __future__ import annotations

import re

from .ir import Block, Function, Instruction, Module, Value, leading_type, local, split_top

_BINARY = {"add", "sub", "mul", "udiv", "sdiv", "urem", "srem", "shl", "lshr", "ashr",
           "and", "or", "xor", "fadd", "fsub", "fmul", "fdiv", "frem"}
_CASTS = {"trunc", "zext", "sext", "fptrunc", "fpext", "fptoui", "fptosi", "uitofp", "sitofp",
          "ptrtoint", "inttoptr", "bitcast", "addrspacecast"}
_FLAGS = {"nuw", "nsw", "exact", "disjoint", "samesign", "nneg", "fast", "nnan", "ninf", "nsz",
          "arcp", "contract", "afn", "reassoc", "inbounds", "nusw", "volatile", "atomic",
          "tail", "musttail", "notail", "inalloca"}
_PARAM_ATTRS = {"noundef", "nonnull", "noalias", "nocapture", "readonly", "writeonly",
                "readnone", "returned", "signext", "zeroext", "inreg", "immarg", "nofree",
                "nest", "swiftself", "swifterror", "dead_on_unwind", "writable", "noundef",
                "allocptr", "allocalign", "fastcc", "ccc", "coldcc", "local_unnamed_addr"}
_ATTR_WITH_ARG = re.compile(
    r"^(align|dereferenceable|dereferenceable_or_null|captures|range|nofpclass|byval|sret|"
    r"byref|preallocated|initializes|elementtype|inalloca|alignstack|memory)\b")
_NAME = r'(?:"(?:[^"\\]|\\.)*"|[-\w.$]+)'
_DEFINE = re.compile(r"^define\b(.*?)@(" + _NAME + r")\((.*)\)(.*)\{\s*$")
_DECLARE = re.compile(r"^declare\b.*?@(" + _NAME + r")\(")
_LABEL = re.compile(r"^(" + _NAME + r"):")
_ASSIGN = re.compile(r"^%(" + _NAME + r")\s*=\s*(.*)$")
_CALLEE = re.compile(r"([@%]" + _NAME + r")\(")
_METADATA = re.compile(r",\s*!\w+\s+!\d+")
_ESCAPE = re.compile(r"\\([0-9A-Fa-f]{2})")
_TOKEN = re.compile(r"\S+")
_WORD = re.compile(r"(\w+)\s*")
_KEYWORD = re.compile(r"([a-z_]+)")


def defined_name(line: str):
    """The name of the function a ``define`` line starts, or None."""
    m = _DEFINE.match(line)
    return unquote(m.group(2)) if m else None


def unquote(name: str) -> str:
    if name.startswith('"'):
        return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), name[1:-1])
    return name


def take_type(text: str):
    """(leading type, rest) of ``text``."""
    text = text.strip()
    if text[:1] in "{[<":
        depth = 0
        for i, ch in enumerate(text):
            if ch in "{[<(":
                depth += 1
            elif ch in "}]>)":
                depth -= 1
                if depth == 0:
                    return text[:i + 1], text[i + 1:].strip()
    m = _TOKEN.match(text)
    return m.group(0), text[m.end():].strip()


def _skip_words(text: str, words) -> str:
    while True:
        m = _WORD.match(text)
        if not m or m.group(1) not in words:
            return text
        text = text[m.end():]


def _skip_param_attrs(text: str) -> str:
    while True:
        text = text.strip()
        m = _KEYWORD.match(text)
        if not m:
            return text
        word = m.group(1)
        if word in _PARAM_ATTRS:
            text = text[m.end():]
        elif _ATTR_WITH_ARG.match(text):
            rest = text[m.end():].strip()
            if rest.startswith("("):
                depth = 0
                for i, ch in enumerate(rest):
                    depth += ch == "("
                    depth -= ch == ")"
                    if depth == 0:
                        text = rest[i + 1:]
                        break
            else:                              # align 8
                text = re.sub(r"^\d+", "", rest.strip())
        else:
            return text


class _FunctionReader:
    def __init__(self, name, return_type, params):
        self.name = name
        self.args = []
        for param in split_top(params):
            ty, rest = take_type(param)
            rest = _skip_param_attrs(rest)
            self.args.append(Value(local(unquote(rest[1:])), ty, "arg", unquote(rest[1:])))
        self.arg_names = {a.name for a in self.args}
        self.return_type = return_type

    def value(self, text: str, ty: str) -> Value:
        text = text.strip()
        if text.startswith("%"):
            name = unquote(text[1:])
            kind = "arg" if name in self.arg_names else "inst"
            return Value(local(name), ty, kind, name)
        if text.startswith("@"):
            name = unquote(text[1:])
            return Value("@" + f'"{name}"', ty, "global", name)
        return Value(text, ty, "const")

    def typed(self, text: str) -> Value:
        ty, rest = take_type(text)
        return self.value(_skip_param_attrs(rest), ty)

    def instruction(self, line: str) -> Instruction:
        line = _METADATA.sub("", line.split(" ;", 1)[0]).strip()
        name = ""
        m = _ASSIGN.match(line)
        body = line
        if m:
            name, body = unquote(m.group(1)), m.group(2)
        opcode = body.split(None, 1)[0]
        if opcode in ("tail", "musttail", "notail"):
            opcode = "call"
        rest = body.split(None, 1)[1] if " " in body else ""
        node = Instruction(name, opcode, "void", [], line)
        getattr(self, "_" + opcode, self._generic)(node, rest)
        return node

    # -- one parser per instruction family --------------------------------------
    def _generic(self, node, rest):
        if node.opcode in _BINARY:
            rest = _skip_words(rest, _FLAGS)
            a, b = split_top(rest)
            va = self.typed(a)
            node.operands = [va, self.value(b, va.type)]
            node.type = va.type
        elif node.opcode in _CASTS:
            rest = _skip_words(rest, _FLAGS)
            src, to = rest.rsplit(" to ", 1)
            node.operands = [self.typed(src)]
            node.type = to.strip()
        else:
            # Opcodes enzpy has no rule for (atomics, vector shuffles, ...): keep
            # their operands so that analyses see the uses; differentiating
            # them raises UnsupportedError downstream.
            parts = split_top(_skip_words(rest, _FLAGS))
            node.operands = [self.typed(p) for p in parts if p and p[0] not in "!"]
            node.type = node.operands[0].type if node.operands else "void"

    def _fneg(self, node, rest):
        v = self.typed(_skip_words(rest, _FLAGS))
        node.operands, node.type = [v], v.type

    def _freeze(self, node, rest):
        self._fneg(node, rest)

    def _icmp(self, node, rest):
        rest = _skip_words(rest, _FLAGS)
        pred, rest = rest.split(None, 1)
        a, b = split_top(rest)
        va = self.typed(a)
        node.predicate = pred
        node.operands = [va, self.value(b, va.type)]
        node.type = "i1" if not va.type.startswith("<") else \
            re.sub(r"x .*>$", "x i1>", va.type)

    _fcmp = _icmp

    def _select(self, node, rest):
        c, a, b = split_top(_skip_words(rest, _FLAGS))
        node.operands = [self.typed(c), self.typed(a), self.typed(b)]
        node.type = node.operands[1].type

    def _phi(self, node, rest):
        ty, rest = take_type(_skip_words(rest, _FLAGS))
        node.type = ty
        for arm in split_top(rest):
            value, block = arm.strip()[1:-1].rsplit(",", 1)
            node.incoming.append((self.value(value, ty), unquote(block.strip()[1:])))
        node.operands = [v for v, _ in node.incoming]

    def _load(self, node, rest):
        parts = split_top(_skip_words(rest, _FLAGS))
        node.type = parts[0]
        node.source_type = parts[0]
        node.operands = [self.typed(parts[1])]

    def _store(self, node, rest):
        parts = split_top(_skip_words(rest, _FLAGS))
        node.operands = [self.typed(parts[0]), self.typed(parts[1])]

    def _getelementptr(self, node, rest):
        rest = re.sub(r"inrange\([^)]*\)\s*", "", _skip_words(rest, _FLAGS))
        rest = _skip_words(rest, _FLAGS)
        parts = split_top(rest)
        node.source_type = parts[0]
        node.operands = [self.typed(p) for p in parts[1:]]
        node.type = node.operands[0].type

    def _alloca(self, node, rest):
        parts = split_top(_skip_words(rest, _FLAGS))
        node.source_type = leading_type(parts[0])
        count = [p for p in parts[1:] if not p.startswith("align")]
        node.operands = [self.typed(count[0]) if count else Value("1", "i32", "const")]
        node.type = "ptr"

    def _extractvalue(self, node, rest):
        parts = split_top(rest)
        agg = self.typed(parts[0])
        node.operands = [agg]
        node.indices = tuple(int(p) for p in parts[1:])
        ty = agg.type
        for idx in node.indices:
            ty = element_type(ty, idx)
        node.type = ty

    def _insertvalue(self, node, rest):
        parts = split_top(rest)
        agg = self.typed(parts[0])
        node.operands = [agg, self.typed(parts[1])]
        node.indices = tuple(int(p) for p in parts[2:])
        node.type = agg.type

    def _call(self, node, rest):
        rest = _skip_words(rest, _FLAGS | {"call"})
        m = _CALLEE.search(rest)
        head, callee = rest[:m.start()], m.group(1)
        args_text, depth = rest[m.end():], 1
        for i, ch in enumerate(args_text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                args_text = args_text[:i]
                break
        head = _skip_param_attrs(_skip_words(head.strip(), _FLAGS | _PARAM_ATTRS))
        node.type = take_type(head)[0] if head else "void"
        args = [self.typed(a) for a in split_top(args_text)] if args_text.strip() else []
        target = self.value(callee, "ptr")
        node.callee = target.name if target.kind == "global" else ""
        node.operands = args + [target]

    def _br(self, node, rest):
        parts = split_top(rest)
        if len(parts) == 1:
            node.targets = [unquote(parts[0].split()[1][1:])]
            node.operands = [Value(local(node.targets[0]), "label", "block", node.targets[0])]
        else:
            cond = self.typed(parts[0])
            node.targets = [unquote(p.split()[1][1:]) for p in parts[1:]]
            node.operands = [cond] + [Value(local(t), "label", "block", t)
                                      for t in reversed(node.targets)]

    def _switch(self, node, rest):
        head, cases = rest.split("[", 1)
        value_text, default = split_top(head)
        node.operands = [self.typed(value_text)]
        node.targets = [unquote(default.split()[1][1:])]
        for const, label in re.findall(r"(\w+\s+-?\w+),\s*label\s+%(" + _NAME + ")",
                                       cases.rsplit("]", 1)[0]):
            node.cases.append((const, unquote(label)))
            node.targets.append(unquote(label))
        node.operands += [Value(local(t), "label", "block", t) for t in node.targets]

    def _ret(self, node, rest):
        node.operands = [] if rest.strip() == "void" else [self.typed(rest)]

    def _unreachable(self, node, rest):
        pass


def element_type(ty: str, index: int) -> str:
    """The type of field ``index`` of a struct or array type."""
    ty = ty.strip()
    if ty.startswith("<{"):
        return split_top(ty[2:-2])[index]
    if ty.startswith("{"):
        return split_top(ty[1:-1])[index]
    if ty.startswith("[") or ty.startswith("<"):
        return ty[1:-1].split(" x ", 1)[1].strip()
    raise ValueError(f"cannot index type {ty}")


_TOP_LEVEL_NAME = re.compile(r"^(?:define|declare)\b[^@]*@(" + _NAME + r")\(|^@(" + _NAME + r")\s*=")


def definitions(text: str) -> dict:
    """The top-level entities of an IR text (functions defined or declared,
    globals), by symbol name, each with its text (comments dropped)."""
    found, name, lines = {}, None, []
    for line in text.splitlines():
        m = _TOP_LEVEL_NAME.match(line)
        if m and name is None:
            name = unquote(m.group(1) or m.group(2))
            lines = [line]
            if not line.startswith("define"):
                found[name], name = line, None
            continue
        if name is not None:
            lines.append(line)
            if line == "}":
                found[name], name = "\n".join(lines), None
    return found


def type_text(ty) -> str:
    """An llvmlite ``ir`` type as IR text of the model: pointers opaque,
    named structs spelled out (see ``inline_named_types``)."""
    from llvmlite import ir
    if isinstance(ty, ir.PointerType):
        return "ptr"
    if isinstance(ty, (ir.LiteralStructType, ir.IdentifiedStructType)):
        body = ", ".join(type_text(t) for t in ty.elements)
        return f"<{{ {body} }}>" if ty.packed else f"{{ {body} }}"
    if isinstance(ty, ir.ArrayType):
        return f"[{ty.count} x {type_text(ty.element)}]"
    if isinstance(ty, ir.VectorType):
        return f"<{ty.count} x {type_text(ty.element)}>"
    return str(ty)


_TYPE_DEFINITION = re.compile(r'^(%(?:"[^"]*"|[-\w.$]+)) = type (.*)$', re.M)


def inline_named_types(text: str) -> str:
    """``text`` with each named struct type (``%T = type { ... }``, e.g.
    Numba's deferred types of recursive jitclasses) replaced by its body: the
    IR model reads types from their spelling. (With opaque pointers no struct
    contains itself, so the expansion ends.)"""
    bodies = {name: body for name, body in _TYPE_DEFINITION.findall(text)
              if body.strip() != "opaque"}
    if not bodies:
        return text
    text = _TYPE_DEFINITION.sub(lambda m: "" if m.group(1) in bodies else m.group(0), text)
    names = re.compile("|".join(re.escape(n) for n in sorted(bodies, key=len, reverse=True))
                       + r'(?![-\w.$"])')
    for _ in range(len(bodies) + 1):
        expanded = names.sub(lambda m: bodies[m.group(0)], text)
        if expanded == text:
            break
        text = expanded
    return text


def read_module_text(text: str) -> Module:
    text = inline_named_types(text)
    functions, declarations = {}, {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("declare"):
            m = _DECLARE.match(line)
            if m:
                declarations[unquote(m.group(1))] = line
        elif line.startswith("define"):
            m = _DEFINE.match(line)
            header, name, params = m.group(1), unquote(m.group(2)), m.group(3)
            return_type = take_type(_skip_param_attrs(_skip_words(
                re.sub(r"\b(internal|private|linkonce_odr|linkonce|weak_odr|weak|external|"
                       r"dso_local|hidden|protected|default|unnamed_addr|"
                       r"local_unnamed_addr)\b", "", header).strip(), _PARAM_ATTRS)))[0]
            reader = _FunctionReader(name, return_type, params)
            blocks, current = [], None
            i += 1
            while lines[i] != "}":
                raw = lines[i]
                stripped = raw.strip()
                if not stripped or stripped.startswith(";"):
                    i += 1
                    continue
                if not raw.startswith(" "):
                    current = Block(unquote(_LABEL.match(stripped).group(1)), [])
                    blocks.append(current)
                    i += 1
                    continue
                if stripped.startswith("switch") and not stripped.endswith("]"):
                    while not lines[i].strip().startswith("]"):
                        i += 1
                        stripped += " " + lines[i].strip()
                if current is None:
                    current = Block("entry", [])
                    blocks.append(current)
                current.instructions.append(reader.instruction(stripped))
                i += 1
            functions[name] = Function(name, return_type, reader.args, blocks, header)
        i += 1
    return Module(functions, declarations, text)
