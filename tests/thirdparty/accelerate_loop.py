"""A Hugging Face accelerate script as its users write it, unchanged: `Accelerator()` and `prepare` on a
model, an optimizer and a DataLoader of random data, a few steps. Every rank prints one JSON line.

One line differs from what most users write, and any torch 2.14 script that wraps a model in DDP
needs it, under torchrun too: `import torch.distributed.nn` before the process group forms. DDP's
constructor imports torch._dynamo, which imports torch.distributed.nn, which binds the live default group
into its functions' defaults; `destroy_process_group` (accelerate's `end_training`) can then never free
that group, its gloo threads live on into the interpreter's exit, and there they sometimes abort the
process ("terminate called without an active exception", status -6): twice in about ten suite runs
here (docs/scripts-environment.md)."""

import json

import torch
import torch.distributed.nn  # noqa: F401  (see the docstring)
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    batches = 0
    for step, (xb, yb) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(xb), yb)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        batches += 1
        if step == 3:
            break
    total = accelerator.reduce(torch.tensor(float(batches)), reduction="sum").item()
    print(json.dumps({"accelerate_rank": accelerator.process_index, "accelerate_world": accelerator.num_processes,
                      "distributed_type": str(accelerator.distributed_type), "batches_all_ranks": total,
                      "loss": loss.item()}), flush=True)
    accelerator.end_training()
