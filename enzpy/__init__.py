"""enzpy: reverse- and forward-mode automatic differentiation of Numba-compiled code.

Numba lowers the function to LLVM IR; enzpy differentiates that IR in the style
of Enzyme and compiles the derivative with llvmlite.
"""
from .api import (Active, Const, Duplicated, Forward, ForwardWithPrimal, Reverse,
                  ReverseWithPrimal, autodiff, build_report, cache_clear, cache_info)
from .arguments import zeros_like
from .userrules import RuleCheck, check_rule, clear_rules, defjvp, defvjp, inactive
from .check import GradientCheck, check_gradient, gradient
from .errors import InternalError, UnsupportedError
from .higher import hessian, hvp, jacobian, vjp
from . import jitted  # noqa: F401  (autodiff inside @njit code)
from . import linalg  # noqa: F401  (the rules of NumPy's linear algebra)
from . import ufuncs  # noqa: F401  (rules of NumPy functions that branch on ties)

__all__ = ["autodiff", "Reverse", "ReverseWithPrimal", "Forward", "ForwardWithPrimal",
           "Active", "Const", "Duplicated", "UnsupportedError", "InternalError", "cache_info",
           "cache_clear", "build_report", "gradient", "check_gradient", "GradientCheck", "hvp", "hessian",
           "jacobian", "vjp", "zeros_like", "defvjp", "defjvp", "inactive", "clear_rules",
           "check_rule", "RuleCheck"]
__version__ = "0.1.0"
