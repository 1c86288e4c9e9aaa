"""Several processes on one run (launched by torchrun): DDP or FSDP2 in the one training loop.

torchrun starts N copies of `python -m desktop_app train ...` with RANK / WORLD_SIZE / LOCAL_RANK set; the loop
calls `DistContext.start` and, when more than one process runs, every rank trains its rows of each step's
global batch (the same seeded order as one process: the data and the maths do not depend on N). Rank 0 alone
writes run.json, metrics.jsonl and checkpoints; checkpoints hold full (gathered) state in the single-process
format, so a run saved on N processes resumes on M. Control flags (stop, pause, save now) and the logged loss
travel in one small all-reduce per optimizer step, so a signal that reaches any rank reaches all of them.

Costs: DDP all-reduces the gradients during backward (bucketed, overlapped by torch); the per-step sync adds one
all-reduce of a few floats. FSDP2 all-gathers each layer's parameters before its forward and backward and
reduce-scatters its gradients; saving gathers the whole model and optimizer state on rank 0 (fine for the
models this app trains; a sharded checkpoint format would be needed for much larger ones).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from desktop_app.engine.errors import UserError
from desktop_app.engine.specs import DistributedSpec


class PeerLostError(UserError):
    """A collective failed: another process died, was killed or stopped answering."""


def launched_world_size() -> int:
    """WORLD_SIZE as torchrun sets it (1 when not launched by torchrun)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def launched_rank() -> int:
    """This process's global rank as torchrun sets it (0 when not launched by torchrun)."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass
class DistContext:
    """This process's place in a multi-process run, and the few collectives the loop needs."""

    rank: int
    world: int
    local_rank: int
    local_world: int
    backend: str
    spec: DistributedSpec
    owns_group: bool

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def fsdp(self) -> bool:
        return self.spec.strategy == "fsdp"

    @classmethod
    def start(cls, spec: DistributedSpec, device: torch.device) -> DistContext | None:
        """Join torchrun's process group (None in a single process). `device` is this rank's device."""
        world = launched_world_size()
        if world <= 1:
            return None
        import torch.distributed as dist

        if not dist.is_available():
            raise UserError("this PyTorch build has no torch.distributed: run in one process, or install a build "
                            "with distributed support")
        backend = spec.backend
        if backend == "auto":
            backend = "nccl" if device.type == "cuda" else "gloo"
        if backend == "nccl" and device.type != "cuda":
            raise UserError("distributed.backend nccl needs CUDA GPUs; use gloo (or auto) to train on the CPU")
        owns = not dist.is_initialized()
        if owns:
            try:
                dist.init_process_group(backend, timeout=datetime.timedelta(seconds=spec.timeout_s),
                                        device_id=device if device.type == "cuda" else None)
            except Exception as exc:
                raise UserError(f"could not join the other {world - 1} process(es) ({exc}); launch with torchrun "
                                "(e.g. torchrun --standalone --nproc_per_node 2 -m desktop_app train ...)") from None
        return cls(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=_env_int("LOCAL_RANK", 0),
                   local_world=_env_int("LOCAL_WORLD_SIZE", world), backend=backend, spec=spec, owns_group=owns)

    def close(self, *, clean: bool) -> None:
        """Leave the process group. clean: every rank got here normally (wait for the others first: tearing down
        while a peer still has collectives in flight aborted a process now and then in testing)."""
        import torch.distributed as dist

        if self.owns_group and dist.is_initialized():
            with contextlib.suppress(Exception):  # a dead peer can make the goodbye fail; nothing is left to do
                if clean:
                    dist.barrier()
                dist.destroy_process_group()

    def describe(self) -> str:
        return (f"process {self.rank} of {self.world} ({self.spec.strategy.upper()}, {self.backend}); each trains "
                "its share of every batch (self-play and GRPO: also plays its share of every round), process 0 "
                "writes metrics and checkpoints")

    # --- collectives (every rank calls each one, in the same order) ----------------------------------------

    def _comm_device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")

    def _collective(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # gloo/nccl raise RuntimeError subclasses when a peer is gone or times out
            raise PeerLostError(lost_peer_message(self.rank, what, exc)) from None

    def sum(self, values: list[float], what: str = "exchanging step results") -> list[float]:
        """Element-wise sum over all ranks of a few floats (one all-reduce, float64)."""
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self._comm_device())
        self._collective(what, lambda: dist.all_reduce(t))
        return t.tolist()

    def from_main(self, values: list[float]) -> list[float]:
        """Rank 0's values on every rank (a decision only rank 0 can make: e.g. early stopping)."""
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self._comm_device())
        self._collective("receiving a decision of process 0", lambda: dist.broadcast(t, 0))
        return t.tolist()

    def agree(self, ok: bool, what: str) -> bool:
        """True when every rank says ok (a setup or save step that may fail on one of them)."""
        return self.sum([0.0 if ok else 1.0], what)[0] == 0.0

    def gather(self, value: Any, what: str) -> list[Any]:
        """Every rank's JSON-able `value`, in rank order (a rollout method's share of a round: its replies and
        verdicts). Two all-gathers: the sizes, then the UTF-8 JSON padded to the longest; no pickle."""
        import torch.distributed as dist

        device = self._comm_device()
        data = torch.frombuffer(bytearray(json.dumps(value).encode("utf-8")), dtype=torch.uint8).to(device)
        size = torch.tensor([data.numel()], dtype=torch.int64, device=device)
        sizes = [torch.zeros_like(size) for _ in range(self.world)]
        self._collective(what, lambda: dist.all_gather(sizes, size))
        longest = max(int(s.item()) for s in sizes)
        padded = torch.zeros(longest, dtype=torch.uint8, device=device)
        padded[: data.numel()] = data
        parts = [torch.zeros_like(padded) for _ in range(self.world)]
        self._collective(what, lambda: dist.all_gather(parts, padded))
        return [json.loads(part[: int(n.item())].cpu().numpy().tobytes().decode("utf-8"))
                for part, n in zip(parts, sizes, strict=True)]


