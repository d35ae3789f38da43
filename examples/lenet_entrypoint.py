"""The blog's LeNet / CIFAR-10 training as an entrypoint on the public API (trainer.api), with exact
resume: checkpoint and resume of model and optimizer with every rank's RNG states, a stop check at
each step boundary (requeue on preemption or the time limit), and a sampler that resumes mid-epoch.

    python submit.py --job examples/lenet-entrypoint.yaml
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision
import torchvision.transforms as transforms

from trainer.api import Context, ResumableSampler, epoch_and_skip


@dataclass
class LeNetConfig:
    data: str = "data"
    epochs: int = 10
    batch_size: int = 64
    lr: float = 0.001
    momentum: float = 0.9
    steps_per_epoch: int = 0  # 0: the whole epoch (tests cut it short)
    no_md5: bool = False  # a locally made copy of CIFAR-10 (other bytes, same layout)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class LocalCIFAR10(torchvision.datasets.CIFAR10):
    def _check_integrity(self):
        folder = Path(self.root) / self.base_folder
        return all((folder / name).is_file() for name, _ in self.train_list + self.test_list)

    def _load_meta(self):
        with open(Path(self.root) / self.base_folder / self.meta["filename"], "rb") as infile:
            self.classes = pickle.load(infile, encoding="latin1")[self.meta["key"]]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}


def cifar(config: LeNetConfig, ctx: Context, train: bool):
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
    kind = LocalCIFAR10 if config.no_md5 else torchvision.datasets.CIFAR10
    if ctx.local_rank == 0:  # one download per node; the node's other ranks wait
        data = kind(root=config.data, train=train, download=not config.no_md5, transform=transform)
    if ctx.distributed:
        dist.barrier()
    if ctx.local_rank != 0:
        data = kind(root=config.data, train=train, download=False, transform=transform)
    return data


def train(ctx: Context, config: LeNetConfig) -> dict:
    torch.manual_seed(0)
    net = Net().to(ctx.device)
    model = nn.parallel.DistributedDataParallel(net) if ctx.distributed else net
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    trainset = cifar(config, ctx, train=True)
    testset = cifar(config, ctx, train=False)  # on every rank: cifar() meets the node's ranks at a barrier
    sampler = ResumableSampler(trainset, ctx, shuffle=True)
    per_epoch = -(-len(sampler) // config.batch_size)
    if config.steps_per_epoch:
        per_epoch = min(per_epoch, config.steps_per_epoch)
    step = ctx.resume(model=net, optimizer=optimizer)
    loss = torch.zeros(())
    while step < per_epoch * config.epochs:
        epoch, skip = epoch_and_skip(step, per_epoch, config.batch_size)
        sampler.set_epoch(epoch, skip=skip)
        loader = torch.utils.data.DataLoader(trainset, batch_size=config.batch_size, sampler=sampler,
                                             generator=torch.Generator())
        for inputs, labels in loader:
            if step >= per_epoch * (epoch + 1):
                break
            ctx.step_boundary(step)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(inputs.to(ctx.device)), labels.to(ctx.device))
            loss.backward()
            optimizer.step()
            step += 1
        ctx.log({"epoch": epoch + 1, "train_loss": loss.item()}, step)
    correct = total = 0
    if ctx.is_main:
        torch.save(net.state_dict(), ctx.run_dir / "weights.pt")
        net.eval()
        with torch.no_grad():
            for inputs, labels in torch.utils.data.DataLoader(testset, batch_size=256):
                correct += (net(inputs.to(ctx.device)).argmax(1).cpu() == labels).sum().item()
                total += labels.size(0)
    return {"test_accuracy": correct / max(total, 1), "train_loss": loss.item(), "steps": step}
