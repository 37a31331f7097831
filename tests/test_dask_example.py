"""examples/dask_fit.py on a 2-worker local Dask cluster (worker processes):
the summed partition gradients equal the single-process gradient, and a warm
cluster loads the derivative from the shared persistent cache instead of
building it."""
import os
import sys

import numpy as np
import pytest
from dask.distributed import Client, LocalCluster

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples"))
import dask_fit  # noqa: E402


def _cluster():
    return LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                        dashboard_address=None)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    # a cache of this module's own: the first cluster starts cold
    saved = os.environ["ENZPY_CACHE_DIR"]
    os.environ["ENZPY_CACHE_DIR"] = str(tmp_path_factory.mktemp("dask-cache"))
    dask_fit._pickle_by_value()
    X, _ = dask_fit.make_data(600, K=3, seed=3)
    yield X, dask_fit.initial_theta(X, 3)
    os.environ["ENZPY_CACHE_DIR"] = saved


def test_cluster_gradient_matches_one_process_and_a_warm_cluster_builds_nothing(data):
    """(The warm cluster then fits a mixture.)"""
    X, theta = data
    K, partitions = 3, 4
    with _cluster() as cluster, Client(cluster) as client:
        value, grad, cold = dask_fit.cluster_gradient(client, theta, X, K, partitions)
    assert "stored" in cold                       # a worker built and saved it
    with _cluster() as cluster, Client(cluster) as client:
        warm_value, warm_grad, warm = dask_fit.cluster_gradient(client, theta, X, K,
                                                                partitions)
        assert set(warm) <= {"loaded", "reused"}, warm
        assert len(client.scheduler_info()["workers"]) == 2
        sample, (_, means, _) = dask_fit.make_data(3000, K=3, seed=0)
        fitted, history = dask_fit.fit(client, sample, 3, partitions=4, maxiter=60)
    assert history[-1][0] < history[0][0]
    fitted = fitted[3:9].reshape(3, 2)
    np.testing.assert_allclose(fitted[np.argsort(fitted[:, 0])],
                               means[np.argsort(means[:, 0])], atol=0.15)
    local_value, local_grad = dask_fit.local_gradient(theta, X, K, partitions)
    assert value == pytest.approx(local_value, rel=1e-12)
    np.testing.assert_allclose(grad, local_grad, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(warm_grad, local_grad, rtol=1e-10, atol=1e-10)
    assert warm_value == pytest.approx(local_value, rel=1e-12)


def test_gradient_of_the_mixture_matches_finite_differences(data):
    X, theta = data
    X = X[:50]
    _, grad = dask_fit.local_gradient(theta, X, 3, 2)
    rng = np.random.default_rng(0)
    for _ in range(3):
        v = rng.standard_normal(theta.size)
        h = 1e-6
        fd = (dask_fit.gmm_nll(theta + h * v, X, 3) - dask_fit.gmm_nll(theta - h * v, X, 3)) \
            / (2 * h)
        assert grad @ v == pytest.approx(fd, rel=1e-6, abs=1e-6)