def is_communication_error(exc: BaseException) -> bool:
    """Whether an exception comes from the process group (a peer died, a collective timed out): DDP's gradient
    all-reduce in backward and FSDP's gathers raise plain RuntimeErrors naming their backend."""
    import torch.distributed as dist

    dist_error = getattr(dist, "DistError", None)
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        word in text for word in ("gloo", "NCCL", "nccl", "Connection closed", "Connection reset", "timed out"))


def lost_peer_message(rank: int, what: str, exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    first = first.split("] ", 1)[-1].split(". ", 1)[0][:160]  # gloo: "[file:line] Connection closed by peer ..."
    return (f"process {rank} lost contact with the other processes while {what} ({first}): another process died, "
            "was killed or stopped answering. The last committed checkpoint is intact; resume with the same "
            "command and --resume RUN (on any number of processes)")


# --- wrapping the model ------------------------------------------------------------------------------------

class ObjectiveModule(torch.nn.Module):
    """The objective's loss as a module's forward, so DDP sees every forward (whatever path the objective
    takes inside: transformers' forward, the fused llama forward, a PEFT model, a reference pass)."""

    def __init__(self, model: torch.nn.Module, loss: Callable[[torch.nn.Module, Any], Any]):
        super().__init__()
        self.model = model
        self._loss = loss

    def forward(self, carried: Carried) -> Any:
        return self._loss(self.model, carried.micro)


@dataclass
class Carried:
    """A micro-batch handed through DDP's forward untouched: on a GPU, DDP rebuilds lists and tuples it is given
    (moving their tensors), which would turn a rollout method's EpisodeBatch into a plain list. The objective has
    put the micro-batch on its device already."""

    micro: Any


@dataclass
class Wrapped:
    """What the loop calls per micro-batch: loss(micro) -> (loss, metrics); no_sync() around all but the last
    micro-batch of a step (gradients are averaged across processes once per step, not per micro-batch)."""

    loss: Callable[[Any], Any]
    no_sync: Callable[[], Any]
    notes: list[str]


def wrap(model: torch.nn.Module, forward_model: Any, loss: Callable[[Any, Any], Any], ctx: DistContext | None,
         device: torch.device) -> Wrapped:
    """What computes a micro-batch's loss: `loss(forward_model, micro)` directly (one process, or FSDP, whose
    sharded modules synchronise themselves; `model` must already be sharded by `shard_fsdp`), or through DDP."""
    if ctx is None:
        return Wrapped(lambda micro: loss(forward_model, micro), contextlib.nullcontext, [])
    if ctx.fsdp:
        return Wrapped(lambda micro: loss(forward_model, micro), lambda: _fsdp_no_sync(model), [])
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    module = ObjectiveModule(forward_model, loss)
    # Buffers (rotary tables) are equal everywhere already: syncing them every forward would only cost time.
    newer = "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    ddp = DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None,
                                  **{"forward_sync_buffers" if newer else "broadcast_buffers": False})
    return Wrapped(lambda micro: ddp(Carried(micro)), ddp.no_sync,
                   [f"DDP: gradients averaged over {ctx.world} processes in backward"])


