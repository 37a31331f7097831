"""JAX and PyTorch implementations of the GradBench evals, written for the comparison in
``scripts/bench_gradbench.py`` (the way those libraries are used: ``jit(grad)``, ``jacrev``/
``jacfwd`` with ``vmap``; ``torch.func``). Each ``make_<eval>(inp)`` returns
``{"objective": call, "derivative": call, "to_json": {...}}``, or None where the library is
not installed; calls return finished results (JAX's are blocked on).

Not implemented here: det (recursive expansion by minors is traced call by call: e*ell!
calls), hello, particle and saddle (data-dependent optimization loops); the table marks them.
"""
from __future__ import annotations

import math

import numpy as np

try:
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
except ImportError:                                       # pragma: no cover
    jax = jnp = None

try:
    import torch
    import torch.func
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
except ImportError:                                       # pragma: no cover
    torch = None


def _block(x):
    return jax.block_until_ready(x)


def _tolist(x):
    return np.asarray(x).tolist()


# -- JAX --------------------------------------------------------------------------------------
def jax_lse(inp):
    x = jnp.asarray(inp["x"])

    def f(x):
        a = jnp.max(x)
        return a + jnp.log(jnp.sum(jnp.exp(x - a)))
    fo, fg = jax.jit(f), jax.jit(jax.grad(f))
    return {"objective": lambda: _block(fo(x)), "derivative": lambda: _block(fg(x)),
            "to_json": {"objective": float, "derivative": _tolist}}


def jax_llsq(inp):
    x, n = jnp.asarray(inp["x"]), inp["n"]

    def f(x):
        t = -1.0 + 2.0 * jnp.arange(n) / (n - 1)
        T = t[:, None] ** jnp.arange(x.shape[0])
        r = jnp.sign(t) - T @ x
        return 0.5 * r @ r
    fo, fg = jax.jit(f), jax.jit(jax.grad(f))
    return {"objective": lambda: _block(fo(x)), "derivative": lambda: _block(fg(x)),
            "to_json": {"objective": float, "derivative": _tolist}}


def jax_ode(inp):
    x, s = jnp.asarray(inp["x"]), inp["s"]

    def rhs(x, y):
        return jnp.concatenate((x[:1], x[1:] * y[:-1]))

    def solve(x):
        h = 2.0 / s

        def step(_, y):
            k1 = rhs(x, y)
            k2 = rhs(x, y + h / 2 * k1)
            k3 = rhs(x, y + h / 2 * k2)
            k4 = rhs(x, y + h * k3)
            return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return jax.lax.fori_loop(0, s, step, jnp.zeros_like(x))
    fo, fg = jax.jit(solve), jax.jit(jax.grad(lambda x: solve(x)[-1]))
    return {"objective": lambda: _block(fo(x)), "derivative": lambda: _block(fg(x)),
            "to_json": {"objective": _tolist, "derivative": _tolist}}


def _gmm_parts(xp, d):
    rows, cols = np.tril_indices(d, -1)
    order = np.lexsort((rows, cols))                # column by column
    return rows[order], cols[order]


def jax_gmm(inp):
    d, k, n, m, gamma = inp["d"], inp["k"], inp["n"], inp["m"], inp["gamma"]
    args = tuple(jnp.asarray(inp[a]) for a in ("alpha", "mu", "q", "l"))
    x = jnp.asarray(inp["x"])
    rows, cols = _gmm_parts(jnp, d)
    nn = d + m + 1
    const = (-n * d / 2 * math.log(2 * math.pi)
             + k * (nn * d * (math.log(gamma) - 0.5 * math.log(2))
                    - float(jax.scipy.special.multigammaln(nn / 2, d))))

    def f(alpha, mu, q, l):
        Q = jnp.zeros((k, d, d)).at[:, rows, cols].set(l) + jax.vmap(jnp.diag)(jnp.exp(q))
        z = jnp.einsum("kij,nkj->nki", Q, x[:, None, :] - mu[None])
        beta = alpha + q.sum(1) - 0.5 * (z * z).sum(-1)
        return (const + jax.nn.logsumexp(beta, axis=1).sum() - n * jax.nn.logsumexp(alpha)
                - 0.5 * gamma ** 2 * (jnp.sum(jnp.exp(q) ** 2) + jnp.sum(l ** 2))
                + m * q.sum())
    fo, fg = jax.jit(f), jax.jit(jax.grad(f, argnums=(0, 1, 2, 3)))
    names = ("alpha", "mu", "q", "l")
    return {"objective": lambda: _block(fo(*args)), "derivative": lambda: _block(fg(*args)),
            "to_json": {"objective": float,
                        "derivative": lambda g: {a: _tolist(v) for a, v in zip(names, g)}}}


