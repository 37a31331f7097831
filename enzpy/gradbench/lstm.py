"""lstm (ADBench LSTM with diagonal weights): element-wise gates on arrays of the hidden
size, a "+2" log-sum-exp of the prediction; the gradient with respect to main_params and
extra_params by one enzpy reverse-mode call."""
import numpy as np
from numba import njit

from enzpy import Const, Duplicated, Reverse, autodiff

from ._common import InputError, array, tofloat, tolist

FUNCTIONS = ("objective", "jacobian")


@njit
def sigmoid(x):
    # (the logistic function through tanh: 1 / (1 + exp(-x)) overflows for large -x, and its
    # derivative then multiplies 0 by inf)
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


@njit
def lstm_cell(weight, bias, hidden, cell, inp):
    b = hidden.shape[0]
    forget = sigmoid(inp * weight[:b] + bias[:b])
    ingate = sigmoid(hidden * weight[b:2 * b] + bias[b:2 * b])
    outgate = sigmoid(inp * weight[2 * b:3 * b] + bias[2 * b:3 * b])
    change = np.tanh(hidden * weight[3 * b:] + bias[3 * b:])
    cell = cell * forget + ingate * change
    hidden = outgate * np.tanh(cell)
    return hidden, cell


@njit
def lstm_objective(main_params, extra_params, state, sequence):
    layers = main_params.shape[0] // 2
    c, b = sequence.shape
    state = state.copy()
    total = 0.0
    for t in range(c - 1):
        y = sequence[t] * extra_params[0]
        for j in range(layers):
            hidden, cell = lstm_cell(main_params[2 * j], main_params[2 * j + 1],
                                     state[2 * j], state[2 * j + 1], y)
            state[2 * j] = hidden
            state[2 * j + 1] = cell
            y = hidden
        ypred = y * extra_params[1] + extra_params[2]
        lse = np.log(np.sum(np.exp(ypred)) + 2.0)
        total += np.sum(sequence[t + 1] * (ypred - lse))
    return -total / ((c - 1) * b)


def gradient(main_params, extra_params, state, sequence):
    dmain, dextra = np.zeros_like(main_params), np.zeros_like(extra_params)
    autodiff(Reverse, lstm_objective, Duplicated(main_params, dmain),
             Duplicated(extra_params, dextra), Const(state), Const(sequence))
    return np.concatenate((dmain.ravel(), dextra.ravel()))


def prepare(function, inp):
    main = array(inp, "main_params", (None, None))
    if main.shape[0] % 2 or main.shape[1] % 4 or main.size == 0:
        raise InputError(f"'main_params' must be float[2l][4b], got shape {main.shape}")
    layers, b = main.shape[0] // 2, main.shape[1] // 4
    extra = array(inp, "extra_params", (3, b))
    state = array(inp, "state", (2 * layers, b))
    sequence = array(inp, "sequence", (None, b))
    if sequence.shape[0] < 2:
        raise InputError("'sequence' must hold at least 2 characters")
    args = (main, extra, state, sequence)
    if function == "objective":
        return (lambda: lstm_objective(*args)), tofloat
    return (lambda: gradient(*args)), tolist


def _tiny():
    rng = np.random.default_rng(0)
    l, b, c = 1, 2, 3
    return {"main_params": rng.uniform(size=(2 * l, 4 * b)).tolist(),
            "extra_params": rng.uniform(size=(3, b)).tolist(),
            "state": rng.uniform(size=(2 * l, b)).tolist(),
            "sequence": (rng.uniform(size=(c, b)) > 0.5).astype(float).tolist()}


WARMUP = [(f, _tiny()) for f in FUNCTIONS]
