"""Data-parallel training (DistributedDataParallel) written as a user would, for torchrun:

    torchrun --nproc-per-node 2 examples/train_ddp.py --steps 20
    traincast record -- torchrun --nproc-per-node 2 examples/train_ddp.py

One GPU per rank with NCCL when GPUs are available, else the CPU with gloo (one thread per
rank). Each rank trains on its own synthetic batches; DDP averages the gradients.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--hidden", type=int, default=512)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank = dist.get_rank()

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(256, args.hidden), nn.ReLU(),
        nn.Linear(args.hidden, args.hidden), nn.ReLU(),
        nn.Linear(args.hidden, 10),
    ).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None,
                                  bucket_cap_mb=1)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(1 + rank)

    try:
        for step in range(args.steps):
            x = torch.randn(args.batch_size, 256, generator=gen).to(device)
            y = torch.randint(0, 10, (args.batch_size,), generator=gen).to(device)
            optimizer.zero_grad()
            loss = loss_fn(ddp(x), y)
            loss.backward()
            optimizer.step()
            if rank == 0 and step % 10 == 0:
                print(f"step {step}: loss {loss.item():.4f}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