def jax_kmeans(inp):
    P, C = jnp.asarray(inp["points"]), jnp.asarray(inp["centroids"])

    def cost(C):
        D = (P ** 2).sum(1)[:, None] + (C ** 2).sum(1)[None] - 2.0 * P @ C.T
        return D.min(axis=1).sum()

    def direction(C):
        J = jax.grad(cost)(C)
        _, H = jax.jvp(jax.grad(cost), (C,), (jnp.ones_like(C),))
        return J / H
    fo, fg = jax.jit(cost), jax.jit(direction)
    return {"objective": lambda: _block(fo(C)), "derivative": lambda: _block(fg(C)),
            "to_json": {"objective": float, "derivative": _tolist}}


def jax_lstm(inp):
    main, extra, state, seq = (jnp.asarray(inp[a]) for a in
                               ("main_params", "extra_params", "state", "sequence"))
    layers, b = main.shape[0] // 2, main.shape[1] // 4

    def f(main, extra):
        def step(st, t):
            inp_t, target = t
            y = inp_t * extra[0]
            new = []
            for j in range(layers):
                W, B = main[2 * j].reshape(4, b), main[2 * j + 1].reshape(4, b)
                h, c = st[2 * j], st[2 * j + 1]
                fg = jax.nn.sigmoid(y * W[0] + B[0])
                ig = jax.nn.sigmoid(h * W[1] + B[1])
                og = jax.nn.sigmoid(y * W[2] + B[2])
                g = jnp.tanh(h * W[3] + B[3])
                c = c * fg + ig * g
                h = og * jnp.tanh(c)
                new += [h, c]
                y = h
            ypred = y * extra[1] + extra[2]
            lse = jnp.log(jnp.sum(jnp.exp(ypred)) + 2.0)
            return jnp.stack(new), jnp.sum(target * (ypred - lse))
        _, terms = jax.lax.scan(step, state, (seq[:-1], seq[1:]))
        return -terms.sum() / ((seq.shape[0] - 1) * b)
    fo = jax.jit(f)
    fg = jax.jit(lambda m, e: jnp.concatenate([g.ravel() for g in
                                               jax.grad(f, argnums=(0, 1))(m, e)]))
    return {"objective": lambda: _block(fo(main, extra)),
            "derivative": lambda: _block(fg(main, extra)),
            "to_json": {"objective": float, "derivative": _tolist}}


def _ba_data(inp):
    n, m, p = inp["n"], inp["m"], inp["p"]
    cams = np.tile(np.asarray(inp["cam"], float), (n, 1))
    X = np.tile(np.asarray(inp["x"], float), (m, 1))
    w = np.full(p, float(inp["w"]))
    feats = np.tile(np.asarray(inp["feat"], float), (p, 1))
    return n, m, p, cams, X, w, feats, np.arange(p) % n, np.arange(p) % m


def _ba_structure(n, m, p, ci, pi):
    per = np.concatenate((np.zeros(11, int), np.ones(3, int), [2]))
    offs = np.concatenate((np.arange(11), np.arange(3), [0]))
    base = np.stack((11 * ci, 11 * n + 3 * pi, 11 * n + 3 * m + np.arange(p)), axis=1)
    cols_obs = base[:, per] + offs                          # (p, 15)
    cols = np.concatenate((np.repeat(cols_obs, 2, axis=0).ravel(), 11 * n + 3 * m +
                           np.arange(p)))
    rows = np.concatenate((np.arange(2 * p + 1) * 15, 30 * p + 1 + np.arange(p)))
    return rows, cols


def _ba_json(rows, cols, vals):
    sl = lambda a: np.concatenate((np.asarray(a)[:30], np.asarray(a)[-1:])).tolist()  # noqa
    return {"rows": sl(rows), "cols": sl(cols), "vals": sl(vals)}


