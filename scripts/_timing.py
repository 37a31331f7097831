"""Timing helpers shared by the benchmark scripts."""
import statistics
import time


def interleaved(functions, repeat):
    """Median seconds of each function, timed in alternation so that the
    machine's drift (frequency scaling, other load) hits all of them alike."""
    samples = [[] for _ in functions]
    for _ in range(repeat):
        for i, fn in enumerate(functions):
            t = time.perf_counter()
            fn()
            samples[i].append(time.perf_counter() - t)
    return [statistics.median(s) for s in samples]
