"""A full disk as the tests make one (this machine cannot mount a small tmpfs, and the tests run as root): the
lowest-level writer of checkpoint weights, safetensors' own `serialize_file`, refuses as a full disk does."""

from __future__ import annotations

from pathlib import Path

import safetensors
import safetensors.torch as st


class FullDisk:
    """safetensors' writer raises its own error for a full disk (the Rust error, os error 28) for the checkpoints
    of step >= `from_step` written outside `spare` (a folder on "another disk"), until `free()`."""

    def __init__(self, monkeypatch, from_step: int = 4, spare: Path | None = None) -> None:
        self.full, self.from_step, self.refused = True, from_step, 0
        real = st.serialize_file

        def serialize(tensors, filename, metadata=None):
            step = int(Path(filename).parent.name.split("-")[2])  # the staging folder .tmp-step-0000000N-xxxx
            if self.full and step >= self.from_step and not (spare is not None and str(spare) in str(filename)):
                self.refused += 1
                raise safetensors.SafetensorError(
                    "Error while serializing: I/O error: No space left on device (os error 28)")
            return real(tensors, filename, metadata=metadata)

        monkeypatch.setattr(st, "serialize_file", serialize)

    def free(self) -> None:
        self.full = False
