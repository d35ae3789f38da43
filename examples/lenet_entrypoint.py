"""The blog's LeNet / CIFAR-10 training as an entrypoint on the public API (trainer.api), with exact
resume: checkpoint and resume of model and optimizer with every rank's RNG states, a stop check at
each step boundary (requeue on preemption or the time limit), and a sampler that resumes mid-epoch.
The network and the CIFAR-10 reader are the built-in recipe's (trainer.recipes: the blog's LeNet,
layer for layer), as examples/seed_cifar10.py uses them.

    python submit.py --job examples/lenet-entrypoint.yaml
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision.transforms as transforms

from trainer.api import Context, ResumableSampler, epoch_and_skip
from trainer.recipes.data import cifar10_class
from trainer.recipes.models import LeNet


@dataclass
class LeNetConfig:
    data: str = "data"
    epochs: int = 10
    batch_size: int = 64
    lr: float = 0.001
    momentum: float = 0.9
    steps_per_epoch: int = 0  # 0: the whole epoch (tests cut it short)
    no_md5: bool = False  # a locally made copy of CIFAR-10 (other bytes, same layout)


def cifar(config: LeNetConfig, ctx: Context, train: bool):
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
    kind = cifar10_class(verify_checksums=not config.no_md5)
    if ctx.local_rank == 0:  # one download per node; the node's other ranks wait
        data = kind(root=config.data, train=train, download=not config.no_md5, transform=transform)
    if ctx.distributed:
        dist.barrier()
    if ctx.local_rank != 0:
        data = kind(root=config.data, train=train, download=False, transform=transform)
    return data


def train(ctx: Context, config: LeNetConfig) -> dict:
    torch.manual_seed(0)
    net = LeNet().to(ctx.device)
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