def _ba_obj_json(out):
    reproj, werr = (np.asarray(o) for o in out)
    return {"reproj_error": {"elements": reproj[0].tolist(), "repeated": int(reproj.shape[0])},
            "w_err": {"element": float(werr[0]), "repeated": int(werr.shape[0])}}


def jax_ba(inp):
    n, m, p, cams, X, w, feats, ci, pi = _ba_data(inp)
    cams, X, w, feats = map(jnp.asarray, (cams, X, w, feats))
    rows, cols = _ba_structure(n, m, p, ci, pi)

    def rodrigues(r, X):
        sq = jnp.sum(r ** 2)
        safe = jnp.where(sq != 0, sq, 1.0)
        theta = jnp.sqrt(safe)
        wv = r / theta
        rot = (X * jnp.cos(theta) + jnp.cross(wv, X) * jnp.sin(theta)
               + wv * (wv @ X) * (1 - jnp.cos(theta)))
        return jnp.where(sq != 0, rot, X + jnp.cross(r, X))

    def reproj(cam, X, w, feat):
        Xc = rodrigues(cam[:3], X - cam[3:6])
        proj = Xc[:2] / Xc[2]
        rsq = proj @ proj
        return w * (proj * (1 + cam[9] * rsq + cam[10] * rsq * rsq) * cam[6] + cam[7:9] - feat)

    def objective(cams, X, w, feats):
        return (jax.vmap(reproj)(cams[ci], X[pi], w, feats), 1 - w ** 2)

    def jacobian(cams, X, w, feats):
        Jc, JX, Jw = jax.vmap(jax.jacrev(reproj, argnums=(0, 1, 2)))(cams[ci], X[pi], w, feats)
        blocks = jnp.concatenate((Jc, JX, Jw[:, :, None]), axis=2)    # (p, 2, 15)
        dw = jax.vmap(jax.grad(lambda v: 1 - v ** 2))(w)
        return jnp.concatenate((blocks.ravel(), dw))
    fo, fg = jax.jit(objective), jax.jit(jacobian)
    return {"objective": lambda: _block(fo(cams, X, w, feats)),
            "derivative": lambda: _block(fg(cams, X, w, feats)),
            "to_json": {"objective": _ba_obj_json,
                        "derivative": lambda v: _ba_json(rows, cols, v)}}


def _ht_data(inp):
    model = inp["data"]["model"]
    return (np.asarray(inp["theta"], float), np.asarray(inp["us"], float),
            np.asarray(model["parents"]), np.asarray(model["base_relatives"], float),
            np.asarray(model["inverse_base_absolutes"], float),
            np.asarray(model["base_positions"], float), np.asarray(model["weights"], float),
            np.asarray(model["triangles"]), np.asarray(inp["data"]["correspondences"]),
            np.asarray(inp["data"]["points"], float), bool(model["is_mirrored"]))


def _ht_pose_index():
    """(bone row, component) -> theta index for the finger parameters (-1: fixed 0)."""
    idx = -np.ones((25, 3), int)
    idx[0], idx[2] = [0, 1, 2], [3, 4, 5]
    i_theta, i_pose = 6, 5
    for _ in range(5):
        for i in range(3):
            idx[i_pose, 0] = i_theta
            i_theta += 1
            if i == 0:
                idx[i_pose, 1] = i_theta
                i_theta += 1
            i_pose += 1
        i_pose += 1
    return idx


