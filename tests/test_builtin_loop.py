"""The built-in loop (`trainer.recipes.training.fit`) on one rank, in this process: what it returns, writes and
prints, checked against computations made here with torch's own DistributedSampler and loss.

In-process on purpose: the mutation run (tests/mutation.py) traces only this process. What needs two
ranks (the mean over ranks, DDP) is proved by test_training_semantics.py and test_exact_resume.py.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from trainer.config.job import JobConfig, RunSettings
from trainer.rank.stopping import StopRequested
from trainer.recipes import components, data
from trainer.recipes.cifar_files import random_cifar10
from trainer.recipes.training import InjectedFailure
from trainer.runners.dispatch import run_job

DIGITS_TRAIN = 1347  # the digits split's training images: 22 steps of 64, the last one of 3 images


def train(run_dir: Path, **fields: Any) -> tuple[JobConfig, dict[str, Any]]:
    job = JobConfig(**{"name": "loop", "log_every_steps": 1000, "checkpoint_every_steps": 0, **fields})
    return job, run_job(job, RunSettings(run_dir=str(run_dir)), environ={})


def epoch_lines(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(autouse=True)
def deterministic_flag() -> Iterator[None]:
    """fit() sets torch's process-wide deterministic flag (each rank is its own process); put it back."""
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def onecycle_lr(lr: float, step: int, total: int, warmup_fraction: float = 0.2) -> float:
    """docs/profiles-and-jobs.md's onecycle (`lr_schedule`): linear warm-up over a fifth of the steps, then linear decay to 0."""
    warmup = max(1, int(total * warmup_fraction))
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * max(0.0, 1 - (step - warmup) / (total - warmup))


TRAIN_KEYS = ["epoch", "step", "train_loss", "lr", "epoch_time_s", "images_per_second"]
TEST_KEYS = ["test_loss", "test_accuracy", "test_count"]


def test_result_and_epoch_lines_report_what_the_loop_did(tmp_path: Path) -> None:
    started = time.perf_counter()
    job, result = train(tmp_path, epochs=4, eval_every_epochs=3, lr_schedule="onecycle", lr=0.05)
    wall = time.perf_counter() - started
    lines = epoch_lines(tmp_path)
    steps = 22
    # metrics.jsonl's columns, in this order (the epoch first), evaluation only every third epoch and at the end.
    assert [list(line) for line in lines] == [TRAIN_KEYS + ["time"]] * 2 + [TRAIN_KEYS + TEST_KEYS + ["time"]] * 2
    assert [line["epoch"] for line in lines] == [1, 2, 3, 4]
    assert [line["step"] for line in lines] == [steps, 2 * steps, 3 * steps, 4 * steps]
    # The schedule spans all the run's steps: it ends at 0 after the last one.
    assert [line["lr"] for line in lines] == pytest.approx(
        [onecycle_lr(0.05, s, 4 * steps) for s in (steps, 2 * steps, 3 * steps, 4 * steps)], abs=1e-12)
    for line in lines:
        assert isinstance(line["epoch_time_s"], float) and 0 < line["epoch_time_s"] < wall
        assert line["epoch_time_s"] == round(line["epoch_time_s"], 4)
        # This epoch's images over this epoch's time (not the run's images so far).
        assert line["images_per_second"] == pytest.approx(DIGITS_TRAIN / line["epoch_time_s"], rel=0.02)
    assert result["world_size"] == 1 and result["epochs"] == 4 and result["steps"] == 4 * steps
    assert result["test_accuracy"] == lines[-1]["test_accuracy"] > 0.5
    assert result["test_loss"] == lines[-1]["test_loss"]
    assert result["train_loss"] == lines[-1]["train_loss"]
    train_time = result["train_time_s"]
    assert isinstance(train_time, float) and train_time == round(train_time, 3)
    # Training time excludes evaluation, so it is below the epochs' time, and sets the throughput.
    assert 0 < train_time <= sum(line["epoch_time_s"] for line in lines) + 0.002
    assert result["images_per_second"] == pytest.approx(4 * DIGITS_TRAIN / train_time, rel=0.05)
    final = torch.load(tmp_path / "model_final.pt")
    model = components.build(job, torch.device("cpu"), False)[0]
    assert final.keys() == model.state_dict().keys()
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def initial_losses(job: JobConfig, epoch: int, augment: bool = False) -> float:
    """The mean over one epoch's batches of the untrained model's batch loss, in the order torch's
    DistributedSampler (one replica, set_epoch) gives: what the loop reports when lr is ~0. With
    `augment`, step k's batch is cropped and flipped by data.batch_generator(seed, epoch, k, rank 0)."""
    torch.manual_seed(job.seed)
    model = components.build(job, torch.device("cpu"), False)[0].eval()
    dataset = data.load_digits()
    sampler = DistributedSampler(range(len(dataset.train_y)), num_replicas=1, rank=0, shuffle=True, seed=job.seed)
    sampler.set_epoch(epoch)
    order = torch.tensor(list(sampler))
    losses = []
    with torch.no_grad():
        for step, batch in enumerate(order.split(job.batch_size_per_rank)):
            gen = data.batch_generator(job.seed, epoch, step, 0) if augment else None
            x = data.prepare(dataset.train_x[batch], dataset, augment, gen, False)
            losses.append(F.cross_entropy(model(x), dataset.train_y[batch]).item())
    return sum(losses) / len(losses)


