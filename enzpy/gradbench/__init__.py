"""enzpy as a GradBench tool: ``python -m enzpy.gradbench`` speaks the GradBench protocol
(one JSON message per line on stdin, one JSON answer per line on stdout).

One module per eval (``hello``, ``gmm``, ``ba``, ``ht``, ``lstm``, ``kmeans``, ``llsq``,
``lse``, ``ode``, ``det``, ``particle``, ``saddle``): each objective is ordinary NumPy inside
``@njit`` and every derivative comes from enzpy. ``server.serve`` is the message loop.
"""
EVALS = ("hello", "gmm", "ba", "ht", "lstm", "kmeans", "llsq", "lse", "ode", "det",
         "particle", "saddle")