def _ht_functions(xp, ops):
    """The ht objective over an array namespace (jnp or torch); ``ops`` adapts the few
    calls that differ."""
    idx = _ht_pose_index()

    def euler(t):
        tx, tz, ty = t[0], t[1], t[2]
        one, zero = xp.ones_like(tx), xp.zeros_like(tx)
        c, s = xp.cos, xp.sin
        Rx = ops["stack"]([ops["stack"]([one, zero, zero]), ops["stack"]([zero, c(tx), -s(tx)]),
                           ops["stack"]([zero, s(tx), c(tx)])])
        Ry = ops["stack"]([ops["stack"]([c(ty), zero, s(ty)]), ops["stack"]([zero, one, zero]),
                           ops["stack"]([-s(ty), zero, c(ty)])])
        Rz = ops["stack"]([ops["stack"]([c(tz), -s(tz), zero]), ops["stack"]([s(tz), c(tz), zero]),
                           ops["stack"]([zero, zero, one])])
        return Rz @ Ry @ Rx

    def angle_axis(r):
        n = xp.sqrt(xp.sum(r ** 2))
        x, y, z = r / n
        s, c = xp.sin(n), xp.cos(n)
        R = ops["stack"]([
            ops["stack"]([x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s]),
            ops["stack"]([x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s]),
            ops["stack"]([x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c])])
        return R                                    # |r| >= 1e-4 on the benchmark's inputs

    def vertices(theta, parents, rel, inv, base, weights, mirrored):
        padded = ops["cat"]([theta, ops["zeros"](1)])
        pose = padded[ops["asidx"](np.where(idx < 0, 26, idx))]
        pose = pose + ops["asarr"](np.where(np.arange(25)[:, None] == 1, 1.0, 0.0))
        absolutes, transforms = [], []
        for b, parent in enumerate(parents):
            R = euler(pose[b + 3])
            top = ops["cat"]([rel[b][:, :3] @ R, rel[b][:, 3:]], 1)
            a = top if parent == -1 else absolutes[parent] @ top
            absolutes.append(a)
            transforms.append(a @ inv[b])
        T = ops["stack"](transforms)[:, :3, :]       # (22, 3, 4)
        positions = ops["einsum"]("bij,vj,vb->vi", T, base, weights)
        if mirrored:
            positions = positions * ops["asarr"](np.array([-1.0, 1.0, 1.0]))
        R = angle_axis(pose[0])
        return positions @ R.T + pose[2]

    return vertices


def _ht_json(J):
    return np.asarray(J).reshape(-1, 28).tolist()


def jax_ht(inp):
    theta, us, parents, rel, inv, base, weights, tri, corr, points, mirrored = _ht_data(inp)
    ops = {"stack": jnp.stack, "cat": lambda a, axis=0: jnp.concatenate(a, axis),
           "zeros": lambda k: jnp.zeros(k), "asidx": jnp.asarray, "asarr": jnp.asarray,
           "einsum": jnp.einsum}
    vertices = _ht_functions(jnp, ops)
    t = tri[corr]
    model = tuple(map(jnp.asarray, (rel, inv, base, weights)))
    pts = jnp.asarray(points)

    def objective(theta, us):
        V = vertices(theta, parents, *model, mirrored)
        hand = us[:, :1] * V[t[:, 0]] + us[:, 1:] * V[t[:, 1]] + (1 - us.sum(1, keepdims=True)) \
            * V[t[:, 2]]
        return (pts - hand).ravel()

    def jacobian(theta, us):
        Jt = jax.jacfwd(objective)(theta, us)                        # (3N, 26)
        # each point's residuals depend on its own us only: two compressed forward passes
        cu = [jax.jvp(lambda u: objective(theta, u), (us,),
                      (jnp.zeros_like(us).at[:, k].set(1.0),))[1] for k in range(2)]
        return jnp.concatenate((jnp.stack(cu, axis=1), Jt), axis=1)
    fo, fg = jax.jit(objective), jax.jit(jacobian)
    theta_j, us_j = jnp.asarray(theta), jnp.asarray(us)
    return {"objective": lambda: _block(fo(theta_j, us_j)),
            "derivative": lambda: _block(fg(theta_j, us_j)),
            "to_json": {"objective": _tolist, "derivative": _ht_json}}


# -- PyTorch ----------------------------------------------------------------------------------
def _t(a):
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def torch_lse(inp):
    x = _t(inp["x"])

    def f(x):
        a = torch.max(x)
        return a + torch.log(torch.sum(torch.exp(x - a)))
    g = torch.func.grad(f)
    return {"objective": lambda: f(x), "derivative": lambda: g(x),
            "to_json": {"objective": float, "derivative": _tolist}}


def torch_llsq(inp):
    x, n = _t(inp["x"]), inp["n"]

    def f(x):
        t = -1.0 + 2.0 * torch.arange(n, dtype=torch.float64) / (n - 1)
        T = t[:, None] ** torch.arange(x.shape[0], dtype=torch.float64)
        r = torch.sign(t) - T @ x
        return 0.5 * r @ r
    g = torch.func.grad(f)
    return {"objective": lambda: f(x), "derivative": lambda: g(x),
            "to_json": {"objective": float, "derivative": _tolist}}


