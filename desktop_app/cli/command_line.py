"""`train`'s flags for the TrainSpec fields, typed and described by TrainSpec's own fields; the flag table and the
command lines built from it live in the engine (engine/run_commands.py), which every front end shows.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from desktop_app.engine.run_commands import TRAIN_FLAGS
from desktop_app.engine.spec_base import default_of
from desktop_app.engine.specs import TRACKERS, SpecError, TrainSpec
from desktop_app.engine.train.tracking import parse_trackers


def add_train_flags(parser: argparse.ArgumentParser) -> None:
    """`train`'s TrainSpec flags, typed and described by TrainSpec's own fields."""
    fields = {fl.name: fl for fl in dataclasses.fields(TrainSpec)}
    for name, flag in TRAIN_FLAGS.items():
        meta, default = fields[name].metadata, default_of(fields[name])
        kwargs: dict[str, Any] = {"help": str(meta.get("help", "")), "dest": name}
        if name == "trackers":  # a list: comma-separated names, or none
            kwargs.update(type=_trackers_flag, metavar="|".join(TRACKERS) + ",...|none")
        elif meta.get("choices"):
            kwargs["choices"] = tuple(meta["choices"])
        else:
            kwargs["type"] = type(default)
        parser.add_argument(flag, **kwargs)


def _trackers_flag(text: str) -> list[str]:
    try:
        return parse_trackers(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _trackers_flag(text: str) -> list[str]:
    try:
        return parse_trackers(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
