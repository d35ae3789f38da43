"""Write CIFAR-10 in torchvision's on-disk format (cifar-10-batches-py), from arrays made locally.

The tests and benchmarks use it to exercise the real torchvision loading path without the network.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def write_cifar10(root: Path, train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
                  test_y: np.ndarray) -> Path:
    """`*_x` are N x 32 x 32 x 3 uint8 (HWC, like torchvision's .data); returns the batches folder."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)

    def dump(name: str, x: np.ndarray, y: np.ndarray) -> None:
        # torchvision reads "data" as N x 3072 (CHW order) and "labels" as a list of ints.
        flat = np.ascontiguousarray(x.transpose(0, 3, 1, 2)).reshape(len(x), -1)
        with open(folder / name, "wb") as fh:
            pickle.dump({"batch_label": name, "labels": [int(v) for v in y], "data": flat,
                         "filenames": [f"{i}.png" for i in range(len(x))]}, fh)

    for i, (xs, ys) in enumerate(zip(np.array_split(train_x, 5), np.array_split(train_y, 5)), start=1):
        dump(f"data_batch_{i}", xs, ys)
    dump("test_batch", test_x, test_y)
    (folder / "batches.meta").write_bytes(python2_pickle_of_names("label_names", CLASSES))
    return folder


def python2_pickle_of_names(key: str, names: list[str]) -> bytes:
    """{key: names} as the real batches.meta holds it: pickled by Python 2, whose `str` values are
    bytes that Python 3 decodes only with an `encoding` (torchvision passes latin1). Protocol 2:
    PROTO 2, EMPTY_DICT, SHORT_BINSTRING key, EMPTY_LIST, MARK, SHORT_BINSTRING each name, APPENDS,
    SETITEM, STOP."""
    def short_binstring(text: str) -> bytes:
        raw = text.encode("latin1")
        return b"U" + bytes([len(raw)]) + raw

    return (b"\x80\x02}" + short_binstring(key) + b"](" + b"".join(short_binstring(n) for n in names)
            + b"es.")


def random_cifar10(root: Path, n_train: int = 500, n_test: int = 100, seed: int = 0) -> Path:
    """Small learnable CIFAR-10-shaped data: each class has its own colour tint."""
    rng = np.random.default_rng(seed)

    def make(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 10, n)
        tint = (np.arange(10)[:, None] * np.array([25, 60, 95]) % 256)[y][:, None, None, :]
        x = (0.8 * tint + 0.2 * rng.integers(0, 256, (n, 32, 32, 3))).astype(np.uint8)
        return x, y

    return write_cifar10(root, *make(n_train), *make(n_test))