@contextlib.contextmanager
def _fsdp_no_sync(model: Any) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def _layers_to_shard(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks (transformers names them in `_no_split_modules`: LlamaDecoderLayer, GPT2Block...)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(inner, "_no_split_modules", None) or [])
    return [m for m in model.modules() if type(m).__name__ in names]


def _quantized_params(model: torch.nn.Module) -> set[torch.nn.Parameter]:
    # bitsandbytes' 4-bit weights carry their quantization state on the Parameter object; FSDP would replace them
    # by plain DTensor shards and lose it. They stay whole (frozen, small) on every process.
    return {p for p in model.parameters() if type(p).__name__ in ("Params4bit", "Int8Params")}


def shard_fsdp(model: torch.nn.Module, ctx: DistContext, device: torch.device, *,
               autocast_dtype: torch.dtype | None) -> list[str]:
    """fully_shard each block, then the root (FSDP2). Call after the model is loaded, quantized and given its
    adapters (QLoRA: quantize and freeze the base, inject adapters, then shard), before building the optimizer."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    spec = ctx.spec
    mesh = init_device_mesh(device.type, (ctx.world,))
    notes = []
    kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": spec.fsdp_reshard_after_forward}
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}.get(spec.fsdp_precision, autocast_dtype)
    if dtype is not None:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        notes.append(f"FSDP computes with {str(dtype).replace('torch.', '')} parameters, reduces gradients in fp32")
    if spec.fsdp_cpu_offload:
        if device.type == "cpu":
            notes.append("FSDP CPU offload: training already runs on the CPU, nothing to offload")
        else:
            kwargs["offload_policy"] = CPUOffloadPolicy()
            notes.append("FSDP keeps parameter shards and optimizer state in CPU memory (slower, far less GPU memory)")
    quantized = _quantized_params(model)
    if quantized:
        kwargs["ignored_params"] = quantized
        notes.append(f"FSDP: the {len(quantized)} 4-bit base weights stay whole on every process (frozen); the "
                     "adapters and the rest are sharded")
    layers = _layers_to_shard(model)
    for layer in layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    notes.append(f"FSDP2: {len(layers)} blocks and the root sharded over {ctx.world} processes")
    return notes


def is_fsdp(model: Any) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - builds without distributed
        return False
    return isinstance(model, FSDPModule)


# --- full state of a sharded model (checkpoints in the single-process format) -------------------------------

def _options(**kw: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(**kw)


def gathered_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's state on rank 0 (CPU tensors; {} on other ranks). Every rank must call it."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_options(full_state_dict=True, cpu_offload=True))


def gathered_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's whole state on rank 0 in `optimizer.state_dict()` layout (parameters by index, in the order
    of its param groups, as one process numbers them), so any number of processes can resume it. All ranks call."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    full = get_optimizer_state_dict(model, optimizer, options=_options(full_state_dict=True, cpu_offload=True))
    if not full:
        return {}
    index: dict[str, int] = {}
    groups = []
    for group in full["param_groups"]:
        ids = []
        for name in group["params"]:
            index[name] = len(index)
            ids.append(index[name])
        groups.append({**group, "params": ids})
    return {"state": {index[name]: entry for name, entry in full["state"].items()}, "param_groups": groups}


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Put a single-process-layout optimizer state (as checkpoints hold it) into a sharded model's optimizer."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    names = {}
    position = 0
    for group in optimizer.param_groups:  # the same order as one process numbers them (built the same way)
        for p in group["params"]:
            names[position] = p
            position += 1
    fqn = {id(p): n for n, p in model.named_parameters()}
    by_name = {fqn[id(names[i])]: entry for i, entry in state["state"].items()}
    groups = [{**g, "params": [fqn[id(names[i])] for i in g["params"]]} for g in state["param_groups"]]
    set_optimizer_state_dict(model, optimizer, optim_state_dict={"state": by_name, "param_groups": groups},
                             options=_options(full_state_dict=True))