def test_train_loss_is_the_mean_batch_loss_in_each_epochs_own_order(tmp_path: Path) -> None:
    # lr ~0: the weights stay put, so each step's loss is the initial model's loss on that batch. The
    # last batch holds 3 images, so the unweighted mean depends on which images each epoch's order puts there.
    job, _ = train(tmp_path, epochs=2, lr=1e-12, eval_every_epochs=10)
    reported = [line["train_loss"] for line in epoch_lines(tmp_path)]
    expected = [initial_losses(job, 0), initial_losses(job, 1)]
    assert reported == pytest.approx(expected, rel=1e-6)
    assert abs(expected[0] - expected[1]) > 1e-3  # the orders differ, so the test can tell them apart


def test_train_loss_of_a_one_step_epoch_is_that_steps_loss(tmp_path: Path) -> None:
    job, result = train(tmp_path, epochs=1, lr=1e-12, batch_size_per_rank=2048)
    assert result["steps"] == 1
    assert result["train_loss"] == pytest.approx(initial_losses(job, 0), rel=1e-6)
    # The step's time counts as training time (throughput of images over positive seconds).
    assert 0 < result["images_per_second"] < 1e9


def test_augmentation_draws_from_the_steps_own_generator(tmp_path: Path) -> None:
    """With `augment`, step k's crops and flips come from data.batch_generator(seed, epoch, k, rank)
    (not torch's global RNG): the one step's loss is the untrained model's on exactly that augmentation."""
    job, result = train(tmp_path, epochs=1, lr=1e-12, batch_size_per_rank=2048, augment=True)
    expected = initial_losses(job, 0, augment=True)
    assert result["train_loss"] == pytest.approx(expected, rel=1e-6)
    assert abs(expected - initial_losses(job, 0)) > 1e-4  # the augmentation changed the loss: it was applied


def test_an_injected_failure_names_its_step_and_rank(tmp_path: Path) -> None:
    with pytest.raises(InjectedFailure, match=r"^injected failure at step 5 on rank 0 \(job\.fail_at\)$"):
        train(tmp_path, epochs=1, fail_at="5:0")
    assert not (tmp_path / "model_final.pt").exists()


