"""Generate docs/numpy.md: enzpy's status on every NumPy function, ufunc, array method and
attribute that Numba supports in nopython mode, from a run of scripts/numpy_probe.py.

    python scripts/numpy_table.py --results probe.json      # a saved `numpy_probe.py --json`
    python scripts/numpy_table.py --run --jobs 2            # run the probe first
    python scripts/numpy_table.py --results probe.json --out -   # print instead of writing

The list of names is Numba's "Supported NumPy features" page (NUMBA_PAGE below),
transcribed group by group into SECTIONS. The stored copy of the page that was transcribed
predates Numba 0.68, so names Numba 0.68 supports that the copy does not list were added to
their group from Numba 0.68's typing registry; the table marks them with a dagger.

Per name and mode (reverse, forward, second order) the cell says
  ✓               every corpus program covering the name (``Program.covers`` in
                  tests/numpy_corpus.py) passes in that mode
  k/n ✓; reason   some fail: the reason of the first failure, shortened
  not covered     no corpus program covers the name (for second order: no hvp=True program)
  no derivative   in NO_DERIVATIVE below (integer, boolean or constant results) and not
                  covered; also the few names NumPy 2 no longer has
Names the corpus covers that the page does not list (operators, indexing forms, Python
containers) get their own section, so every ``covers`` name of the registry appears.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

NUMBA_PAGE = "https://numba.readthedocs.io/en/stable/reference/numpysupported.html"
PAGE_SOURCE = ("numba/numba docs/source/reference/numpysupported.rst, stored copy at commit "
               "003b965c601a4ab68e6a91653018d639ced1b97f")

# (section, group, prefix, names as the page lists them, names added from Numba 0.68's
# typing registry). Names are spelled as Program.covers spells them: prefix + name.
SECTIONS = [
    ("Array types", "Array access", "", "",
     ""),
    ("Array types", "Attributes", "ndarray.",
     "dtype flags flat itemsize ndim shape size strides T real imag",
     "nbytes ctypes"),
    ("Array types", "Calculation (methods in their basic form)", "ndarray.",
     "all any argmax argmin conj conjugate cumprod cumsum max mean min nonzero prod std "
     "take var", ""),
    ("Array types", "Calculation: the corresponding top-level functions", "np.",
     "all any argmax argmin conj conjugate cumprod cumsum max mean min nonzero prod std "
     "take var", "sum"),
    ("Array types", "Other methods", "ndarray.",
     "argsort astype copy dot flatten item itemset ravel reshape sort sum transpose view",
     "clip fill repeat tobytes"),
    ("Functions", "Linear algebra", "np.",
     "dot kron outer trace vdot", ""),
    ("Functions", "Linear algebra", "",
     "@", ""),
    ("Functions", "Linear algebra", "np.linalg.",
     "cholesky cond det eig eigh eigvals eigvalsh inv lstsq matrix_power matrix_rank norm "
     "pinv qr slogdet solve svd", ""),
    ("Functions", "Reductions", "np.",
     "diff median nancumprod nancumsum nanmax nanmean nanmedian nanmin nanpercentile "
     "nanprod nanstd nansum nanvar percentile",
     "amax amin average nanargmax nanargmin nanquantile quantile"),
    ("Functions", "Other functions", "np.",
     "arange argsort array asarray asfortranarray atleast_1d atleast_2d atleast_3d bincount "
     "column_stack concatenate convolve copy corrcoef correlate cov diag digitize dstack "
     "dtype ediff1d empty empty_like expand_dims eye fill_diagonal flatten frombuffer full "
     "full_like histogram hstack identity interp linspace ndenumerate ndindex nditer ones "
     "ones_like partition ptp ravel reshape roots round_ searchsorted sinc sort stack take "
     "transpose tri tril triu unique vander vstack where zeros zeros_like",
     "allclose angle append argpartition argwhere around array_equal array_split "
     "asarray_chkfinite ascontiguousarray bartlett blackman broadcast_arrays broadcast_to "
     "clip concat count_nonzero cross delete diagflat dsplit extract flatnonzero flip fliplr "
     "flipud geomspace hamming hanning hsplit imag insert intersect1d isclose iscomplex "
     "iscomplexobj isin isneginf isposinf isreal isrealobj kaiser logspace moveaxis "
     "nan_to_num permute_dims real repeat resize roll rot90 round select setdiff1d "
     "setxor1d shape size split swapaxes take_along_axis trapezoid tril_indices_from "
     "triu_indices_from trim_zeros union1d unwrap vsplit"),
    ("Functions", "Constructors", "np.",
     "bool_ complex64 complex128 float32 float64 int8 int16 int32 int64 intc intp uint8 "
     "uint16 uint32 uint64 uintc uintp", ""),
    ("Functions", "Machine parameters", "np.",
     "iinfo finfo MachAr", ""),
    ("Modules", "random: initialization", "np.random.",
     "seed", ""),
    ("Modules", "random: simple random data", "np.random.",
     "rand randint randn random random_sample ranf sample", ""),
    ("Modules", "random: permutations", "np.random.",
     "choice permutation shuffle", ""),
    ("Modules", "random: distributions", "np.random.",
     "beta binomial chisquare exponential f gamma geometric gumbel hypergeometric laplace "
     "logistic lognormal logseries multinomial negative_binomial normal pareto poisson "
     "power rayleigh standard_cauchy standard_exponential standard_gamma standard_normal "
     "standard_t triangular uniform vonmises wald weibull zipf", ""),
    ("Modules", "stride_tricks", "np.lib.stride_tricks.",
     "as_strided", "sliding_window_view"),
    ("Standard ufuncs", "Math operations", "np.",
     "add subtract multiply divide logaddexp logaddexp2 true_divide floor_divide negative "
     "power remainder mod fmod abs absolute fabs rint sign conj exp exp2 log log2 log10 "
     "expm1 log1p sqrt square reciprocal conjugate",
     "positive float_power pow cbrt divmod gcd lcm"),
    ("Standard ufuncs", "Trigonometric functions", "np.",
     "sin cos tan arcsin arccos arctan arctan2 hypot sinh cosh tanh arcsinh arccosh arctanh "
     "deg2rad rad2deg degrees radians",
     "asin acos atan atan2 asinh acosh atanh"),
    ("Standard ufuncs", "Bit-twiddling functions", "np.",
     "bitwise_and bitwise_or bitwise_xor bitwise_not invert left_shift right_shift",
     "bitwise_invert bitwise_left_shift bitwise_right_shift"),
    ("Standard ufuncs", "Comparison functions", "np.",
     "greater greater_equal less less_equal not_equal equal logical_and logical_or "
     "logical_xor logical_not maximum minimum fmax fmin", ""),
    ("Standard ufuncs", "Floating functions", "np.",
     "isfinite isinf isnan signbit copysign nextafter ldexp floor ceil trunc spacing",
     "isnat"),
]
# The page's "Array access" paragraph names these forms (one advanced index, a 1-D array).
ARRAY_ACCESS = ["basic indexing", "slicing", "fancy indexing"]
LABELS = {"fancy indexing": "fancy indexing (advanced indexing)", "@": "`@` (matmul operator)"}

INTEGER = "no derivative (integer/boolean result)"
CONSTANT = "no derivative (constant result)"
RANDOM = "no derivative (random numbers)"
PIECEWISE = "zero derivative (piecewise constant)"
ABSENT = "not in NumPy 2 (removed, or never a NumPy function): nothing to compile"
NO_DERIVATIVE = {
    **dict.fromkeys("""
        np.argsort np.argmax np.argmin np.argpartition np.argwhere np.nonzero np.flatnonzero
        np.count_nonzero np.searchsorted np.digitize np.all np.any
        np.isclose np.allclose np.array_equal np.isfinite np.isinf np.isnan np.isnat
        np.signbit np.isneginf np.isposinf np.isreal np.iscomplex np.isrealobj
        np.iscomplexobj np.greater np.greater_equal np.less np.less_equal np.not_equal
        np.equal np.logical_and np.logical_or np.logical_xor np.logical_not np.bitwise_and
        np.bitwise_or np.bitwise_xor np.bitwise_not np.invert np.left_shift np.right_shift
        np.bitwise_invert np.bitwise_left_shift np.bitwise_right_shift np.gcd np.lcm
        np.shape np.size np.dtype np.ndindex np.tril_indices_from np.triu_indices_from
        np.bool_ np.int8 np.int16 np.int32 np.int64 np.intc np.intp np.uint8 np.uint16
        np.uint32 np.uint64 np.uintc np.uintp np.iinfo np.finfo np.MachAr
        ndarray.argmax ndarray.argmin ndarray.argsort ndarray.nonzero ndarray.all ndarray.any
        ndarray.dtype ndarray.flags ndarray.itemsize ndarray.ndim ndarray.shape ndarray.size
        ndarray.strides ndarray.nbytes ndarray.ctypes ndarray.tobytes np.isin
        np.linalg.matrix_rank
        """.split(), INTEGER),
    **dict.fromkeys("""
        np.empty np.empty_like np.zeros np.zeros_like np.ones np.ones_like np.eye
        np.identity np.arange np.tri np.bartlett np.blackman np.hamming np.hanning
        """.split(), CONSTANT),
    **dict.fromkeys("np.floor np.ceil np.trunc np.rint np.sign".split(), PIECEWISE),
    **dict.fromkeys("np.round_ np.flatten ndarray.itemset".split(), ABSENT),
}


def no_derivative(name):
    """Why a name has nothing to differentiate, or None."""
    return NO_DERIVATIVE.get(name) or (RANDOM if name.startswith("np.random.") else None)


MODE_COLUMNS = (("reverse", "reverse"), ("forward", "forward"), ("hvp", "second order"))


def page_names():
    """[(section, group, [(name, added)])] in page order, each name once."""
    seen, out = set(), []
    for section, group, prefix, listed, added in SECTIONS:
        names = ([(n, False) for n in ARRAY_ACCESS] if group == "Array access" else
                 [(prefix + n, False) for n in listed.split()]
                 + [(prefix + n, True) for n in added.split()])
        names = [(n, a) for n, a in names if n not in seen]
        seen.update(n for n, _ in names)
        if out and out[-1][:2] == (section, group):
            out[-1][2].extend(names)
        else:
            out.append((section, group, names))
    return out


def extra_names(programs):
    """Names the corpus covers that the page does not list, in corpus order."""
    listed = {n for _, _, names in page_names() for n, _ in names}
    out = []
    for p in programs:
        for c in p.covers:
            if c not in listed and c not in out:
                out.append(c)
    return out


# -- statuses ----------------------------------------------------------------------------
def _short_reason(result):
    """A refusal/error/WRONG reason in a few words."""
    status = result["status"]
    if status == "WRONG":
        m = re.match(r"max rel err (\S+)", result.get("detail", ""))
        return f"wrong (rel err {m.group(1)})" if m else "wrong"
    text = result.get("message") or result.get("detail") or ""
    from numpy_probe import _reason_key
    key = _reason_key(text)
    key = re.sub(r"^(\w+Error): ", "", key) if status == "error" else key
    key = re.sub(r"\s*\[in ([^\]]*)\]$", r" (in \1)", key)
    key = re.sub(r" for \(.*", "", key)          # a list of Numba types
    key = re.sub(r"`[^`]*`", lambda m: m.group(0) if len(m.group(0)) < 40 else "`...`", key)
    key = key.replace("|", "/")
    if len(key) > 90:
        key = key[:87].rstrip() + "..."
    prefix = {"refused": "refused: ", "error": "error: "}.get(status, "")
    if status == "error" and text.startswith("crash"):
        return "error: crash"
    if status == "error" and text.startswith("timeout"):
        return "error: timeout"
    return prefix + key


def cell(name, mode, covering):
    """The table cell of one name in one mode; covering: [(program record)]."""
    results = [r["modes"][mode] for r in covering
               if mode in r["modes"] and r["modes"][mode]["status"] != "n/a"]
    if not results:
        if no_derivative(name):
            return no_derivative(name)
        if covering and mode == "hvp":
            return "not covered (no second-order program)"
        return "not covered"
    ok = [r for r in results if r["status"] == "ok"]
    if len(ok) == len(results):
        return "✓"
    reasons = []
    for r in results:
        if r["status"] != "ok":
            s = _short_reason(r)
            if s not in reasons:
                reasons.append(s)
    more = f" (+{len(reasons) - 1} other reasons)" if len(reasons) > 1 else ""
    return f"{len(ok)}/{len(results)} ✓; {reasons[0]}{more}"


def build_markdown(results, programs):
    records = {r["name"]: r for r in results["programs"]}
    missing = [p.name for p in programs if p.name not in records]
    by_name = defaultdict(list)
    for p in programs:
        if p.name in records:
            for c in p.covers:
                by_name[c].append(records[p.name])
    modes = [m for m, _ in MODE_COLUMNS if m in results["modes"]]
    header = ["name", "programs"] + [label for m, label in MODE_COLUMNS if m in modes]

    def row(name, added):
        label = LABELS.get(name, f"`{name}`")
        label += " †" if added else ""
        n = len(by_name.get(name, []))
        return "| " + " | ".join([label, str(n) if n else "–"]
                                 + [cell(name, m, by_name.get(name, [])) for m in modes]) + " |"

    lines = [
        "# NumPy in `@njit` code: what enzpy differentiates",
        "",
        "<!-- generated by scripts/numpy_table.py from a scripts/numpy_probe.py run; "
        "do not edit -->",
        "",
        "Every NumPy function, ufunc, array method and attribute that Numba supports in "
        f"nopython mode, as listed on Numba's [Supported NumPy features]({NUMBA_PAGE}) page "
        f"(transcribed from {PAGE_SOURCE}; † marks names that copy predates, added from Numba "
        "0.68's typing registry), with enzpy's status in reverse mode, forward mode and "
        "second order (`enzpy.hvp`).",
        "",
        "The status comes from the programs of `tests/numpy_corpus.py` that cover the name "
        "(their `covers` field), run by `scripts/numpy_probe.py` against finite differences "
        "(checks in `tests/numpy_checks.py`): reverse mode is `autodiff(Reverse, ...)` for "
        "programs returning a float and `enzpy.vjp` for programs returning an array or a "
        "tuple; forward mode is a tangent along a random direction; second order is "
        "`enzpy.hvp` on the programs marked `hvp=True`.",
        "",
        "- ✓: every corpus program covering the name passes in that mode.",
        "- k/n ✓; reason: k of the n programs pass; the reason of the first failure, "
        "shortened (refused: enzpy raised `UnsupportedError`; wrong: the derivative differs "
        "from finite differences; error: another exception).",
        "- not covered: no corpus program uses the name, so enzpy's status is unknown "
        "(it may well work).",
        "- no derivative / zero derivative: the result is an integer, a boolean, a constant, "
        "random, or piecewise constant; nothing to differentiate (when no corpus program "
        "covers it).",
        "- not in NumPy 2: a name Numba's page lists that NumPy 2 removed (or never had).",
        "",
        "The corpus differentiates real (float32, float64) values. `np.linalg` functions and "
        "matrix products of complex matrices (Numba's complex LAPACK and BLAS) are refused "
        "with an `UnsupportedError` naming the call and its line (complex values elsewhere: "
        "see rows such as `np.complex128` and `np.angle`). `ndarray.view` and "
        "`np.frombuffer` to another dtype, where either dtype is a float, are refused by name "
        "(a shadow holds derivatives, not bits); to the array's own dtype they are views.",
        "",
        f"Probe run: {len(results['programs'])} programs, enzpy at "
        f"{results.get('enzpy_version', '?')}"
        + (f"; {len(missing)} corpus programs missing from the run" if missing else "") + ".",
        "",
    ]
    tally = defaultdict(int)
    for _, _, names in page_names():
        for n, _ in names:
            cells = [cell(n, m, by_name.get(n, [])) for m in ("reverse", "forward")]
            if not by_name.get(n):
                tally["no derivative" if no_derivative(n) else "not covered"] += 1
            elif all(c == "✓" for c in cells):
                tally["pass"] += 1
            else:
                tally["fail"] += 1
    lines += [
        f"Of the {sum(tally.values())} names listed: {tally['pass']} covered and passing in "
        f"reverse and forward mode, {tally['fail']} covered with a failure in one of them, "
        f"{tally['not covered']} not covered, {tally['no derivative']} with nothing to "
        "differentiate.", ""]
    current = None
    for section, group, names in page_names():
        if section != current:
            lines += [f"## {section}", ""]
            current = section
        lines += [f"### {group}", "", "| " + " | ".join(header) + " |",
                  "|" + "---|" * len(header)]
        lines += [row(n, a) for n, a in names]
        lines.append("")
    extra = extra_names(programs)
    if extra:
        lines += ["## Also covered by the corpus", "",
                  "Operators, indexing forms and Python containers the corpus programs use, "
                  "which the page does not list as NumPy functions.", "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += [row(n, False) for n in extra]
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--results", metavar="JSON", help="a saved `numpy_probe.py --json` run")
    src.add_argument("--run", action="store_true", help="run scripts/numpy_probe.py first")
    parser.add_argument("--jobs", type=int, default=2, help="probe workers (with --run)")
    parser.add_argument("--json", default=None,
                        help="with --run: where the probe writes its results (default: a "
                             "temporary file)")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "numpy.md"),
                        help="output file ('-' for stdout)")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    if args.run:
        import tempfile
        path = args.json or os.path.join(tempfile.mkdtemp(), "numpy_probe.json")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "numpy_probe.py"),
                        "--jobs", str(args.jobs), "--json", path], check=True)
    else:
        path = args.results
    with open(path) as fh:
        results = json.load(fh)
    from tests.numpy_corpus import PROGRAMS
    text = build_markdown(results, PROGRAMS)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w") as fh:
            fh.write(text)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
