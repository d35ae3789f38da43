"""Training semantics a user relies on, observed from outside the training loop.

Each test runs `trainer.runners.dispatch.run_job` (in this process, or on 2 ranks spawned here with gloo on
127.0.0.1) and checks what training actually did: which samples each rank consumed in which order,
what loss it reported, what weights it ended with. The model's inputs and outputs in training mode
are watched through torch's global forward hook (tests/semantics_worker.py), so nothing here reads
the Trainer's own attributes.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from tests.semantics_worker import free_ports, recording, spawn_two_ranks
from trainer.config.job import JobConfig, RunSettings
from trainer.recipes import data
from trainer.runners.dispatch import run_job

WORLD = 2
# A non-default seed: the data order must follow the job's seed.
BASE: dict[str, Any] = {"name": "semantics", "model": "mlp", "dataset": "digits", "epochs": 2,
                        "batch_size_per_rank": 64, "lr": 0.05, "momentum": 0.9, "seed": 3,
                        "eval_every_epochs": 1, "log_every_steps": 100000}


# ----- helpers -------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def digits() -> data.ImageTensors:
    return data.load_digits()


@functools.lru_cache(maxsize=1)
def _index_of_image() -> dict[bytes, int]:
    images = digits().train_x.reshape(len(digits().train_x), -1)
    table = {bytes(row.numpy()): i for i, row in enumerate(images)}
    assert len(table) == len(images), "digits training images are no longer unique: the lookup needs another key"
    return table


def consumed_indices(inputs: list[torch.Tensor]) -> list[int]:
    """The training-set index of every image the model was fed (normalised floats -> uint8 -> index)."""
    ds = digits()
    x = torch.cat([t.reshape(len(t), -1) for t in inputs]).double()
    pixels = (x * ds.std.double() + ds.mean.double()) * 255
    assert (pixels - pixels.round()).abs().max() < 1e-3, "model inputs are not normalised digits images"
    table = _index_of_image()
    rows = pixels.round().to(torch.uint8)
    try:
        return [table[bytes(row.numpy())] for row in rows]
    except KeyError:
        raise AssertionError("the model was fed an image that is not in the training set") from None


def sampler_order(world_size: int, rank: int, epoch: int, seed: int) -> list[int]:
    """What torch's own DistributedSampler gives `rank` in `epoch` (shuffle on, set_epoch called)."""
    sampler = DistributedSampler(range(len(digits().train_y)), num_replicas=world_size, rank=rank,
                                 shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    return list(sampler)


def reported_epochs(run_dir: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def in_process(run_dir: Path, **job: Any) -> dict[str, Any]:
    """One rank, in this process, whatever launcher variables the environment holds."""
    return run_job(JobConfig(**{**BASE, **job}), RunSettings(run_dir=str(run_dir)), environ={})


def step_losses(outputs: list[torch.Tensor], inputs: list[torch.Tensor], label_smoothing: float = 0.0) -> list[float]:
    """Each forward's loss recomputed from its logits and the labels of the images it was fed."""
    labels = digits().train_y
    return [F.cross_entropy(out.double(), labels[consumed_indices([x])], label_smoothing=label_smoothing).item()
            for out, x in zip(outputs, inputs)]


def per_rank_steps_per_epoch(batch: int) -> int:
    return math.ceil(math.ceil(len(digits().train_y) / WORLD) / batch)


# ----- 2 ranks: one spawn serves the data-order, loss, accumulation and resume tests ----------------

# The resume test's runs: the MLP with dropout (each rank draws its own masks from the global RNG),
# 22 steps per epoch, interrupted mid-epoch 1 (step 7) and mid-epoch 2 (step 30).
DROPOUT = {**BASE, "batch_size_per_rank": 32, "checkpoint_every_steps": 0}
INTERRUPTED = {**DROPOUT, "interrupt_at": "7,30"}


@pytest.fixture(scope="module")
def two_rank_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Runs in one pair of fresh processes (spawning costs seconds); {tag: [rank 0's, rank 1's record]}."""
    root = tmp_path_factory.mktemp("two-ranks")
    ports = free_ports(4)
    tasks = [
        {"tag": "plain", "job": BASE, "run_dir": str(root / "plain"), "ports": ports[:1]},
        {"tag": "accum2", "job": {**BASE, "grad_accum_steps": 2}, "run_dir": str(root / "accum2"),
         "ports": ports[1:2]},
        {"tag": "dropout", "job": DROPOUT, "run_dir": str(root / "dropout"), "ports": ports[2:3], "dropout": True},
        # Only the first attempt, up to its stop: test_a_resumed_run... resumes it in new processes.
        {"tag": "interrupted", "job": INTERRUPTED, "run_dir": str(root / "interrupted"), "ports": ports[3:4],
         "dropout": True, "stop_after_first": True},
    ]
    return spawn_two_ranks(tasks, root / "records")


def test_each_rank_consumes_the_distributed_sampler_order_reshuffled_every_epoch(two_rank_runs) -> None:
    per_rank = math.ceil(len(digits().train_y) / WORLD)
    for rank, record in enumerate(two_rank_runs["plain"]):
        consumed = consumed_indices(record["inputs"])
        assert len(consumed) == BASE["epochs"] * per_rank, f"rank {rank} consumed {len(consumed)} samples"
        by_epoch = [consumed[e * per_rank:(e + 1) * per_rank] for e in range(BASE["epochs"])]
        assert by_epoch[0] != by_epoch[1], f"rank {rank} saw the same order in epochs 1 and 2 (no reshuffle)"
        for epoch, seen in enumerate(by_epoch):
            assert seen == sampler_order(WORLD, rank, epoch, BASE["seed"]), \
                f"rank {rank}, epoch {epoch + 1}: not DistributedSampler's order with set_epoch({epoch})"


def test_reported_train_loss_is_the_mean_over_ranks_of_each_ranks_mean_step_loss(two_rank_runs) -> None:
    records = two_rank_runs["plain"]
    steps = per_rank_steps_per_epoch(BASE["batch_size_per_rank"])
    reported = reported_epochs(records[0]["run_dir"])
    assert [m["epoch"] for m in reported] == list(range(1, BASE["epochs"] + 1))
    spread = []
    for epoch, metrics in enumerate(reported):
        rank_means = []
        for record in records:
            window = slice(epoch * steps, (epoch + 1) * steps)
            losses = step_losses(record["outputs"][window], record["inputs"][window])
            assert len(losses) == steps
            rank_means.append(sum(losses) / len(losses))
        spread.append(abs(rank_means[0] - rank_means[1]))
        expected = sum(rank_means) / WORLD
        assert metrics["train_loss"] == pytest.approx(expected, rel=1e-5), \
            f"epoch {epoch + 1}: reported {metrics['train_loss']}, per-rank means {rank_means}"
    # The ranks' means differ (by far more than the tolerance), so neither rank's own mean nor the
    # sum over ranks passes for the mean over ranks.
    assert max(spread) > 1e-3, spread
    # Every rank returns the same final train loss: the last epoch's mean over ranks.
    for record in records:
        assert record["result"]["train_loss"] == pytest.approx(reported[-1]["train_loss"], rel=1e-6)


def test_gradient_accumulation_on_two_ranks_matches_one_full_batch(two_rank_runs) -> None:
    plain, accum = two_rank_runs["plain"], two_rank_runs["accum2"]
    steps = per_rank_steps_per_epoch(BASE["batch_size_per_rank"]) * BASE["epochs"]
    for rank in range(WORLD):
        sizes = [len(x) for x in accum[rank]["inputs"]]
        # Each step's batch of 64 is fed as 2 micro-batches of at most 32.
        assert len(sizes) == 2 * steps and max(sizes) == BASE["batch_size_per_rank"] // 2, sizes
        assert consumed_indices(accum[rank]["inputs"]) == consumed_indices(plain[rank]["inputs"])
    # The ranks stay in sync (the gradients are all-reduced once per step) ...
    for key, value in accum[0]["state"].items():
        torch.testing.assert_close(accum[1]["state"][key], value, rtol=1e-6, atol=1e-7, msg=f"ranks differ: {key}")
    # ... and end where the same run without accumulation ends.
    for key, value in plain[0]["state"].items():
        torch.testing.assert_close(accum[0]["state"][key], value, rtol=1e-4, atol=1e-5,
                                   msg=f"grad_accum_steps 2 differs from 1: {key}")
    assert accum[0]["result"]["train_loss"] == pytest.approx(plain[0]["result"]["train_loss"], rel=1e-4)


# ----- resume: each rank's RNG comes back ----------------------------------------------------------

def test_a_resumed_run_with_dropout_ends_bitwise_identical_on_every_rank(two_rank_runs, tmp_path: Path) -> None:
    """The model draws dropout masks from the global RNG, each rank from its own stream. The run
    stopped at step 7 (in the fixture's processes) is resumed in new processes, as a requeued job
    is, stops again at step 30, resumes, and must end exactly where the uninterrupted run ended."""
    first = two_rank_runs["interrupted"]
    assert [r["stops"] for r in first] == [[7], [7]]
    resumed_dir = tmp_path / "interrupted"
    shutil.copytree(first[0]["run_dir"], resumed_dir)  # the fixture's copy stays as it was
    (resumed,) = spawn_two_ranks([
        {"tag": "interrupted", "job": INTERRUPTED, "run_dir": str(resumed_dir), "ports": free_ports(2),
         "dropout": True},
    ], tmp_path / "records").values()
    assert [r["stops"] for r in resumed] == [[30], [30]]
    for rank in range(WORLD):
        reference, final = two_rank_runs["dropout"][rank]["state"], resumed[rank]["state"]
        assert "net.7.weight" in reference, "the dropout model was not used"
        assert reference.keys() == final.keys()
        different = [k for k in reference if not torch.equal(reference[k], final[k])]
        assert different == [], f"rank {rank}: resumed weights differ from the uninterrupted run's: {different}"
    reference_dir = Path(two_rank_runs["dropout"][0]["run_dir"])
    saved_ref, saved_resumed = torch.load(reference_dir / "model_final.pt"), torch.load(resumed_dir / "model_final.pt")
    assert all(torch.equal(saved_ref[k], saved_resumed[k]) for k in saved_ref)
    assert [m["train_loss"] for m in reported_epochs(reference_dir)] == \
        [m["train_loss"] for m in reported_epochs(resumed_dir)]


# ----- job options, in process -----------------------------------------------------------------------

def test_adamw_trains_and_differs_from_sgd(tmp_path: Path) -> None:
    sgd = in_process(tmp_path / "sgd", optimizer="sgd", lr=0.003)
    adamw = in_process(tmp_path / "adamw", optimizer="adamw", lr=0.003)
    assert adamw["test_accuracy"] > 0.5  # chance is 0.1
    w_sgd = torch.load(tmp_path / "sgd" / "model_final.pt")
    w_adamw = torch.load(tmp_path / "adamw" / "model_final.pt")
    assert any(not torch.allclose(w_sgd[k], w_adamw[k], rtol=1e-3, atol=1e-4) for k in w_sgd)
    # Adam's per-parameter step sizes learn far faster than SGD at the same small lr.
    assert adamw["train_loss"] < sgd["train_loss"] - 0.1, (adamw["train_loss"], sgd["train_loss"])


def test_stop_at_accuracy_stops_at_the_first_epoch_that_reaches_it(tmp_path: Path) -> None:
    target = 0.95
    result = in_process(tmp_path / "run", epochs=10, stop_at_accuracy=target)
    epochs = reported_epochs(tmp_path / "run")
    assert result["epochs"] < 10 and result["epochs"] == len(epochs) == epochs[-1]["epoch"]
    accuracies = [m["test_accuracy"] for m in epochs]
    assert accuracies[-1] >= target and result["test_accuracy"] >= target, accuracies
    assert len(accuracies) > 1 and all(a < target for a in accuracies[:-1]), accuracies
    assert (tmp_path / "run" / "model_final.pt").is_file()


def test_label_smoothing_changes_the_train_loss_as_cross_entropy_does(tmp_path: Path) -> None:
    smoothing = 0.2
    with recording() as rec:
        result = in_process(tmp_path / "run", epochs=1, label_smoothing=smoothing)
    assert len(rec.outputs) == math.ceil(len(digits().train_y) / BASE["batch_size_per_rank"])
    smoothed = step_losses(rec.outputs, rec.inputs, smoothing)
    plain = step_losses(rec.outputs, rec.inputs, 0.0)
    expected = sum(smoothed) / len(smoothed)
    assert abs(expected - sum(plain) / len(plain)) > 0.05  # smoothing makes a visible difference here
    assert result["train_loss"] == pytest.approx(expected, rel=1e-5), (result["train_loss"], expected)
