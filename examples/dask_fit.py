"""Fit a Gaussian mixture to data split across Dask workers, with enzpy gradients.

Each partition's negative log-likelihood and its gradient are computed on a
worker (``autodiff`` of an ``@njit`` function), the driver sums them and takes
an L-BFGS step. The workers share enzpy's persistent derivative cache
(``ENZPY_CACHE_DIR``, by default the user's cache folder): the first worker to
need the derivative builds and saves it, the others and every later cluster
load it, so a warm cluster builds nothing.

    pip install "dask[distributed]" scipy
    python examples/dask_fit.py [--workers 2] [--partitions 4] [--points 4000]
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np
from numba import njit

import enzpy
from enzpy import Const, Duplicated, ReverseWithPrimal, autodiff

LOG_2PI = math.log(2.0 * math.pi)


@njit
def gmm_nll(theta, X, K):
    """Negative log-likelihood of the rows of X under a K-component Gaussian
    mixture with diagonal covariances; ``theta`` holds the K mixture logits,
    then the K x d means, then the K x d log standard deviations."""
    n, d = X.shape
    logits = theta[:K]
    means = theta[K:K + K * d].reshape(K, d)
    log_sigmas = theta[K + K * d:].reshape(K, d)
    top = np.max(logits)
    log_norm = top + np.log(np.sum(np.exp(logits - top)))
    component = np.empty(K)
    total = 0.0
    for i in range(n):
        for k in range(K):
            z = (X[i] - means[k]) * np.exp(-log_sigmas[k])
            component[k] = logits[k] - log_norm - np.sum(0.5 * z * z + log_sigmas[k]) \
                - 0.5 * d * LOG_2PI
        best = np.max(component)
        total -= best + np.log(np.sum(np.exp(component - best)))
    return total


def partition_gradient(theta, X, K):
    """(value, gradient, how the derivative was obtained) of one partition's
    negative log-likelihood; runs on a worker."""
    grad = np.zeros_like(theta)
    _, value = autodiff(ReverseWithPrimal, gmm_nll, Duplicated(theta, grad), Const(X),
                        Const(K))
    return value, grad, enzpy.build_report(gmm_nll)[-1].cache


def make_data(points, K=3, d=2, seed=0):
    """Samples of a known mixture, and that mixture's parameters."""
    rng = np.random.default_rng(seed)
    means = rng.uniform(-4.0, 4.0, (K, d))
    sigmas = rng.uniform(0.4, 1.0, (K, d))
    weights = rng.dirichlet(np.full(K, 4.0))
    labels = rng.choice(K, size=points, p=weights)
    X = means[labels] + sigmas[labels] * rng.standard_normal((points, d))
    return X, (weights, means, sigmas)


def initial_theta(X, K, seed=1):
    rng = np.random.default_rng(seed)
    d = X.shape[1]
    means = X[rng.choice(len(X), K, replace=False)]
    return np.concatenate([np.zeros(K), means.ravel(), np.zeros(K * d)])


def fit(client, X, K=3, partitions=4, maxiter=40):
    """L-BFGS on the summed partition gradients; returns (theta, history of
    (value, build statuses per round))."""
    from scipy.optimize import minimize
    parts = client.scatter(np.array_split(X, partitions))
    history = []

    def objective(theta):
        futures = [client.submit(partition_gradient, theta, part, K, pure=False)
                   for part in parts]
        results = client.gather(futures)
        value = sum(r[0] for r in results)
        history.append((value, sorted({r[2] for r in results})))
        return value / len(X), sum(r[1] for r in results) / len(X)

    theta0 = initial_theta(X, K)
    result = minimize(objective, theta0, jac=True, method="L-BFGS-B",
                      options={"maxiter": maxiter})
    return result.x, history


def local_gradient(theta, X, K, partitions):
    """The same sum, in this process: what the cluster's gradient must equal."""
    grad = np.zeros_like(theta)
    value = 0.0
    for part in np.array_split(X, partitions):
        v, g, _ = partition_gradient(theta, part, K)
        value, grad = value + v, grad + g
    return value, grad


def cluster_gradient(client, theta, X, K, partitions):
    futures = [client.submit(partition_gradient, theta, part, K, pure=False)
               for part in np.array_split(X, partitions)]
    results = client.gather(futures)
    return (sum(r[0] for r in results), sum(r[1] for r in results),
            sorted({r[2] for r in results}))


def _pickle_by_value():
    """Workers rebuild this module's functions from their code: they need not
    import this file (it is usually not on their path)."""
    if __name__ != "__main__":
        import cloudpickle
        cloudpickle.register_pickle_by_value(sys.modules[__name__])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--points", type=int, default=4000)
    parser.add_argument("--maxiter", type=int, default=40)
    args = parser.parse_args(argv)

    from dask.distributed import Client, LocalCluster
    _pickle_by_value()
    K = 3
    X, (weights, means, sigmas) = make_data(args.points, K)
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        start = time.perf_counter()
        theta, history = fit(client, X, K, args.partitions, args.maxiter)
        seconds = time.perf_counter() - start
    print(f"{len(history)} gradient rounds on {args.workers} workers in {seconds:.1f} s; "
          f"derivative on the workers, first round: {', '.join(history[0][1])}")
    print(f"negative log-likelihood per point: {history[0][0] / len(X):.4f} -> "
          f"{history[-1][0] / len(X):.4f}")
    fitted = theta[K:K + 2 * K].reshape(K, 2)
    order = np.argsort(fitted[:, 0])
    print("fitted means:", np.round(fitted[order], 2).tolist())
    print("true means:  ", np.round(means[np.argsort(means[:, 0])], 2).tolist())


if __name__ == "__main__":
    main()
