"""Deprecated since 0.2: the names that version 0.1 kept here now live in `checkpoint`, `translation`, `trainer` and `distributed`.

Hand-written (not exported from a notebook). Importing it warns; it will be removed in 0.3.
"""

from __future__ import annotations

import warnings

from annotated_transformer.checkpoint import (  # noqa: F401
    CHECKPOINT_FORMAT,
    average_last,
    load_checkpoint,
    model_from_checkpoint,
    save_checkpoint,
)
from annotated_transformer.distributed import PRECISIONS  # noqa: F401
from annotated_transformer.trainer import TrainConfig, train  # noqa: F401
from annotated_transformer.translation import BleuScores, bleu, detokenize, translate  # noqa: F401

warnings.warn(
    "annotated_transformer.translate is deprecated and will be removed in 0.3: import from "
    "annotated_transformer.checkpoint, .translation, .trainer or .distributed instead",
    DeprecationWarning,
    stacklevel=2,
)
