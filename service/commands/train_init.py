"""`gpuhealth train --init PATH|default`: fine-tune from an existing artifact rather than train
from scratch (models/predictor/finetune.py; docs/learning.md).

The training settings that have two defaults are resolved here, before any data is read: with
`--init`, the hidden size and window come from the init model (giving others is refused, as is an
init model of another shape) and the learning rate, epochs and patience default to fine-tuning's
smaller values; without it, to training from scratch's.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from service.commands.usage import UsageError

# Training from scratch (models.predictor.train.TrainConfig's defaults, said again for --help).
SCRATCH = {"epochs": 20, "hidden": 24, "window": 24, "lr": 2e-3, "patience": 4}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epochs", type=int, help="passes over the training data (default 20; "
                   "8 with --init)")
    p.add_argument("--hidden", type=int, help="LSTM hidden size (default 24; with --init the "
                   "init model's)")
    p.add_argument("--window", type=int, help="the memory's period P in hours: the model reads "
                   "the last P + 1 to 2P (default 24; with --init the init model's)")
    p.add_argument("--lr", type=float, help="Adam learning rate (default 2e-3; 2e-4 with "
                   "--init)")
    p.add_argument("--patience", type=int, help="epochs without a better validation score "
                   "before stopping (default 4; 3 with --init)")
    p.add_argument("--init", metavar="PATH|default", help="fine-tune: start every scope's "
                   "weights and input scaler from this artifact (`default`: the shipped "
                   "model), recalibrate on this data")


def init_path(text: str) -> Path:
    from service.settings import SHIPPED_MODEL

    return SHIPPED_MODEL if text == "default" else Path(text)


def resolve(args: argparse.Namespace) -> Any:
    """Fill in the settings left unset; the init model (models.predictor.finetune.InitModel)
    or None. UsageError when the init artifact cannot seed this training."""
    from models.predictor.dataset import HORIZONS_H
    from models.predictor.finetune import (
        FINE_TUNE_EPOCHS,
        FINE_TUNE_LR,
        FINE_TUNE_PATIENCE,
        InitMismatch,
        check_init,
        load_init,
    )
    from models.predictor.package import ARCHITECTURE

    if args.init is None:
        for k, v in SCRATCH.items():
            if getattr(args, k) is None:
                setattr(args, k, v)
        return None
    try:
        init = load_init(init_path(args.init), ARCHITECTURE)
        args.hidden = init.hidden if args.hidden is None else args.hidden
        args.window = init.window_h if args.window is None else args.window
        check_init(init, args.hidden, args.window, HORIZONS_H)
    except InitMismatch as exc:
        raise UsageError(f"cannot fine-tune: {exc}") from None
    for k, v in (("epochs", FINE_TUNE_EPOCHS), ("lr", FINE_TUNE_LR),
                 ("patience", FINE_TUNE_PATIENCE)):
        if getattr(args, k) is None:
            setattr(args, k, v)
    return init


def command_flag(args: argparse.Namespace) -> list[str]:
    return [] if args.init is None else [f"--init {args.init}"]
