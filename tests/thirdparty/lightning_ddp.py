"""A PyTorch Lightning script as its users write it, unchanged: `Trainer(accelerator="cpu", devices=...,
strategy="ddp")` on random data for a few steps. Run as `script:` with `args: [DEVICES, NUM_NODES]`
(`2` or `auto`); every rank prints one JSON line with what Lightning made of its environment."""

import json
import sys

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
        self.batches = 0

    def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN201 - Lightning's own signature
        x, y = batch
        self.batches += 1
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):  # noqa: ANN201
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    devices = sys.argv[1] if len(sys.argv) > 1 else "auto"
    num_nodes = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    data = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=16)
    model = Classifier()
    trainer = L.Trainer(accelerator="cpu", devices=int(devices) if devices.isdigit() else devices,
                        num_nodes=num_nodes, strategy="ddp", max_steps=4, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, data)
    print(json.dumps({"lightning_rank": trainer.global_rank, "lightning_world": trainer.world_size,
                      "trained_batches": model.batches, "steps": trainer.global_step,
                      "environment": type(trainer.strategy.cluster_environment).__name__}), flush=True)
