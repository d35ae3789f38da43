"""A three-step pipeline in a few lines of Python: prepare -> train -> evaluate, each step a run that waits
for the one before it (SLURM's afterok), the last reading what the second left in its run folder.

    python examples/pipeline.py --profile dev-cluster

The same lines work pasted into a notebook (or with `%run examples/pipeline.py --profile dev-cluster`):
the functions are handed over as they are (pickled by value), so nothing needs to be importable.
"""

import argparse
import json
from pathlib import Path

from launcher.client import submit


def prepare(ctx, config):
    """Rank 0 writes the data the next step trains on (y = 3x + 1, with noise) into this run's folder."""
    if ctx.is_main:
        import random

        rng = random.Random(config["seed"])
        points = [(x, 3 * x + 1 + rng.gauss(0, 0.05)) for x in (rng.uniform(-1, 1) for _ in range(256))]
        (ctx.run_dir / "data.json").write_text(json.dumps(points))
    return {"samples": 256}


def train(ctx, config):
    """Fits a line to the prepared data on every rank (DDP), saves it in this run's folder."""
    import torch

    torch.manual_seed(0)
    data = torch.tensor(json.loads((Path(config["data"]) / "data.json").read_text()))
    x, y = data[ctx.rank::ctx.world_size, :1], data[ctx.rank::ctx.world_size, 1:]  # each rank its share
    model = torch.nn.Linear(1, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if ctx.distributed else model
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.5)
    for step in range(config["steps"]):
        ctx.step_boundary(step)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        optimizer.step()
    ctx.log({"train_loss": loss.item()}, config["steps"])
    if ctx.is_main:
        torch.save(model.state_dict(), ctx.run_dir / "model.pt")
    return {"train_loss": loss.item()}


def evaluate(ctx, config):
    """Reads the trained model and its logged loss from the train step's run folder."""
    import torch

    trained = Path(config["trained"])
    state = torch.load(trained / "model.pt")
    logged = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    return {"slope": state["weight"].item(), "intercept": state["bias"].item(), "train_loss": logged[-1]["train_loss"]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="dev-cluster", help="a SLURM profile (dependencies are SLURM's)")
    profile = parser.parse_args().profile
    prepared = submit(prepare, profile=profile, config={"seed": 0}, sets=["profile.nodes=1"])
    trained = submit(train, profile=profile, config={"data": str(prepared.run_dir), "steps": 60}, after=[prepared])
    evaluated = submit(evaluate, profile=profile, config={"trained": str(trained.run_dir)}, after=[trained],
                       sets=["profile.nodes=1"])
    print(evaluated.result())
