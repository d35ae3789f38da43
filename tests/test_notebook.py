"""Your function from a real Jupyter kernel, on the local executor (issue 30): a function defined in a
cell is handed over as it is (pickled by value into the run folder), trains on 2 local ranks with its
typed config, fails with its own message and traceback in the notebook, resumes from the command line,
ends bitwise equal to an uninterrupted run after two stops, and a handle survives a kernel restart.
The kernel never imports torch for any of it. One kernel serves the file (a module fixture)."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import run_submit
from tests.notebook import Kernel
from tests.test_user_code import logged
from trainer.rank.checkpoint import same_weights  # (the same comparisons as for a module's function)

# A cell of a notebook: a typed config and a training function on the public API (tests/userpkg/tiny.py's
# model and data, smaller); torch and trainer.api are imported inside it, where it runs.
TRAIN = '''
from dataclasses import dataclass
from launcher.client import attach, runs, submit, sweep, RunFailed

@dataclass
class Config:
    lr: float = 0.1
    epochs: int = 3

def train(ctx, config: Config) -> dict:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from trainer.api import ResumableSampler, epoch_and_skip, steps_per_epoch
    torch.manual_seed(0)
    gen, samples, batch = torch.Generator().manual_seed(0), 256, 16
    labels = torch.arange(samples) % 4
    data = TensorDataset(torch.randn(4, 8, generator=gen)[labels] * 2 + torch.randn(samples, 8, generator=gen), labels)
    net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
    model = nn.parallel.DistributedDataParallel(net) if ctx.distributed else net
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=0.9)
    per_epoch = steps_per_epoch(samples, ctx.world_size, batch)
    total = per_epoch * config.epochs
    sampler = ResumableSampler(data, ctx, shuffle=True, seed=1)
    step = ctx.resume(model=net, optimizer=optimizer)
    while step < total:
        epoch, skip = epoch_and_skip(step, per_epoch, batch)
        sampler.set_epoch(epoch, skip=skip)
        for x, y in DataLoader(data, batch_size=batch, sampler=sampler, generator=torch.Generator()):
            ctx.step_boundary(step)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
        ctx.log({"epoch": epoch + 1, "train_loss": loss.item()}, step)
    if ctx.is_main:
        torch.save(net.state_dict(), ctx.run_dir / "weights.pt")
    return {"steps": step, "train_loss": loss.item(), "config_type": type(config).__name__}

def flaky(ctx, config):
    if ctx.rank == config["fail_rank"]:
        raise ValueError(f"no data for rank {ctx.rank}")
    return {"rank": ctx.rank, "fail_rank": config["fail_rank"]}
'''
# Submitted together at the start, so that they run side by side (each test then waits for its own).
SUBMITTED = '''
run = submit(train)
stopped = submit(train, sets=["job.interrupt_at=13"], rerun=True)  # run's twin (one signature): a run of its own
failing = submit(flaky, config={"fail_rank": 1})
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    folder = tmp_path_factory.mktemp("notebook")
    kernel = Kernel(folder)
    for cell in (TRAIN, SUBMITTED):
        shown = kernel.run(cell)
        assert shown.error is None, shown.text
    try:
        yield kernel
    finally:
        kernel.stop()


def test_a_cell_function_trains_on_two_local_ranks_with_its_typed_config(kernel: Kernel) -> None:
    result = kernel.value("run.result(timeout=900)")
    assert result["world_size"] == 2 and len(result["nodes"]) == 2 and result["steps"] == 24
    assert result["config_type"] == "Config"  # the cell's own dataclass, built from config= on every rank
    run_dir = Path(result["run_dir"])
    assert run_dir.parent == kernel.folder / "runs"
    pickle_file = run_dir / "function.pkl"
    assert stat.S_IMODE(pickle_file.stat().st_mode) == 0o600  # private, like the rest of the run folder
    assert "function: __main__:train" in (run_dir / "job.yaml").read_text()
    assert [r["epoch"] for r in logged(run_dir)] == [1, 2, 3]
    # The notebook's own process: no torch, no submitit (the engine and the ranks are other processes).
    assert kernel.value("import sys; sorted(m for m in ('torch', 'submitit') if m in sys.modules)") == []


def test_a_function_that_raises_on_rank_1_shows_its_own_message_and_resumes_from_the_command_line(
        kernel: Kernel) -> None:
    shown = kernel.run("failing.result(timeout=900)")
    assert shown.error is not None and shown.error[0] == "RunFailed", shown.text
    assert "rank 1 raised ValueError: no data for rank 1" in shown.error[1]
    # Its traceback is the cell's: the line that raised, not the client's frames.
    assert 'raise ValueError(f"no data for rank {ctx.rank}")' in shown.text and "handles.py" not in shown.text
    caught = kernel.value('''
try:
    failing.result()
except RunFailed as err:
    caught = (err.rank, err.error_type, err.error_message, "in flaky" in err.details)
caught''')
    assert caught == (1, "ValueError", "no data for rank 1", True)
    # `--resume RUN` from the command line runs the same pickled function (with one config key changed).
    run_dir = Path(kernel.value("str(failing.run_dir)"))
    resumed = run_submit(["--resume", str(run_dir), "--set", "job.config.fail_rank=-1", "--json"], cwd=kernel.folder,
                         timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert kernel.value("failing.result(timeout=300)['fail_rank']") == -1


def test_a_cell_function_stopped_mid_epoch_ends_bitwise_equal_to_an_uninterrupted_run(kernel: Kernel) -> None:
    """Stopped at step 13 (2 ranks: 8 steps per epoch, 3 epochs: mid-epoch 2): checkpoint, requeue (the local
    executor restarts the tasks), resume; the same pickled function on every attempt. (`run` is the
    uninterrupted one.)"""
    both = kernel.value('[str(run.result(timeout=900)["run_dir"]), stopped.result(timeout=900)["restarts"], '
                        'str(stopped.run_dir)]')
    reference, restarts, stopped = Path(both[0]), both[1], Path(both[2])
    assert restarts == 1
    events = [json.loads(line) for line in (stopped / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "resumed"] == [13]
    assert same_weights(reference / "weights.pt", stopped / "weights.pt")
    assert logged(reference) == logged(stopped)


def test_attach_after_a_kernel_restart_gives_the_same_handle_and_runs_lists_it(kernel: Kernel) -> None:
    """(Last in the file: it restarts the shared kernel.)"""
    run_dir = kernel.value("str(run.run_dir)")
    kernel.restart()
    again = kernel.value(f'''
from launcher.client import attach, runs
run = attach({run_dir!r})
listed = [row["run_dir"] for row in runs(n=50)]
[repr(run), run.result()["steps"], run.state(), {run_dir!r} in listed, attach(run.run_dir.name) == run]''')
    assert again == [f"Run({run_dir!r})", 24, "completed", True, True]
    assert kernel.value("import sys; 'torch' in sys.modules") is False


README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_the_readme_notebook_example_runs_as_written(kernel: Kernel) -> None:
    """README's "Your own code" starts with the notebook form: its cell, as written (the kernel restarted)."""
    section = README[README.index("## Your own code"):README.index("## The nodes' Python")]
    cell = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "run = submit(train, config=" in cell
    shown = kernel.run(cell)
    assert shown.error is None, shown.text
    assert abs(float(shown.text.strip().splitlines()[-1]) - 3.0) < 0.05


def test_the_command_line_and_the_api_refuse_a_job_file_naming_a_function_by_value(tmp_path: Path) -> None:
    """`function:` is the API's: a job file cannot name a pickle it does not hand over (exit 2, no run folder)."""
    (tmp_path / "job.yaml").write_text("function: __main__:train\n")
    done = run_submit(["--job", "job.yaml"], cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "names a function pickled by value, which only launcher.client.submit(fn) hands over" in done.stderr
    assert not (tmp_path / "runs").exists()
    bad = run_submit(["--events", "99"], cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --events 99: not an open file descriptor")
