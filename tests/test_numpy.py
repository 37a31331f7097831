"""enzpy on the NumPy corpus (``numpy_corpus.py``): every program in reverse mode (``vjp``
for programs returning an array or a tuple) and forward mode, and ``hvp`` for the programs
marked hvp=True, each against finite differences (``numpy_checks.py``, shared with
``scripts/numpy_probe.py``).

The regular run is a subset chosen from the registry alone, so it is the same on every
machine: every NumPy name of the corpus (``Program.covers``) at least once in reverse
mode, every program tagged "composite", forward mode on about a quarter of those
(``_forward_subset``), and about 28 hvp programs spread over the corpus, preferring
float64 C-contiguous variants and avoiding the few programs whose derivative builds take
tens of seconds when a cheaper program covers the same names. The programs of
``np.linalg.lstsq``, ``qr`` and ``pinv`` (the corpus's costliest builds) are left to
``test_linalg_rules.py``, which checks those rules in reverse and forward mode on wide, tall,
square and rank-deficient matrices. A program's modes run one after another in one test
worker, sharing Numba's compilation of the program. ``ENZPY_SLOW=1`` runs the whole corpus.
A case that enzpy refuses or gets wrong fails, with the reason.
"""
import os

import pytest

from numpy_checks import check
from numpy_corpus import PROGRAMS

SLOW = bool(os.environ.get("ENZPY_SLOW"))
BY_NAME = {p.name: p for p in PROGRAMS}
ORDER = {p.name: i for i, p in enumerate(PROGRAMS)}
HVP_TARGET = 28

# Variants the regular run prefers not to pick: other dtypes and layouts (the slow run has
# them), and programs measured at 20 s or more of CPU for their derivative builds (the
# LAPACK-heavy ones; a cheaper program covers the same names).
OTHER_VARIANT_TAGS = ("float32", "fortran", "strided")
EXPENSIVE = frozenset({
    "cholesky_ret_f64", "svd_values_ret_f64", "pinv_ret_f64", "eigvalsh_ret_f64",
    "solve_ret_f64", "normalize_rows_ret_2d_f64",
})
# Second-order builds of a minute or more (their reverse and forward modes run regularly).
EXPENSIVE_HVP = frozenset({"gp_nlml_f64", "attention_f64", "roots_cubic_f64"})   # (eig: 90 s)
# LAPACK's second order costs 20-90 s per program: the regular run keeps two.
LINALG_HVP = frozenset({"inv_f64", "det_f64"})
# Checked in every mode by test_linalg_rules.py (see the docstring).
LINALG_ELSEWHERE = frozenset({"np.linalg.lstsq", "np.linalg.qr", "np.linalg.pinv"})


def _preference(p, already):
    """Smaller is preferred: float64 C-contiguous, cheap, covering many names not yet
    covered, earlier in the corpus."""
    return (sum(t in p.tags for t in OTHER_VARIANT_TAGS), p.name in EXPENSIVE,
            -len(set(p.covers) - already), ORDER[p.name])


def _cover(candidates, chosen):
    """Add to ``chosen`` (a list) one preferred program per name of ``candidates``'s covers
    that no chosen program covers yet, names taken in corpus order."""
    covered = {c for p in chosen for c in p.covers}
    for p in candidates:
        for name in p.covers:
            if name in covered:
                continue
            pick = min((q for q in candidates if name in q.covers and q not in chosen),
                       key=lambda q: _preference(q, covered))
            chosen.append(pick)
            covered.update(pick.covers)
    return chosen


def regular_subset():
    """(programs run in reverse and forward mode, programs run in hvp) of the regular run."""
    programs = [p for p in PROGRAMS if not LINALG_ELSEWHERE & set(p.covers)]
    first = _cover(programs, [p for p in programs if "composite" in p.tags])
    hvp_programs = [p for p in programs if p.hvp and p.name not in EXPENSIVE_HVP and
                    ("linalg" not in p.tags or p.name in LINALG_HVP)]
    # one program per name, thinned evenly along the corpus to about HVP_TARGET (the
    # slow run covers every name)
    second = _cover(hvp_programs, [])
    second = second[::-(-len(second) // HVP_TARGET)]
    order = lambda ps: sorted(ps, key=lambda q: ORDER[q.name])     # noqa: E731
    return order(first), order(second)


def _forward_subset(programs):
    """Forward mode in the regular run: the composites, the linear-algebra programs
    (matrix-level rules of their own in forward mode) and every sixth remaining
    program in corpus order. The rest shares its forward-mode code (the
    instruction-level transformation and the scalar rules, which the scalar corpus
    checks in forward mode one by one) with those; ENZPY_SLOW=1 runs them all."""
    if SLOW:
        return programs
    own = [p for p in programs if "composite" in p.tags or "linalg" in p.tags]
    others = [p for p in programs if p not in own]
    return own + others[::8]


def cases():
    if SLOW:
        first, second = PROGRAMS, [p for p in PROGRAMS if p.hvp]
    else:
        first, second = regular_subset()
    hvp = {p.name for p in second}
    forward = {p.name for p in _forward_subset(first)}
    out = []
    for p in PROGRAMS:                 # corpus order; a program's modes one after another
        if p in first:
            out.append((p.name, "reverse"))
        if p.name in forward:
            out.append((p.name, "forward"))
        if p.name in hvp:
            out.append((p.name, "hvp"))
    return out


# What enzpy still refuses, with what the refusal must say (docs/numpy.md lists them): the
# test fails if one starts to pass (move it out of here) or stops naming the construct.
REFUSED = {
    ("dict_of_arrays_1d_f64", "hvp"): "second-order derivatives through a dictionary",
}


def check_case(name, mode):
    status, detail = check(BY_NAME[name], mode)
    refusal = REFUSED.get((name, mode))
    if refusal is not None:
        assert status == "refused" and refusal in detail, f"{name} [{mode}]: {status}: {detail}"
        return
    assert status == "ok", f"{name} [{mode}]: {status}: {detail}"


@pytest.mark.parametrize("name,mode", cases(), ids=lambda v: v)
def test_numpy_program(name, mode):
    check_case(name, mode)
