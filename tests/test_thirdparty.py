"""Code written for other launchers runs unchanged (issue 19): a PyTorch Lightning script and a Hugging Face
accelerate script through `script:`, and a submitit-style entrypoint (submitit's TorchDistributedEnvironment,
then its own init_process_group and destroy_process_group) with a nested config dataclass overridden by
`--set job.config.model.*`, each on 2 local ranks and on 2 dev-cluster nodes.

All six runs start at once (module-scoped): Lightning's import alone takes seconds per rank. Lightning with
`devices="auto"` runs on the cluster, where each node has one rank: "auto" is 1 CPU device, as under
`torchrun --nnodes=2 --nproc_per_node=1`. On one node with 2 ranks, "auto" is still 1 device and Lightning
refuses the world of 2 exactly as under `torchrun --nproc_per_node=2` ("the product (1 * 1) does not match
the world size (2)"), so the local run asks for `devices=2`, as a torchrun user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT, SUBMIT, last_json

pytestmark = pytest.mark.slurm

JOBS = {
    "lightning": "script: tests/thirdparty/lightning_ddp.py\ntarget_metric: steps\n",
    "accelerate": "script: tests/thirdparty/accelerate_loop.py\ntarget_metric: loss\n",
    "submitit": ('entrypoint: "tests.thirdparty.submitit_style:main"\ntarget_metric: loss\nconfig:\n'
                 "  model: {depth: 1, widths: [8], activation: tanh}\n  optim: {name: adam, lr: 0.01, betas: "
                 "[0.8, 0.9]}\n  loss_weights: {ce: 2}\n"),
}
WHERE = {
    "local": ["--profile", "local"],
    "slurm": ["--profile", "dev-cluster", "--set", "profile.nodes=2", "--wait"],
}
ARGS = {  # Lightning's (devices, num_nodes) as a torchrun user passes them for each layout
    ("lightning", "local"): ["--set", "job.args=['2', '1']"],
    ("lightning", "slurm"): ["--set", "job.args=[auto, '2']"],
    ("submitit", "local"): ["--set", "job.config.model.depth=2", "--set", "job.config.model.widths=[8, 4]"],
    ("submitit", "slurm"): ["--set", "job.config.model.depth=2", "--set", "job.config.model.widths=[8, 4]"],
}


@pytest.fixture(scope="module")
def runs(slurm_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Every (code, where) run started at once; their finished processes."""
    base = tmp_path_factory.mktemp("thirdparty")
    started = {}
    for code, text in JOBS.items():
        (base / f"{code}.yaml").write_text(f"name: {code}\n{text}")
        for where, options in WHERE.items():
            args = [sys.executable, SUBMIT, "--job", str(base / f"{code}.yaml"), *options, "--set",
                    f"profile.runs_dir={base / where}", *ARGS.get((code, where), []), "--json"]
            # From the project root, with the project on PYTHONPATH, as the other user-code tests run.
            started[code, where] = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                    text=True, env={**os.environ,
                                                                    "PYTHONPATH": str(ROOT)})
    done = {}
    for key, proc in started.items():
        out, err = proc.communicate(timeout=840)  # under pytest-timeout's 900 s, on a loaded machine
        done[key] = (proc.returncode, out, err)
    yield done


def rank_lines(result: dict, key: str) -> list[dict]:
    """Every rank's own JSON line (each rank's log), in rank order."""
    logs = sorted(Path(result["run_dir"], "logs").glob("*/*_log.out"), key=lambda p: int(p.name.split("_")[-2]))
    lines = []
    for log in logs:
        found = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{") and key in line]
        lines.append(found[-1] if found else {})
    return lines


def finished(runs: dict, code: str, where: str) -> dict:
    rc, out, err = runs[code, where]
    assert rc == 0, out[-3000:] + err[-3000:]
    result = last_json(out)
    assert result["world_size"] == 2 and result["state"] == "COMPLETED", result
    if where == "slurm":
        assert len(set(result["nodes"])) == 2, result["nodes"]
    return result


@pytest.mark.parametrize("where", sorted(WHERE))
def test_a_lightning_ddp_script_trains_on_both_ranks_in_torchruns_environment(runs: dict, where: str) -> None:
    result = finished(runs, "lightning", where)
    ranks = rank_lines(result, "lightning_rank")
    assert [r.get("lightning_rank") for r in ranks] == [0, 1], ranks
    for r in ranks:  # one world of 2, each rank trained its share, under torchrun's cluster environment
        assert r["lightning_world"] == 2 and r["steps"] == 4 and r["trained_batches"] == 4, r
        assert r["environment"] == "TorchElasticEnvironment", r


@pytest.mark.parametrize("where", sorted(WHERE))
def test_an_accelerate_script_runs_one_process_per_rank(runs: dict, where: str) -> None:
    result = finished(runs, "accelerate", where)
    assert result["accelerate_world"] == 2 and result["distributed_type"] == "DistributedType.MULTI_CPU", result
    assert result["batches_all_ranks"] == 8.0  # both ranks' 4 batches, summed by accelerate's own reduce
    assert [r.get("accelerate_rank") for r in rank_lines(result, "accelerate_rank")] == [0, 1]


@pytest.mark.parametrize("where", sorted(WHERE))
def test_a_submitit_style_entrypoint_forms_its_group_itself_with_a_nested_config(runs: dict, where: str) -> None:
    result = finished(runs, "submitit", where)
    assert result["world"] == 2 and result["ranks_seen"] == 1.0  # an all_gather over both ranks, after its init
    # The nested config from the job file and --set, as its types: Path, tuple, Enum, float values.
    assert result["depth"] == 2 and result["types_ok"] == 1.0 and result["adam"] == 1.0 and result["beta2"] == 0.9
    logs = "".join(p.read_text() for p in Path(result["run_dir"], "logs").glob("*/*_log.out"))
    assert logs.count("init_process_group(backend='gloo'): this rank is already in the job's process group "
                      "(world size 2") == 2, logs[-3000:]
    assert "trying to initialize the default process group twice" not in logs
