"""The process group of the GPU tests under torchrun: one GPU per rank where the machine has
enough, else every rank on the GPUs there are ("shared" mode, e.g. worlds 2-4 on one GPU).

Shared mode proves correctness only (the ranks time-slice one GPU, so no timing from it means
anything): torch.distributed runs over gloo and the tests' reference collectives move CPU
copies; CUDA IPC maps one process's heap into another on the same device, so the copy-engine
and SM-copy backends run; NCCL refuses two ranks on one device, so its rows are skipped by name.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

NCCL_SKIP_REASON = "ranks share a GPU and NCCL refuses two ranks on one device"


class GpuGroup:
    def __init__(self):
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", self.rank))
        gpus = torch.cuda.device_count()
        if gpus < 1:
            raise SystemExit("no CUDA device")
        self.shared = self.world > gpus or os.environ.get("SYNCOPATE_SHARED_GPU", "0") == "1"
        self.device = torch.device("cuda", local % gpus)
        torch.cuda.set_device(self.device)
        if self.shared:
            dist.init_process_group("gloo")
        else:
            dist.init_process_group("nccl", device_id=self.device)
        self.group = dist.group.WORLD

    @property
    def mode(self) -> str:
        return f"shared ({self.world} ranks on {torch.cuda.device_count()} GPU)" if self.shared else "one GPU per rank"

    def backend_usable(self, backend: str) -> bool:
        return not (self.shared and backend == "nccl")

    def collective_tensor(self, t: torch.Tensor) -> torch.Tensor:
        """`t` where the group's collectives can take it (a CPU copy over gloo)."""
        return t.cpu() if self.shared else t

    def all_gather_cat(self, t: torch.Tensor) -> torch.Tensor:
        """torch.cat of every rank's `t` along dim 0, on t's device."""
        x = self.collective_tensor(t.contiguous())
        parts = [torch.empty_like(x) for _ in range(self.world)]
        dist.all_gather(parts, x)
        return torch.cat(parts).to(t.device)

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        x = self.collective_tensor(t.contiguous()).clone()
        dist.all_reduce(x)
        return x.to(t.device)

    def barrier(self) -> None:
        dist.barrier()
