"""Where and how fast to train: device auto-detect, precision choice (with the reason), thread policy.

Facts this module is designed around (measured on an AVX2 laptop-class CPU, see SETUP-NOTES.md):
bf16/fp16 matmuls without hardware support run ~60x slower than fp32, so mixed precision is chosen
only where the hardware runs it fast; `torch.set_num_threads` is process-global and a second busy
thread (the GUI) makes 2 torch threads slower than 1, so "auto" leaves a core free when a window runs.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from desktop_app.engine.errors import UserError


def resolve_device(requested: str = "auto") -> torch.device:
    """'auto' picks CUDA, then MPS, then CPU; an explicit device that is missing is a UserError."""
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise UserError("device 'cuda' was requested but no CUDA GPU is available; use device 'auto' or 'cpu'")
    if requested == "mps" and not _mps_available():
        raise UserError("device 'mps' was requested but Apple MPS is not available; use device 'auto' or 'cpu'")
    if requested not in ("cpu", "cuda", "mps"):
        raise UserError(f"unknown device {requested!r}; choose auto, cpu, cuda or mps")
    return torch.device(requested)


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend and backend.is_available())


@dataclass
class PrecisionChoice:
    """autocast dtype (None = plain fp32), whether fp16 needs a GradScaler, and why it was chosen."""

    name: str  # fp32 | bf16 | fp16
    autocast_dtype: torch.dtype | None
    use_grad_scaler: bool
    reason: str
    warning: bool = False


def choose_precision(device: torch.device, requested: str = "auto") -> PrecisionChoice:
    """Mixed precision only where the hardware runs it fast; otherwise fp32 with the reason."""
    kind = device.type
    if kind == "cuda":
        bf16_ok = torch.cuda.is_bf16_supported()
        major, _ = torch.cuda.get_device_capability(device)
        if requested == "fp32":
            faster = "bf16" if bf16_ok else "fp16" if major >= 7 else ""
            return PrecisionChoice("fp32", None, False, "fp32 as configured" + (
                f" (this GPU computes {faster} natively: precision auto would train several times faster)"
                if faster else ""))
        if requested in ("auto", "bf16") and bf16_ok:
            return PrecisionChoice("bf16", torch.bfloat16, False,
                                   "bf16 autocast: this GPU runs bf16 matmuls natively (no loss scaling needed)")
        if requested == "bf16":
            return PrecisionChoice("fp16", torch.float16, True, "bf16 was requested but this GPU lacks bf16; "
                                   "using fp16 autocast with loss scaling instead", warning=True)
        if requested in ("auto", "fp16") and major >= 7:
            return PrecisionChoice("fp16", torch.float16, True,
                                   "fp16 autocast with loss scaling: this GPU has fp16 tensor cores but no bf16")
        if requested == "fp16":
            return PrecisionChoice("fp16", torch.float16, True, "fp16 autocast as requested (this GPU has no "
                                   "tensor cores, so expect little speed-up)", warning=True)
        return PrecisionChoice("fp32", None, False, "fp32: this GPU has neither bf16 nor fast fp16")
    if kind == "mps":
        if requested in ("fp16", "bf16"):
            return PrecisionChoice("fp16", torch.float16, False, "fp16 autocast on MPS as requested")
        return PrecisionChoice("fp32", None, False, "fp32 on MPS: autocast there is not reliably faster and "
                               "can lose accuracy; choose fp16 explicitly to try it")
    # CPU
    if requested == "bf16":
        fast = _cpu_bf16_flags()
        return PrecisionChoice("bf16", torch.bfloat16, False,
                               "bf16 autocast on CPU as requested" + ("" if fast else
                               ": this CPU has no bf16 matrix instructions (AMX/AVX512-BF16), so bf16 "
                               "matmuls may run far slower than fp32"), warning=not fast)
    if requested == "fp16":
        return PrecisionChoice("fp32", None, False, "fp16 was requested but CPUs have no fast fp16 training "
                               "path; using fp32", warning=True)
    if requested == "auto" and _cpu_has_fast_bf16():
        return PrecisionChoice("bf16", torch.bfloat16, False, "bf16 autocast: this CPU has bf16 matrix "
                               f"instructions (AMX/AVX512-BF16), measured {cpu_bf16_speedup():.1f}x the fp32 "
                               "matmul speed; weights and optimizer stay fp32")
    if requested == "fp32":
        return PrecisionChoice("fp32", None, False, "fp32 as configured")
    if _cpu_bf16_flags():
        return PrecisionChoice("fp32", None, False, f"fp32: bf16 matmuls measured only {cpu_bf16_speedup():.1f}x "
                               "the fp32 speed on this CPU, not enough to pay for the conversions")
    return PrecisionChoice("fp32", None, False, "fp32: this CPU has no bf16/fp16 matrix instructions "
                           "(AMX/AVX512-BF16); emulated half precision runs ~60x slower than fp32 on such CPUs")


def _cpu_bf16_flags() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            flags = fh.read(200_000)
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


_BF16_SPEEDUP: list[float] = []


def cpu_bf16_speedup() -> float:
    """Measured bf16 / fp32 matmul throughput on this CPU (cached; ~0.3 s the first time).

    Only measured where the CPU advertises bf16 matrix instructions (AMX / AVX512-BF16): elsewhere
    bf16 is emulated (measured ~60x slower than fp32 on an AVX2 laptop), so the answer is 0.
    """
    if not _BF16_SPEEDUP:
        if not _cpu_bf16_flags():
            _BF16_SPEEDUP.append(0.0)
        else:
            cpu = torch.device("cpu")
            fp32 = measure_matmul_peak(cpu, torch.float32, size=512, seconds=0.15)
            bf16 = measure_matmul_peak(cpu, torch.bfloat16, size=512, seconds=0.15)
            _BF16_SPEEDUP.append(bf16 / fp32 if fp32 else 0.0)
    return _BF16_SPEEDUP[0]


def _cpu_has_fast_bf16() -> bool:
    # A training step is only partly matmuls (norms, softmax, optimizer stay fp32 and memory-bound),
    # so demand a clear matmul win: measured on an AMX Xeon, 7x faster bf16 matmuls gave 1.6-2x
    # faster training steps (12M and 28M models, 1 thread).
    return cpu_bf16_speedup() >= 2.0


def cpu_name() -> str:
    """The processor's model name (Linux: /proc/cpuinfo), for benchmark records."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "?"


