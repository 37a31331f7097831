"""kmeans: the sum over points of the squared distance to the nearest centroid (sums of
squared differences); ``dir = J / H`` with J the gradient (enzpy reverse mode) and H the
diagonal of the Hessian, which is diagonal, so H = Hessian times ones (``enzpy.hvp``)."""
import numpy as np
from numba import njit

import enzpy

from ._common import InputError, array, tofloat, tolist

FUNCTIONS = ("cost", "dir")


@njit
def kmeans_cost(centroids, points):
    # (distances as sums of squared differences: expanded into |p|^2 + |c|^2 - 2 p.c
    # they cancel for data far from the origin, and the loops are faster anyway)
    cost = 0.0
    for i in range(points.shape[0]):
        best = np.inf
        for j in range(centroids.shape[0]):
            d = 0.0
            for k in range(points.shape[1]):
                diff = points[i, k] - centroids[j, k]
                d += diff * diff
            best = min(best, d)
        cost += best
    return cost


def kmeans_dir(centroids, points):
    J = enzpy.gradient(kmeans_cost, centroids, points)
    H = enzpy.hvp(kmeans_cost, centroids, np.ones_like(centroids), points)
    return J / H


def prepare(function, inp):
    points = array(inp, "points", (None, None))
    centroids = array(inp, "centroids", (None, points.shape[1]))
    if centroids.shape[0] == 0 or points.shape[0] == 0:
        raise InputError("'points' and 'centroids' must not be empty")
    if function == "cost":
        return (lambda: kmeans_cost(centroids, points)), tofloat
    return (lambda: kmeans_dir(centroids, points)), tolist


_P = [[0.1, 0.2], [0.4, 0.1], [0.9, 0.8], [0.7, 0.6], [0.2, 0.3]]
WARMUP = [(f, {"points": _P, "centroids": _P[-2:]}) for f in FUNCTIONS]
