"""The tensor data path: sharding identical to DistributedSampler, correct augmentation, exact normalisation."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset as TorchTensorDataset
from torch.utils.data.distributed import DistributedSampler

from tests.helpers import ROOT
from trainer.recipes import data


@pytest.mark.parametrize("n", [1, 7, 10, 11, 97, 1347])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_epoch_indices_are_exactly_distributed_samplers(n: int, world_size: int) -> None:
    """Same indices, same order, for every rank and epoch, including sizes that do not divide
    evenly (DistributedSampler then repeats the first indices to pad every rank to the same length)."""
    dataset = TorchTensorDataset(torch.arange(n))
    for rank, epoch, seed in itertools.product(range(world_size), range(3), (0, 5)):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
        sampler.set_epoch(epoch)
        expected = list(sampler)
        got = data.epoch_indices(n, world_size, rank, epoch, seed)
        assert got.dtype == torch.int64
        assert got.tolist() == expected, (n, world_size, rank, epoch, seed)


def test_shards_cover_the_data_and_change_with_the_epoch() -> None:
    n, world = 11, 3
    shards = [data.epoch_indices(n, world, r, 0, 0) for r in range(world)]
    assert {len(s) for s in shards} == {4}  # ceil(11 / 3), padded
    assert set(torch.cat(shards).tolist()) == set(range(n))
    assert data.epoch_indices(n, world, 0, 0, 0).tolist() != data.epoch_indices(n, world, 0, 1, 0).tolist()


@pytest.mark.parametrize("n,world_size", [(10, 3), (10_000, 3), (7, 4), (1, 2)])
def test_eval_shards_cover_the_test_set_exactly_once(n: int, world_size: int) -> None:
    covered = [i for r in range(world_size) for i in range(n)[data.eval_shard(n, world_size, r)]]
    assert covered == list(range(n))


def _dataset(n: int = 64) -> data.TensorDataset:
    return data.load_synthetic_cifar10(n, 8, seed=3)


def test_prepare_without_augmentation_normalises_exactly() -> None:
    d = _dataset()
    x = d.train_x[:16]
    reference = (x.float() / 255 - d.mean.view(1, -1, 1, 1)) / d.std.view(1, -1, 1, 1)
    for channels_last in (False, True):
        out = data.prepare(x, d, augment=False, gen=None, channels_last=channels_last)
        assert out.shape == (16, 3, 32, 32) and out.dtype == torch.float32
        assert out.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
        torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)
    assert data.prepare(x, d, augment=False, gen=None).is_contiguous()  # the default layout: NCHW
    assert d.train_x.dtype == torch.uint8  # held as bytes; floats only per batch


def _crops(image: torch.Tensor, pad: int) -> dict[tuple[int, int, bool], torch.Tensor]:
    """Every crop RandomCrop(padding=pad) + RandomHorizontalFlip could produce from one image."""
    _, h, w = image.shape
    padded = F.pad(image, (pad, pad, pad, pad))  # zero = black, as torchvision pads PIL images
    out = {}
    for dy, dx in itertools.product(range(2 * pad + 1), repeat=2):
        crop = padded[:, dy:dy + h, dx:dx + w]
        out[(dy, dx, False)] = crop
        out[(dy, dx, True)] = crop.flip(2)
    return out


def test_random_crop_flip_is_a_crop_within_the_padding_and_a_flip() -> None:
    d = _dataset(512)
    x = d.train_x
    pad = 4  # the default, which prepare() uses: torchvision's CIFAR recipe
    out = data.random_crop_flip(x, data.batch_generator(0, 0, 0, 0))
    assert out.shape == x.shape and out.dtype == torch.uint8
    seen = set()
    for i in range(len(x)):
        matches = [key for key, crop in _crops(x[i], pad).items() if torch.equal(crop, out[i])]
        assert matches, f"image {i} is not a {pad}-pixel crop (optionally flipped) of its padded input"
        seen.update(matches)
    # Over 512 images every shift in [0, 2*pad] and both flips occur: shifts are not stuck at 0.
    assert {k[0] for k in seen} == set(range(2 * pad + 1)) == {k[1] for k in seen}
    # Rows and columns shift independently: most of the 81 (row, column) pairs occur, not only the diagonal.
    assert len({k[:2] for k in seen}) > 60
    assert {k[2] for k in seen} == {False, True}
    flipped = sum(1 for k in seen if k[2])
    assert 0.3 < flipped / len(seen) < 0.7


def test_augmentation_is_a_function_of_seed_epoch_step_rank() -> None:
    """So a resumed run draws the same crops, and ranks and steps draw different ones."""
    x = _dataset().train_x[:32]

    def draw(*key: int) -> torch.Tensor:
        return data.random_crop_flip(x, data.batch_generator(*key))

    assert torch.equal(draw(0, 1, 2, 0), draw(0, 1, 2, 0))
    assert not torch.equal(draw(0, 1, 2, 0), draw(0, 1, 2, 1))
    assert not torch.equal(draw(0, 1, 2, 0), draw(0, 1, 3, 0))


def test_prepare_with_augmentation_normalises_the_crop() -> None:
    d = _dataset()
    x = d.train_x[:16]
    gen_key = (1, 2, 3, 0)
    crops = data.random_crop_flip(x, data.batch_generator(*gen_key))
    out = data.prepare(x, d, augment=True, gen=data.batch_generator(*gen_key), channels_last=True)
    reference = data.prepare(crops.contiguous(), d, augment=False, gen=None)
    assert out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", [(50, 3, 8, 8), (1, 1, 1, 2), (1, 2, 1, 1)], ids=["images", "two-pixels", "one-pixel"])
def test_channel_stats_are_exact(shape: tuple[int, ...]) -> None:
    """The sample standard deviation (n - 1), as torch.std; one pixel per channel has none (0)."""
    x = torch.randint(0, 256, shape, dtype=torch.uint8)
    mean, std = data.channel_stats(x)
    if shape[0] * shape[2] * shape[3] == 1:
        assert std.tolist() == [0.0] * shape[1]
        return
    flat = x.double().div(255).transpose(0, 1).reshape(shape[1], -1)
    torch.testing.assert_close(mean.double(), flat.mean(1), atol=1e-6, rtol=0)
    torch.testing.assert_close(std.double(), flat.std(1), atol=1e-6, rtol=0)


def test_digits_split_is_stratified_fixed_and_loads_without_importing_sklearn() -> None:
    code = ("import sys; from trainer.recipes import data; d = data.load_digits(); "
            "print(len(d.train_y), len(d.test_y), 'sklearn' in sys.modules, d.test_y[:8].tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    n_train, n_test, sklearn_imported, first = out.stdout.split(maxsplit=3)
    assert (n_train, n_test, sklearn_imported) == ("1347", "450", "False")
    d = data.load_digits()
    assert str(d.test_y[:8].tolist()) == first.strip()  # the same split every time
    counts = torch.bincount(d.test_y, minlength=10)
    totals = counts + torch.bincount(d.train_y, minlength=10)
    assert counts.sum() == 450 and (counts - totals * 0.25).abs().max() < 1  # each class in proportion
    pixels = {tuple(img.flatten().tolist()) for img in d.train_x}
    assert d.train_x.dtype == torch.uint8 and len(pixels) > 1300  # real, varied images


def test_stratified_test_indices() -> None:
    import numpy as np

    labels = np.array([0] * 10 + [1] * 7 + [2] * 3)
    test = data.stratified_test_indices(labels, 0.25, seed=0)
    assert len(test) == 5 and len(set(test.tolist())) == 5
    assert sorted(np.bincount(labels[test], minlength=3).tolist()) == [1, 2, 2]
    assert test.tolist() == data.stratified_test_indices(labels, 0.25, seed=0).tolist()


def test_digits_are_sklearns_images_in_bytes_and_its_labels() -> None:
    """The 16 grey levels of scikit-learn's digits scaled to 0-255, split by the documented seed (1)."""
    import numpy as np
    from sklearn.datasets import load_digits

    reference = load_digits()
    images = np.round(reference.images * 255 / 16).astype(np.uint8)[:, None]
    test = data.stratified_test_indices(reference.target, 0.25, seed=1)
    train = np.setdiff1d(np.arange(len(reference.target)), test)
    d = data.load_digits()
    assert torch.equal(d.train_x, torch.from_numpy(images[train])) and torch.equal(d.test_x, torch.from_numpy(images[test]))
    assert d.train_y.tolist() == reference.target[train].tolist() and d.test_y.tolist() == reference.target[test].tolist()
    assert int(d.train_x.max()) == 255  # level 16 is white
    # Normalised by the training images' own statistics (the test images' are never looked at).
    mean, std = data.channel_stats(d.train_x)
    assert torch.equal(d.mean, mean) and torch.equal(d.std, std)