def cpu_cores() -> int:
    """Cores this process may use (affinity-aware where the OS tells)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def busy_cores(seconds: float = 0.25) -> float | None:
    """Cores busy right now, from the kernel's CPU counters over `seconds` (Linux); None where they cannot be read.
    Called while this process idles, it is what other programs take: unlike the 1-minute load average, it does
    not still count a job that ended a minute ago."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + waiting for I/O
        return sum(fields[:8]), idle

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    online = os.cpu_count() or 1  # /proc/stat counts every core of the machine
    return max(0.0, online * (1.0 - (idle1 - idle0) / (total1 - total0)))


def choose_threads(requested: int = 0, *, interactive: bool = False, cores: int | None = None) -> tuple[int, str]:
    """Torch CPU threads for training, and why.

    requested > 0 is honoured. 0 = auto: all cores. The window's GUI thread is idle most of the time
    (a redraw every ~100 ms), so it needs no core of its own: measured on 2 cores, training in the
    window with 2 threads kept the event loop's p99 lateness at ~3 ms and ran 1.6x the speed of 1
    thread. Only on machines with many cores (>= 8), where one core is a small share, does an
    interactive run leave one to the window.
    """
    cores = cores or cpu_cores()
    if requested > 0:
        note = f" (more than the {cores} available cores: expect slow-down)" if requested > cores else ""
        return requested, f"{requested} CPU thread(s) as configured{note}"
    if interactive and cores >= 8:
        return cores - 1, f"{cores - 1} CPU thread(s): auto, leaving 1 of {cores} cores to the window"
    where = "the window stays responsive" if interactive else "headless"
    return cores, f"{cores} CPU thread(s): auto, all cores ({where})"


def apply_threads(n: int) -> None:
    """Set torch's intra-op threads. Process-global: it affects every torch call in this process."""
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


_PEAK_CACHE: dict[tuple[str, str, int], float] = {}


def measure_matmul_peak(device: torch.device | None = None, dtype: torch.dtype = torch.float32, *,
                        size: int = 1024, seconds: float = 0.3) -> float:
    """Measured dense matmul FLOP/s on `device` (the reference for model-FLOPs utilisation).

    Cached per (device, dtype, threads): a measurement costs ~`seconds` and its answer does not change. On a CPU, n
    threads are measured at no less than one thread: a machine whose other programs keep a core busy slows a
    many-thread matmul most (every thread waits for the one without a core), and a peak measured in such a moment,
    low, made the utilisation of a training that ran once the machine was quieter read 1.0 (seen on 2 shared cores).
    """
    device = device or torch.device("cpu")
    threads = torch.get_num_threads()
    key = (str(device), str(dtype), threads)
    if key not in _PEAK_CACHE:
        best = _time_matmuls(device, dtype, size, seconds)
        if device.type == "cpu" and threads > 1:
            best = max(best, _one_thread_peak(device, dtype, size, seconds))
        _PEAK_CACHE[key] = best
    return _PEAK_CACHE[key]


def _one_thread_peak(device: torch.device, dtype: torch.dtype, size: int, seconds: float) -> float:
    """The CPU's matmul peak on one thread (cached too); the process's thread count is set back after."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        return measure_matmul_peak(device, dtype, size=size, seconds=seconds)
    finally:
        torch.set_num_threads(threads)


def _time_matmuls(device: torch.device, dtype: torch.dtype, size: int, seconds: float) -> float:
    """The best FLOP/s of batches of `size` x `size` matmuls over about `seconds`."""
    # A private generator: measuring must never move the global RNG (exact resume depends on it).
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=gen)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=gen)
    _sync(device)
    for _ in range(2):  # warm-up (allocations, kernel selection)
        a @ b
    _sync(device)
    best = 0.0
    deadline = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        for _ in range(4):
            a @ b
        _sync(device)
        dt = time.perf_counter() - t0
        best = max(best, 4 * 2 * size**3 / dt)
        if time.perf_counter() > deadline:
            break
    return best


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def is_out_of_memory(exc: BaseException) -> bool:
    """True for a CUDA/MPS/CPU allocator out-of-memory error (they are not one exception class)."""
    oom_cls = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_cls is not None and isinstance(exc, oom_cls):
        return True
    if isinstance(exc, RuntimeError):
        text = str(exc)
        return ("out of memory" in text.lower() and ("CUDA" in text or "MPS" in text)) or \
            "DefaultCPUAllocator: can't allocate memory" in text
    return False


def free_device_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()

