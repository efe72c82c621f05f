"""A stand-in for Hugging Face `datasets`, used by scripts/gpu_check.sh only when the GPU machine's
Python cannot import the real one (its pyarrow wheel alone is over the 64 MiB carry budget).

It covers what TRL's GRPOTrainer and scripts/bench_trl.py touch on the GRPO path: the class names
TRL imports (for isinstance checks), `load_dataset("json", data_files=..., split="train")`, and a
list-backed `Dataset` with `map`, `cache_files`, `__len__`, `__getitem__` and `column_names`. It has no
distribution metadata, so transformers' `is_datasets_available()` stays False and the Trainer
treats it as a plain torch-style dataset. The results record that it was used.
"""

import json

STUB = True
__version__ = "0.0.0+gpu-check-stand-in"


class Dataset:
    cache_files = []  # an in-memory dataset (TRL's telemetry reads it)

    def __init__(self, rows):
        self._rows = list(rows)

    @classmethod
    def from_list(cls, rows):
        return cls(rows)

    def __len__(self):
        return len(self._rows)

    def __getitem__(self, i):
        if isinstance(i, str):
            return [r[i] for r in self._rows]
        if isinstance(i, slice):
            return Dataset(self._rows[i])
        return self._rows[i]

    def __iter__(self):
        return iter(self._rows)

    @property
    def column_names(self):
        return list(self._rows[0]) if self._rows else []

    def map(self, fn, *a, **k):
        return Dataset({**r, **fn(r)} for r in self._rows)


class DatasetDict(dict):
    pass


class IterableDataset:
    pass


class IterableDatasetDict(dict):
    pass


def concatenate_datasets(parts):
    return Dataset(r for p in parts for r in p)


def load_dataset(kind, data_files=None, split=None, **_):
    if kind != "json":
        raise NotImplementedError(f"datasets stub: only load_dataset('json'), not {kind!r}")
    files = [data_files] if isinstance(data_files, str) else list(data_files)
    rows = [json.loads(l) for f in files for l in open(f) if l.strip()]
    return Dataset(rows) if split else DatasetDict(train=Dataset(rows))