def test_digits_without_scikit_learn_say_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = data.importlib.util.find_spec
    monkeypatch.setattr(data.importlib.util, "find_spec", lambda name, *a: None if name == "sklearn" else real(name, *a))
    with pytest.raises(data.DataError) as err:
        data.load_digits()
    assert str(err.value) == ("the digits data ships with scikit-learn, which is not installed here "
                              "(pip install scikit-learn)")


def test_synthetic_cifar10_is_a_function_of_its_seed_with_every_class_and_noise_per_image() -> None:
    torch.manual_seed(0)
    a = data.load_synthetic_cifar10(300, 20, seed=3)
    torch.manual_seed(1)  # torch's global RNG plays no part
    b = data.load_synthetic_cifar10(300, 20, seed=3)
    assert all(torch.equal(x, y) for x, y in zip((a.train_x, a.train_y, a.test_x), (b.train_x, b.train_y, b.test_x)))
    assert not torch.equal(a.train_x, data.load_synthetic_cifar10(300, 20, seed=4).train_x)
    assert sorted(set(a.train_y.tolist())) == list(range(10))
    # Half class template, half noise, both uniform in [0, 1): pixels average mid-grey, none wrapped around.
    assert 120 < a.train_x.double().mean() < 135 and a.train_x.double().std() < 60
    same_class = a.train_x[a.train_y == a.train_y[0]]
    assert not torch.equal(same_class[0], same_class[1])  # each image draws its own noise


@pytest.mark.parametrize(("key", "seed"), [((0, 1, 2, 3), 1009005048), ((7, 3, 100, 1), 7063045405173549),
                                           ((10**6, 2, 5, 1), 3658501993928448028)])
def test_augmentation_seeds_are_those_earlier_runs_used(key: tuple[int, int, int, int], seed: int) -> None:
    """Recorded values, not recomputed: a checkpoint written by an earlier version resumes with the
    same crops only while this mixing stays the same. The last key's mix is above 2**63 (reduced)."""
    assert data.batch_generator(*key).initial_seed() == seed