def test_stop_at_accuracy_ends_the_run_at_the_first_epoch_that_reaches_it(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    _, result = train(tmp_path, epochs=8, lr=0.05, eval_every_epochs=100, stop_at_accuracy=0.6)
    lines = epoch_lines(tmp_path)
    accuracies = [line["test_accuracy"] for line in lines]  # evaluated every epoch to know when to stop
    assert len(lines) < 8 and result["epochs"] == len(lines)
    assert accuracies[-1] >= 0.6 and all(a < 0.6 for a in accuracies[:-1])
    assert f"reached test accuracy {accuracies[-1]:.4f} >= 0.6" in capsys.readouterr().out
    # Reaching the goal exactly counts: the same run with the first epoch's accuracy as its goal stops there.
    _, again = train(tmp_path / "exact", epochs=8, lr=0.05, eval_every_epochs=100, stop_at_accuracy=accuracies[0])
    assert again["epochs"] == 1


def test_banner_names_the_run_and_where_a_resumed_attempt_starts(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(StopRequested):
        train(tmp_path, epochs=2, interrupt_at="29", batch_size_per_rank=32)
    first = capsys.readouterr().out
    assert "[trainer] loop: mlp on digits, device cpu, batch 32/rank = 32 global, 43 steps/epoch\n" in first
    train(tmp_path, epochs=2, interrupt_at="29", batch_size_per_rank=32)
    assert ("[trainer] loop: mlp on digits, device cpu, batch 32/rank = 32 global, 43 steps/epoch, resuming "
            "epoch 1 at step 29\n") in capsys.readouterr().out


def test_progress_log_lines_every_log_every_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train(tmp_path, epochs=2, lr=0.05, log_every_steps=10)
    lines = [line for line in capsys.readouterr().out.splitlines() if re.match(r"\[trainer\] epoch \d+ step ", line)]
    # Global steps 10, 20, 30 and 40: in epoch 1 at its steps 10 and 20, then in epoch 2 at its steps 8 and 18.
    assert [line.split(" loss ")[0] for line in lines] == [
        "[trainer] epoch 1 step 10/22", "[trainer] epoch 1 step 20/22",
        "[trainer] epoch 2 step 8/22", "[trainer] epoch 2 step 18/22"]
    assert all(re.fullmatch(r".* loss \d+\.\d{4} lr 0\.\d{5}", line) for line in lines), lines


def test_progress_bar_counts_the_epochs_steps_from_where_an_attempt_resumes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def attempt() -> str:
        """One attempt with a tqdm bar (what an interactive local run shows); its stderr."""
        job = JobConfig(name="loop", epochs=1, batch_size_per_rank=32, interrupt_at="29", checkpoint_every_steps=0)
        with contextlib.suppress(StopRequested):
            run_job(job, RunSettings(run_dir=str(tmp_path), progress_bar=True), environ={})
        return capsys.readouterr().err

    assert re.search(r"epoch 1:\s+0%\|[^|]*\| 0/43 ", attempt())  # stopped at step 29
    assert re.search(r"epoch 1:\s+67%\|[^|]*\| 29/43 ", attempt())  # resumed there


@pytest.mark.parametrize("deterministic", [True, False])
def test_deterministic_turns_on_torchs_deterministic_algorithms_with_warnings_only(
        tmp_path: Path, deterministic: bool) -> None:
    torch.use_deterministic_algorithms(False)
    train(tmp_path, epochs=1, deterministic=deterministic)
    assert torch.are_deterministic_algorithms_enabled() is deterministic
    if deterministic:  # an op without a deterministic kernel warns instead of failing the run
        assert torch.is_deterministic_algorithms_warn_only_enabled()


# ----- CIFAR-10 through torchvision, from a copy written here in its format --------------------------

def test_cifar10_loads_a_local_copy_through_torchvision_as_nchw_uint8(tmp_path: Path) -> None:
    random_cifar10(tmp_path, n_train=50, n_test=20, seed=3)
    loaded = data.load_cifar10(tmp_path, download=False, verify_checksums=False)
    from torchvision.datasets import CIFAR10  # the reference: torchvision's own reading of the files

    class Unchecked(CIFAR10):
        def _check_integrity(self) -> bool:
            return True

        def _load_meta(self) -> None:
            pass

    train_ref, test_ref = Unchecked(str(tmp_path), train=True), Unchecked(str(tmp_path), train=False)
    assert loaded.train_x.dtype == torch.uint8 and tuple(loaded.train_x.shape) == (50, 3, 32, 32)
    assert torch.equal(loaded.train_x, torch.from_numpy(train_ref.data).permute(0, 3, 1, 2))
    assert torch.equal(loaded.test_x, torch.from_numpy(test_ref.data).permute(0, 3, 1, 2))
    assert loaded.train_y.tolist() == train_ref.targets and loaded.test_y.tolist() == test_ref.targets


def test_cifar10_copy_with_other_bytes_fails_torchvisions_checksums_with_advice(tmp_path: Path) -> None:
    random_cifar10(tmp_path, n_train=10, n_test=10)
    with pytest.raises(data.DataError) as err:
        data.load_cifar10(tmp_path, download=False)  # checksums on: these bytes are not the real files
    message = str(err.value)
    assert message.startswith(f"CIFAR-10 is not available under {tmp_path} (Dataset not found or corrupted)")
    assert "--set job.data_dir=PATH" in message and "--set job.download=false" in message


def test_cifar10_copy_missing_a_batch_is_refused_without_checksums_too(tmp_path: Path) -> None:
    folder = random_cifar10(tmp_path, n_train=10, n_test=10)
    (folder / "data_batch_3").unlink()
    with pytest.raises(data.DataError, match=r"^CIFAR-10 is not available under .* \(Dataset not found"):
        data.load_cifar10(tmp_path, download=False, verify_checksums=False)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("https_proxy", "http_proxy", "HTTPS_PROXY", "HTTP_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there: no network, fast


@pytest.mark.parametrize("verify", [True, False])
def test_cifar10_download_without_network_says_so(tmp_path: Path, no_network: None, verify: bool) -> None:
    root = tmp_path / "new" / "cifar"
    for _ in range(2):  # the folder is made (parents too) for the download; a second try finds it there
        with pytest.raises(data.DataError, match=rf"^CIFAR-10 is not available under {re.escape(str(root))} "
                                                 r"\(download failed: "):
            data.fetch_cifar10(root, verify)
        assert root.is_dir()


def test_cifar10_load_with_download_on_tries_the_network_for_a_missing_copy(tmp_path: Path, no_network: None) -> None:
    with pytest.raises(data.DataError, match=rf"^CIFAR-10 is not available under {re.escape(str(tmp_path))} "
                                             r"\(download failed: .*--set job.download=false"):
        data.load_cifar10(tmp_path, download=True, verify_checksums=False)


def test_builtin_cifar10_job_trains_from_the_jobs_data_dir(tmp_path: Path) -> None:
    random_cifar10(tmp_path / "copy", n_train=96, n_test=30)
    _, result = train(tmp_path / "run", dataset="cifar10", model="lenet", data_dir=str(tmp_path / "copy"),
                      download=False, verify_checksums=False, epochs=1, batch_size_per_rank=32)
    assert result["steps"] == 3
    assert epoch_lines(tmp_path / "run")[-1]["test_count"] == 30


def test_settling_ddp_buckets_changes_no_weight_statistic_or_random_state_and_the_first_step_uses_the_final_layout(
) -> None:
    """The pass that fixes DDP's bucket layout before training (why: components.settle_buckets; the 4-rank exact
    resume it makes hold: test_torchrun_launch.py) leaves what training would see as built: weights, BatchNorm
    statistics, the RNG, no gradients; the first real step is already reduced in the rebuilt layout."""
    import torch.distributed as dist

    job = JobConfig(name="settle", model="resnet-small", dataset="synthetic-cifar10")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model, ddp, _ = components.build(job, torch.device("cpu"), True)
        x = torch.randn(2, 3, 32, 32)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        rng = torch.get_rng_state()
        components.settle_buckets(ddp, x[:1])
        assert model.training and all(p.grad is None for p in model.parameters())
        assert torch.equal(torch.get_rng_state(), rng)
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
        F.cross_entropy(ddp(x), torch.tensor([0, 1])).backward()
        assert ddp._has_rebuilt_buckets  # at that step's forward: its backward reduces in the final layout
    finally:
        ddp = None
        dist.destroy_process_group()


def test_every_model_name_a_job_takes_builds_that_model_and_no_other() -> None:
    """The `Model` Literal (trainer.config.job) is the one list of model names: the check, its error lines
    and the recipe's models all come from it, so a name added there without a model (or a model without a
    name) fails here rather than on a rank."""
    from typing import get_args

    from trainer.config.job import DIGITS_MODEL, JobConfig, Model
    from trainer.config.schema import FieldError
    from trainer.recipes.models import MODELS, build_model

    assert sorted(MODELS) == sorted(get_args(Model))
    for name in get_args(Model):
        assert type(build_model(name)).model_name == name
    with pytest.raises(FieldError) as refused:
        JobConfig(name="x", model=DIGITS_MODEL, dataset="cifar10")
    others = [m for m in get_args(Model) if m != DIGITS_MODEL]
    assert refused.value.expected == " or ".join(repr(m) for m in others) + " for 32x32 images"
