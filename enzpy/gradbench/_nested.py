"""Nested AD for the particle and saddle evals, and the workaround they use today.

Both evals name their functions ``rr``, ``ff``, ``fr``, ``rf``: the (outer, inner) AD modes.
The *inner* derivative is a gradient taken inside ``@njit`` code (``autodiff(Reverse, ...)``,
or one ``autodiff(Forward, ...)`` per coordinate) in every step of a simulation (particle) or
of an inner gradient ascent (saddle); the *outer* derivative is ``autodiff(Reverse, ...)``
(one pass) or ``autodiff(Forward, ...)`` (one pass per coordinate) of that whole computation,
called by the suite's gradient-descent rule (``_gd.py``).

Two forms of the inner gradient exist in each eval module:

``plain``
    nested AD as a user writes it: the outer ``autodiff`` differentiates ``@njit`` code that
    calls ``autodiff``. enzpy refuses it today, in all four combinations: the inner derivative
    is machine code called by address, an indirect call with active arguments
    (``UnsupportedError``; ``scripts/gradbench_repro/nested_autodiff.py``). Each module tries
    it once (``choose_form``) and uses it as soon as enzpy accepts it.

``rules`` (the workaround, used by all four modes of both evals while ``plain`` is refused)
    the same inner gradient function, called through a small ``@njit`` function of scalars
    that carries an ``enzpy.defvjp`` rule (used by an outer ``Reverse``) and an
    ``enzpy.defjvp`` rule (used by an outer ``Forward``). Both rules need the second
    derivative of the inner objective times a vector; it comes from ``enzpy.hvp`` (enzpy's
    reverse-over-forward mode) of the objective packed into one array (``make_hvp``), called
    from the rule through ``numba.objmode``. So every derivative still comes from enzpy and
    none is written by hand, but:

    - the inner mode (``r``/``f``) is the mode of the inner gradient the primal computation
      runs; the outer derivative's second-order part is always enzpy's reverse-over-forward
      ``hvp``, whatever the inner mode;
    - every inner gradient the outer derivative goes through costs one ``objmode`` round trip
      to Python (about 25 µs), so these evals measure the workaround, not nested AD;
    - the rules take and return scalars (a particle's position and the saddle's points are two
      numbers each), so the rule's signature stays that of the eval.
"""
import sys

import numba
from numba import njit

import enzpy

_packed = {}          # name -> @njit function of one array, the inner objective packed
_forms = {}           # eval name -> "plain" or "rules"


def packed_hvp(name, z, v):
    """Hessian of the packed objective ``name`` at ``z`` times ``v``, by ``enzpy.hvp``."""
    return enzpy.hvp(_packed[name], z, v)


def make_hvp(name, packed):
    """An ``@njit`` ``hvp(z, v)`` of ``packed`` (a scalar ``@njit`` function of one float64
    array) that rules can call: ``enzpy.hvp`` through ``numba.objmode``."""
    _packed[name] = packed

    @njit
    def hvp(z, v):
        with numba.objmode(out="float64[:]"):
            out = packed_hvp(name, z, v)
        return out
    return hvp


def choose_form(name, try_plain):
    """``"plain"`` if ``try_plain()`` (one run of the plain form) succeeds, ``"rules"`` if
    enzpy refuses it; decided once per process and eval."""
    if name not in _forms:
        try:
            try_plain()
            _forms[name] = "plain"
        except enzpy.UnsupportedError as exc:
            print(f"enzpy.gradbench.{name}: nested autodiff is refused ({exc}); using the "
                  f"defvjp/defjvp + enzpy.hvp workaround", file=sys.stderr)
            _forms[name] = "rules"
    return _forms[name]