def torch_ode(inp):
    x, s = _t(inp["x"]), inp["s"]

    def rhs(x, y):
        return torch.cat((x[:1], x[1:] * y[:-1]))

    def solve(x):
        y, h = torch.zeros_like(x), 2.0 / s
        for _ in range(s):
            k1 = rhs(x, y)
            k2 = rhs(x, y + h / 2 * k1)
            k3 = rhs(x, y + h / 2 * k2)
            k4 = rhs(x, y + h * k3)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return y
    g = torch.func.grad(lambda x: solve(x)[-1])
    return {"objective": lambda: solve(x), "derivative": lambda: g(x),
            "to_json": {"objective": _tolist, "derivative": _tolist}}


def torch_gmm(inp):
    d, k, n, m, gamma = inp["d"], inp["k"], inp["n"], inp["m"], inp["gamma"]
    args = tuple(_t(inp[a]) for a in ("alpha", "mu", "q", "l"))
    x = _t(inp["x"])
    rows, cols = _gmm_parts(torch, d)
    nn = d + m + 1
    const = (-n * d / 2 * math.log(2 * math.pi)
             + k * (nn * d * (math.log(gamma) - 0.5 * math.log(2))
                    - float(torch.special.multigammaln(torch.tensor(nn / 2), d))))

    def f(alpha, mu, q, l):
        Q = torch.diag_embed(torch.exp(q))
        Q = Q.index_put((torch.arange(k)[:, None], torch.as_tensor(rows)[None],
                         torch.as_tensor(cols)[None]), l)
        z = torch.einsum("kij,nkj->nki", Q, x[:, None, :] - mu[None])
        beta = alpha + q.sum(1) - 0.5 * (z * z).sum(-1)
        return (const + torch.logsumexp(beta, 1).sum() - n * torch.logsumexp(alpha, 0)
                - 0.5 * gamma ** 2 * (torch.sum(torch.exp(q) ** 2) + torch.sum(l ** 2))
                + m * q.sum())
    g = torch.func.grad(f, argnums=(0, 1, 2, 3))
    names = ("alpha", "mu", "q", "l")
    return {"objective": lambda: f(*args), "derivative": lambda: g(*args),
            "to_json": {"objective": float,
                        "derivative": lambda gs: {a: _tolist(v) for a, v in zip(names, gs)}}}


def torch_kmeans(inp):
    P, C = _t(inp["points"]), _t(inp["centroids"])

    def cost(C):
        D = (P ** 2).sum(1)[:, None] + (C ** 2).sum(1)[None] - 2.0 * P @ C.T
        return D.min(dim=1).values.sum()

    def direction(C):
        J = torch.func.grad(cost)(C)
        _, H = torch.func.jvp(torch.func.grad(cost), (C,), (torch.ones_like(C),))
        return J / H
    return {"objective": lambda: cost(C), "derivative": lambda: direction(C),
            "to_json": {"objective": float, "derivative": _tolist}}


def torch_lstm(inp):
    main, extra, state, seq = (_t(inp[a]) for a in
                               ("main_params", "extra_params", "state", "sequence"))
    layers, b = main.shape[0] // 2, main.shape[1] // 4

    def f(main, extra):
        st = list(state)
        total = 0.0
        for t in range(seq.shape[0] - 1):
            y = seq[t] * extra[0]
            for j in range(layers):
                W, B = main[2 * j].reshape(4, b), main[2 * j + 1].reshape(4, b)
                h, c = st[2 * j], st[2 * j + 1]
                fg = torch.sigmoid(y * W[0] + B[0])
                ig = torch.sigmoid(h * W[1] + B[1])
                og = torch.sigmoid(y * W[2] + B[2])
                g = torch.tanh(h * W[3] + B[3])
                c = c * fg + ig * g
                h = og * torch.tanh(c)
                st[2 * j], st[2 * j + 1] = h, c
                y = h
            ypred = y * extra[1] + extra[2]
            total = total + torch.sum(seq[t + 1] * (ypred - torch.log(torch.sum(torch.exp(ypred)) + 2)))
        return -total / ((seq.shape[0] - 1) * b)
    g = torch.func.grad(f, argnums=(0, 1))
    return {"objective": lambda: f(main, extra),
            "derivative": lambda: torch.cat([v.ravel() for v in g(main, extra)]),
            "to_json": {"objective": float, "derivative": _tolist}}


