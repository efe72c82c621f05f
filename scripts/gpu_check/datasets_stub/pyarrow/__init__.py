"""A stand-in for pyarrow (its wheel alone is over the 64 MiB carry budget), used with the
`datasets` stand-in beside it only when the GPU machine's Python has no pyarrow. TRL's
data_utils imports pyarrow at module level for sequence packing, which the GRPO path never
runs; every attribute here is an inert placeholder, so that import succeeds and any real use
fails loudly."""

STUB = True
__version__ = "0.0.0+gpu-check-stand-in"


class _Placeholder:
    def __init__(self, *a, **k):
        raise RuntimeError("pyarrow stand-in (scripts/gpu_check): pyarrow is not installed")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Placeholder
