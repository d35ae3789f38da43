"""The seed program: the blog's DDP training of LeNet on CIFAR-10, the baseline the trainer is measured against.

Kept as written (LeNet, torchvision CIFAR10 with ToTensor + Normalize per sample in a DataLoader,
DistributedSampler, DDP over gloo, SGD lr 0.001 momentum 0.9, batch 64 per rank, 10 epochs,
torch's default number of threads), changed only so that it runs here and can be measured:

1. One process per rank started by `torch.multiprocessing.spawn`, each calling
   `init_process_group` once, instead of the deprecated `torch.distributed.launch` (which also
   set OMP_NUM_THREADS=1 behind the user's back; the seed as written did not ask for that, and
   `--threads 1` shows what it would have changed).
2. CIFAR-10 is read from a local copy in torchvision's format (`--data`): no network here, and a
   copy made locally has other MD5 sums than torchvision's, so only the files' presence is checked.
3. Measurement only, outside the seed's own code path: wall-clock timestamps, `--epochs` /
   `--max-steps` to cut a throughput run short, and `--eval` to measure test accuracy after every
   epoch (rank 0, time subtracted from the reported training time). Rank 0 prints one JSON line.

    python benchmarks/seed_program.py --data ~/.cache/ddp-bench/cifar10-jpeg --eval
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
import torchvision.transforms as transforms
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# The seed's LeNet, layer for layer, and torchvision's CIFAR-10 reader without the MD5 check (fix 2): the
# same files the built-in recipe and the examples take them from.
from trainer.recipes.data import cifar10_class  # noqa: E402
from trainer.recipes.models import LeNet as Net  # noqa: E402

LocalCIFAR10 = cifar10_class(verify_checksums=False)


def evaluate(net, testloader):
    correct = total = 0
    with torch.no_grad():
        for images, labels in testloader:
            outputs = net(images)
            _, predicted = torch.max(outputs.data, 1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()
    return correct / total


def train(rank, world_size, args, started):
    if args.threads:
        torch.set_num_threads(args.threads)
    # Fix 1: once per child process (env:// reads MASTER_ADDR / MASTER_PORT set by the parent).
    dist.init_process_group(backend="gloo", init_method="env://", rank=rank, world_size=world_size)
    ready = time.time()

    transform = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
    trainset = LocalCIFAR10(root=args.data, train=True, download=False, transform=transform)
    sampler = DistributedSampler(trainset)
    trainloader = torch.utils.data.DataLoader(trainset, batch_size=64, sampler=sampler)

    net = Net()
    ddp_net = DDP(net)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(ddp_net.parameters(), lr=0.001, momentum=0.9)

    testloader = None
    if args.eval and rank == 0:
        testset = LocalCIFAR10(root=args.data, train=False, download=False, transform=transform)
        testloader = torch.utils.data.DataLoader(testset, batch_size=64, shuffle=False)

    history = []
    train_time = 0.0
    eval_time = 0.0
    images = 0
    data_ready = time.time()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        running_loss = 0.0
        epoch_start = time.perf_counter()
        for i, data in enumerate(trainloader, 0):
            inputs, labels = data
            optimizer.zero_grad()
            outputs = ddp_net(inputs)
            loss = criterion(outputs, labels)
            loss.backward()
            optimizer.step()
            images += len(labels)
            running_loss += loss.item()
            if i % 200 == 199 and rank == 0:
                print(f"[{epoch + 1}, {i + 1:5d}] loss: {running_loss / 200:.3f}", flush=True)
                running_loss = 0.0
            if args.max_steps and i + 1 >= args.max_steps:
                break
        train_time += time.perf_counter() - epoch_start
        entry = {"epoch": epoch + 1, "train_time_s": train_time, "images_per_rank": images}
        if args.eval:
            eval_start = time.perf_counter()
            if rank == 0:
                entry["test_accuracy"] = evaluate(net, testloader)
            dist.barrier()
            eval_time += time.perf_counter() - eval_start
        # Wall-clock time since launch, without the evaluations the seed itself never ran.
        entry["elapsed_s"] = time.time() - started - eval_time
        history.append(entry)
        if rank == 0:
            print(f"epoch {epoch + 1}: {json.dumps(entry)}", flush=True)
    if rank == 0:
        print("Finished Training", flush=True)
        summary = {
            "world_size": world_size, "threads": torch.get_num_threads(),
            "images_per_second": images * world_size / train_time, "train_time_s": train_time,
            "startup_s": ready - started, "data_ready_s": data_ready - started,
            "total_s": time.time() - started - eval_time, "epochs": history,
        }
        print(json.dumps(summary), flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="folder that holds cifar-10-batches-py")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=0, help="stop each epoch after N steps (0: full epoch)")
    parser.add_argument("--eval", action="store_true", help="test accuracy after every epoch (not timed)")
    parser.add_argument("--threads", type=int, default=0, help="threads per rank (0: torch's default, as written)")
    args = parser.parse_args()
    started = time.time()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    mp.spawn(train, args=(args.world_size, args, started), nprocs=args.world_size)


if __name__ == "__main__":
    main()
