"""What the PyTorch peers share: thread control and step timing.

Debian's torch calls OpenBLAS (pthreads build) for its GEMMs, whose thread
count torch.set_num_threads does not set; set_threads sets both (OpenBLAS
through ctypes, on every OpenBLAS library mapped into the process). Import
after torch. Not a peer itself (./run runs bench/peers/*_torch.py).
"""
import ctypes
import time

import torch


def openblas_libs():
    """The OpenBLAS libraries mapped into this process (after torch loaded)."""
    libs = []
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "openblas" in line and "/" in line}
    for p in sorted(paths):
        try:
            lib = ctypes.CDLL(p)
            if hasattr(lib, "openblas_set_num_threads"):
                libs.append(lib)
        except OSError:
            pass
    return libs


BLAS = openblas_libs()


def set_threads(intra, blas):
    """torch's intra-op threads and OpenBLAS's threads."""
    torch.set_num_threads(intra)
    for lib in BLAS:
        lib.openblas_set_num_threads(blas)


def time_steps(step, steps, reps, warm=10):
    """ms per step of each of `reps` repetitions of `steps` calls, after `warm`."""
    for _ in range(warm):
        step()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        t.append((time.perf_counter() - t0) / steps * 1e3)
    return t
