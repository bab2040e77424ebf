"""The training core: importable without Temporal (the GPU benchmark uses it alone)."""

from .batch import Batch, BatchError, load_batch, write_batch
from .checkpoint import checkpoint_dir, restore_checkpoint, save_checkpoint
from .config import ConfigError, TrainerConfig, parse_trainer_config
from .errors import CheckpointError
from .trainer import StepOrderError, Trainer

__all__ = [
    "Batch", "BatchError", "CheckpointError", "ConfigError", "StepOrderError", "Trainer", "TrainerConfig",
    "checkpoint_dir", "load_batch", "parse_trainer_config", "restore_checkpoint", "save_checkpoint", "write_batch",
]
