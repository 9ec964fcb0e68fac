"""What the PyTorch peers share: thread control, step timing and reporting.

Debian's torch calls OpenBLAS (pthreads build) for its GEMMs, whose thread
count torch.set_num_threads does not set; set_threads sets both (OpenBLAS
through ctypes, on every OpenBLAS library mapped into the process). Import
after torch. Not a peer itself (./run runs bench/peers/*_torch.py).
"""
import ctypes
import os
import statistics
import sys
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


# (intra-op threads, OpenBLAS threads) per reported setting.
SETTINGS = {"t1": (1, 1), "t2": (2, 2), "t2.intra2_blas1": (2, 1), "t2.intra1_blas2": (1, 2)}


def report(name, step, steps, reps):
    """Prints the loss of 20 steps, then times `step` in every setting (the
    settings interleaved round by round: load changes hit them alike) and
    prints each as a # line and BENCH <name>.t1, .t1.min and .t2 (the best
    2-thread setting)."""
    set_threads(1, 1)
    losses = [float(step().detach()) for _ in range(20)]
    print(f"# {name} loss over 20 steps: " +
          " ".join(f"{l:.4f}" for l in losses[::4] + [losses[-1]]))
    samples = {k: [] for k in SETTINGS}
    for _ in range(3):
        for k, (intra, blas) in SETTINGS.items():
            set_threads(intra, blas)
            samples[k] += time_steps(step, steps, reps)
            set_threads(1, 1)
            time.sleep(0.25)  # OpenBLAS's threads spin a while after their last GEMM
    med = {k: statistics.median(v) for k, v in samples.items()}
    for k, (intra, blas) in SETTINGS.items():
        print(f"# {name}.{k} (intra-op {intra}, OpenBLAS {blas}): "
              f"median {med[k]:.3f} ms, min {min(samples[k]):.3f} ms")
    best2 = min((k for k in SETTINGS if k.startswith("t2")), key=lambda k: med[k])
    print(f"BENCH {name}.t1 {med['t1']:.3f} ms")
    print(f"BENCH {name}.t1.min {min(samples['t1']):.3f} ms")
    print(f"BENCH {name}.t2 {med[best2]:.3f} ms")
    print(f"# {name}.t2 is {best2} (torch {torch.__version__}, "
          f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')})")
    sys.stdout.flush()
