"""Where a candidate trains: the device, what to record about it, and giving its memory back."""

from __future__ import annotations

import gc
import platform
from pathlib import Path

import torch

from nas.errors import UserError
from nas.spec.sections import DEVICES  # the one list of device names, which the spec checks too


def resolve_device(device: str) -> torch.device:
    """``auto``: CUDA when available, else CPU."""
    if device not in DEVICES and not str(device).startswith("cuda:"):
        raise UserError(f"unknown device {device!r}; valid: {', '.join(DEVICES)}")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device {device!r} requested but CUDA is not available; use --device cpu or auto")
    return torch.device(device)


def setup_device(device: str, threads: int | None) -> torch.device:
    """Resolve ``device``, set torch's CPU threads, allow TF32 matmuls on CUDA, reset peak-memory stats."""
    dev = resolve_device(device)
    if threads is not None:
        torch.set_num_threads(threads)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    reset_peak_memory(dev)
    return dev


def reset_peak_memory(device: torch.device) -> None:
    """Start :func:`peak_memory_bytes` afresh on a CUDA device (a no-op on the CPU): a trial's peak
    then counts only what it allocates from here on (not a failed compile attempt before it)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def sync(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model name where the system says it."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()


def peak_memory_bytes(device: torch.device) -> int | None:
    """Peak memory allocated on a CUDA device since the last :func:`reset_peak_memory`; None on the CPU."""
    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None


def release_memory() -> None:
    """Give back what a finished or failed trial held, so the next trial in this process has it.

    Tensors caught in reference cycles (frames of a traceback, a module and its
    hooks) wait for the cycle collector; the CUDA caching allocator keeps freed
    blocks for this process unless emptied, which would starve the other
    trials packed on the same GPU.
    """
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
