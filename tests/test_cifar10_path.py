"""The seed's job path: CIFAR-10 through torchvision's CIFAR10 class, from files written here in its format."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import last_json, run_submit
from trainer.recipes.cifar_files import random_cifar10


def test_cifar10_job_trains_lenet_from_a_local_cifar10_copy(tmp_path: Path) -> None:
    random_cifar10(tmp_path / "data", n_train=600, n_test=130)  # 130: the test set does not split evenly
    proc = run_submit(["--job", "cifar10-seed", "--set", "job.epochs=4", "--set", "job.lr=0.05",
                       "--set", "job.verify_checksums=false", "--set", "job.download=false",
                       "--set", f"profile.data_dir={tmp_path / 'data'}", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = last_json(proc.stdout)
    assert result["world_size"] == 2 and result["epochs"] == 4
    # Every test image is evaluated exactly once across the two ranks (65 + 65 of 130).
    metrics = [line for line in (Path(result["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert '"test_count": 130' in metrics[-1]
    assert result["test_accuracy"] > 0.3  # the colour tint is learnable: far above chance (0.1)


def test_cifar10_without_network_says_how_to_point_at_a_copy(tmp_path: Path) -> None:
    """No network here: the download fails on the downloading rank and every rank stops with the advice."""
    proc = run_submit(["--job", "cifar10", "--set", f"profile.data_dir={tmp_path / 'nodata'}", "--json"],
                      cwd=tmp_path, env={"https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"})
    assert proc.returncode == 1
    assert "CIFAR-10 is not available under" in proc.stderr
    assert "--set job.data_dir=PATH" in proc.stderr
