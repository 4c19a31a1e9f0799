"""Checkpoints: the one place that talks to orbax (``CheckpointManager`` + ``StandardSave/StandardRestore``).

The train state is a plain pytree (NNX ``State`` of parameters and batch statistics, optax state, step), so
a later switch to orbax's v1 API touches only this module.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp


class Checkpointer:
    """Periodic checkpoints of a pytree under ``directory``, keeping the ``keep`` most recent."""

    def __init__(self, directory: str, *, every: int, keep: int = 2):
        options = ocp.CheckpointManagerOptions(
            save_interval_steps=every, max_to_keep=keep, enable_async_checkpointing=False
        )
        self._manager = ocp.CheckpointManager(os.path.abspath(directory), options=options)

    def latest_step(self) -> int | None:
        """Step of the newest checkpoint, or None."""
        return self._manager.latest_step()

    def save(self, step: int, state: Any, *, force: bool = False) -> bool:
        """Save ``state`` at ``step`` if the interval says so (or ``force``); True when saved."""
        saved = self._manager.save(step, args=ocp.args.StandardSave(state), force=force)
        self._manager.wait_until_finished()
        return saved

    def restore(self, like: Any, step: int | None = None) -> Any:
        """Restore the checkpoint at ``step`` (default: latest) into the structure/shardings of ``like``."""
        step = self.latest_step() if step is None else step
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        return self._manager.restore(step, args=ocp.args.StandardRestore(abstract))

    def close(self) -> None:
        self._manager.close()
