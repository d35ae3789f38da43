"""The blog's LeNet / CIFAR-10 DDP program as a plain torchrun-style script, corrected only where it
was wrong:

1. One `init_process_group` per process, from the environment torchrun (or `script:` jobs of
   submit.py) gives it, instead of the deprecated `torch.distributed.launch`.
2. One download per node: local rank 0 downloads, the other ranks of the node wait at a barrier
   and then read the files (several ranks writing the same archive corrupt it).
3. The network the blog forgot to move to the rank's GPU, when there is one (NCCL then; gloo on CPU).

Everything else is the blog's: LeNet, ToTensor + Normalize per sample, DistributedSampler,
batch 64 per rank, SGD lr 0.001 momentum 0.9, 10 epochs. Rank 0 ends with one JSON line. The network
is the blog's LeNet, layer for layer, as the built-in recipe defines it (trainer.recipes.models), and a
locally made copy of CIFAR-10 (`--no-md5`: other bytes, same layout) is read by the recipe's reader.

    torchrun --standalone --nproc_per_node=2 examples/seed_cifar10.py --data data
    python submit.py --job examples/seed-script.yaml           # the same file, via `script:`
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
import torchvision.transforms as transforms
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

from trainer.recipes.data import cifar10_class
from trainer.recipes.models import LeNet


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="data", help="where cifar-10-batches-py is (or is downloaded to)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=0, help="stop each epoch after N steps (0: all)")
    parser.add_argument("--no-md5", action="store_true", help="a locally made copy: skip torchvision's MD5 check")
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")  # fix 1: once, from the environment
    rank = dist.get_rank()

    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
    dataset = cifar10_class(verify_checksums=not args.no_md5)
    if local_rank == 0:  # fix 2: one download per node
        trainset = dataset(root=args.data, train=True, download=not args.no_md5, transform=transform)
    dist.barrier()
    if local_rank != 0:
        trainset = dataset(root=args.data, train=True, download=False, transform=transform)
    sampler = DistributedSampler(trainset)
    trainloader = torch.utils.data.DataLoader(trainset, batch_size=64, sampler=sampler)

    net = LeNet().to(device)  # fix 3
    ddp_net = DDP(net, device_ids=[local_rank] if use_cuda else None)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(ddp_net.parameters(), lr=0.001, momentum=0.9)

    images, train_time, running_loss = 0, 0.0, 0.0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        start = time.perf_counter()
        for i, (inputs, labels) in enumerate(trainloader):
            inputs, labels = inputs.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = criterion(ddp_net(inputs), labels)
            loss.backward()
            optimizer.step()
            images += len(labels)
            running_loss = loss.item()
            if i % 200 == 199 and rank == 0:
                print(f"[{epoch + 1}, {i + 1:5d}] loss: {running_loss:.3f}", flush=True)
            if args.max_steps and i + 1 >= args.max_steps:
                break
        train_time += time.perf_counter() - start

    if rank == 0:
        testset = dataset(root=args.data, train=False, download=False, transform=transform)
        correct = total = 0
        with torch.no_grad():
            for inputs, labels in torch.utils.data.DataLoader(testset, batch_size=256):
                predicted = net(inputs.to(device)).argmax(1).cpu()
                total += labels.size(0)
                correct += (predicted == labels).sum().item()
        print(json.dumps({"test_accuracy": correct / total, "train_loss": running_loss, "epochs": args.epochs,
                          "images_per_second": images * dist.get_world_size() / max(train_time, 1e-9),
                          "threads": torch.get_num_threads()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