def torch_ba(inp):
    n, m, p, cams, X, w, feats, ci, pi = _ba_data(inp)
    cams, X, w, feats = map(_t, (cams, X, w, feats))
    rows, cols = _ba_structure(n, m, p, ci, pi)
    ci_t, pi_t = torch.as_tensor(ci), torch.as_tensor(pi)

    def rodrigues(r, X):
        sq = torch.sum(r ** 2)
        theta = torch.sqrt(sq)
        wv = r / theta
        return (X * torch.cos(theta) + torch.linalg.cross(wv, X) * torch.sin(theta)
                + wv * (wv @ X) * (1 - torch.cos(theta)))   # |r| > 0 on these inputs

    def reproj(cam, X, w, feat):
        Xc = rodrigues(cam[:3], X - cam[3:6])
        proj = Xc[:2] / Xc[2]
        rsq = proj @ proj
        return w * (proj * (1 + cam[9] * rsq + cam[10] * rsq * rsq) * cam[6] + cam[7:9] - feat)

    def objective():
        return torch.func.vmap(reproj)(cams[ci_t], X[pi_t], w, feats), 1 - w ** 2

    def jacobian():
        Jc, JX, Jw = torch.func.vmap(torch.func.jacrev(reproj, argnums=(0, 1, 2)))(
            cams[ci_t], X[pi_t], w, feats)
        blocks = torch.cat((Jc, JX, Jw[:, :, None]), dim=2)
        dw = torch.func.vmap(torch.func.grad(lambda v: 1 - v ** 2))(w)
        return torch.cat((blocks.ravel(), dw))
    return {"objective": objective, "derivative": jacobian,
            "to_json": {"objective": _ba_obj_json,
                        "derivative": lambda v: _ba_json(rows, cols, v)}}


def torch_ht(inp):
    theta, us, parents, rel, inv, base, weights, tri, corr, points, mirrored = _ht_data(inp)
    ops = {"stack": torch.stack, "cat": lambda a, axis=0: torch.cat(a, axis),
           "zeros": lambda k: torch.zeros(k), "asidx": torch.as_tensor, "asarr": _t,
           "einsum": torch.einsum}
    vertices = _ht_functions(torch, ops)
    t = torch.as_tensor(tri[corr])
    model = tuple(map(_t, (rel, inv, base, weights)))
    pts = _t(points)
    theta_t, us_t = _t(theta), _t(us)

    def objective(theta, us):
        V = vertices(theta, parents, *model, mirrored)
        hand = us[:, :1] * V[t[:, 0]] + us[:, 1:] * V[t[:, 1]] + (1 - us.sum(1, keepdim=True)) \
            * V[t[:, 2]]
        return (pts - hand).ravel()

    def jacobian():
        Jt = torch.func.jacfwd(objective)(theta_t, us_t)
        cu = []
        for k in range(2):
            e = torch.zeros_like(us_t)
            e[:, k] = 1.0
            cu.append(torch.func.jvp(lambda u: objective(theta_t, u), (us_t,), (e,))[1])
        return torch.cat((torch.stack(cu, dim=1), Jt), dim=1)
    return {"objective": lambda: objective(theta_t, us_t), "derivative": jacobian,
            "to_json": {"objective": _tolist, "derivative": _ht_json}}


JAX = {"lse": jax_lse, "llsq": jax_llsq, "ode": jax_ode, "gmm": jax_gmm, "kmeans": jax_kmeans,
       "lstm": jax_lstm, "ba": jax_ba, "ht": jax_ht}
TORCH = {"lse": torch_lse, "llsq": torch_llsq, "ode": torch_ode, "gmm": torch_gmm,
         "kmeans": torch_kmeans, "lstm": torch_lstm, "ba": torch_ba, "ht": torch_ht}


def make(tool, name, inp):
    table = JAX if tool == "jax" else TORCH
    if (jax is None if tool == "jax" else torch is None) or name not in table:
        return None
    return table[name](inp)
