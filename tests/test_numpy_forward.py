"""The NumPy corpus in forward mode (see test_numpy.py, which runs reverse mode and hvp)."""
import pytest

from test_numpy import cases, check_case


@pytest.mark.parametrize("name,mode", [c for c in cases() if c[1] == "forward"],
                         ids=lambda v: v)
def test_numpy_program_forward(name, mode):
    check_case(name, mode)
