"""What a Ray pool may ask for, checked before Ray starts (no Ray here).

* Per-trial resources Ray cannot honour are refused in one line: fractions
  near zero (Ray keeps four decimals, so ``1e-9`` GPUs would be no GPU at
  all, and a hundred trials on one device is no real request) and fractional
  amounts above one (Ray accepts only whole numbers there).
* ``--workers`` on a local Ray is capped at what this machine holds: its CPUs
  divided by ``--cpus-per-trial``, and its available memory at about
  ``WORKER_MEMORY`` bytes per idle worker (torch and the corpus loaded).
  Each worker is a process, so 12 workers on 2 cores cost 3 GB and only
  queue behind each other.  A cluster joined with ``--address`` is not
  capped: a worker that cannot be placed there is given up after
  ``--worker-timeout`` (see docs/reliability.md).
* An ``--address`` that accepts connections but is not a Ray cluster (a web
  server, say) is refused within seconds: Ray's own client would retry it
  for a minute or more.  Ray's GCS is a gRPC server, so it must answer the
  HTTP/2 connection preface with a SETTINGS frame.
"""

from __future__ import annotations

import math
import os
import socket

from nas.errors import UserError

#: the smallest share of a CPU or GPU a trial may ask for
MIN_FRACTION = 0.01
#: memory of one idle worker process (torch imported, the corpus loaded), measured: 12 workers, 3 GB
WORKER_MEMORY = 0.3e9
#: seconds an --address has to answer the HTTP/2 preface
PROBE_TIMEOUT = 5.0

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # length 0, type SETTINGS, no flags, stream 0


def check_trial_resources(cpus_per_trial: float, gpus_per_trial: float) -> None:
    """Refuse per-trial amounts that Ray would reject or round to nothing."""
    # 0 is none at all (the settings refuse 0 CPUs from the command line; a pool may be built with it)
    for flag, value in (("--cpus-per-trial", cpus_per_trial), ("--gpus-per-trial", gpus_per_trial)):
        if 0 < value < MIN_FRACTION:
            raise UserError(f"{flag} {value:g} is too small: at least {MIN_FRACTION:g} (a hundredth of one)")
        if value > 1 and value != int(value):
            raise UserError(f"{flag} {value:g}: above 1 it must be a whole number (Ray's rule)")


def available_memory() -> float | None:
    """Bytes of memory available for new processes (Linux ``MemAvailable``), None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def local_cpus(cpus_per_trial: float) -> int:
    """CPUs a local Ray is started with: the machine's, or one trial's if it asks for more."""
    return max(os.cpu_count() or 1, math.ceil(cpus_per_trial))


def fit_local_workers(
    n_workers: int, cpus_per_trial: float, cpus: int, memory: float | None
) -> tuple[int, str]:
    """How many of ``n_workers`` a local machine holds, and a line saying so when that is fewer."""
    by_cpu = max(1, int(cpus / cpus_per_trial + 1e-9))
    by_memory = n_workers if memory is None else max(1, int(memory / WORKER_MEMORY))
    fit = min(n_workers, by_cpu, by_memory)
    if fit == n_workers:
        return n_workers, ""
    why = (
        f"{cpus} CPU(s) at --cpus-per-trial {cpus_per_trial:g}"
        if by_cpu <= by_memory
        else f"{memory / 1e9:.1f} GB of memory available at ~{WORKER_MEMORY / 1e9:g} GB per worker"
    )
    return fit, f"--workers {n_workers}: this machine holds {fit} ({why}); running {fit} worker(s)"


def check_speaks_grpc(address: str) -> None:
    """Refuse an ``--address`` HOST:PORT whose server does not speak HTTP/2 (so is not Ray's GCS).

    ``auto`` and ``ray://`` client addresses are left to Ray.  Interrupted by signals
    like any socket call, so SIGTERM stops the driver while it waits.
    """
    if address in ("auto", "local") or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    answer = b""
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT) as sock:
            sock.sendall(_PREFACE + _EMPTY_SETTINGS)
            while len(answer) < 9:
                chunk = sock.recv(9 - len(answer))
                if not chunk:
                    break
                answer += chunk
    except (TimeoutError, ConnectionResetError, BrokenPipeError):
        pass  # it took the connection but did not answer as gRPC would: judged below
    except (OSError, ValueError) as err:
        raise UserError(f"--address {address!r}: cannot reach it ({err}); is the Ray head running?") from None
    if len(answer) < 9 or answer[3] != 0x04:
        said = answer.split(b"\r\n", 1)[0].decode("ascii", "replace")[:60] if answer else "nothing"
        raise UserError(
            f"--address {address!r} is not a Ray cluster (it answered {said!r} to a gRPC connection, "
            f"within {PROBE_TIMEOUT:g} s); give the Ray head's address, e.g. 10.0.0.1:6379"
        )
