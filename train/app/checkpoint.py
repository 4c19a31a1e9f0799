"""Checkpoints: the one place that talks to orbax (``CheckpointManager`` + ``StandardSave/StandardRestore``).

The train state is a plain pytree (NNX ``State`` of parameters and batch statistics, optax state, step), so
a later switch to orbax's v1 API touches only this module. Orbax writes each checkpoint into a temporary
folder and renames it when complete, so a crash never leaves a half-written checkpoint that looks finished;
a damaged one (a disk fault, a truncated copy) is skipped on restore with a warning, falling back to the
newest readable one.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import jax
import orbax.checkpoint as ocp

# Orbax's messages for a checkpoint of another structure or shape than the one asked for.
_OTHER_MODEL = ("not compatible with the stored shape", "tree structures do not match")


class CheckpointError(ValueError):
    """No checkpoint in a run directory can be restored (a one-line message says why and what to do)."""


class Checkpointer:
    """Checkpoints of a pytree under ``directory``, keeping the ``keep`` most recent.

    Args:
        directory: the folder the checkpoints are written to (one sub-folder per step), created when missing;
            a relative path is taken from the current directory.
        keep: how many of the most recent checkpoints to keep (≥ 1); older ones are deleted as new ones
            are saved.
    """

    def __init__(self, directory: str, *, keep: int = 2):
        self.directory = os.path.abspath(directory)
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=False)
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def steps(self) -> list[int]:
        """Steps of the complete checkpoints, oldest first.

        Returns:
            The training steps (ints) that have a complete checkpoint under ``directory``, ascending; empty
            when there is none.
        """
        return sorted(self._manager.all_steps())

    def save(self, step: int, state: Any) -> None:
        """Save ``state`` as the checkpoint of ``step`` (blocking until it is complete on disk).

        One already there for ``step`` (a damaged one that :meth:`restore` skipped) is replaced.

        Args:
            step: the training step the checkpoint belongs to (≥ 0), its name on disk.
            state: the pytree to save (arrays and scalars: the train state's parameters, batch statistics,
                optimiser state and step).
        """
        if step in self._manager.all_steps():
            self._manager.delete(step)
        self._manager.save(step, args=ocp.args.StandardSave(state), force=True)
        self._manager.wait_until_finished()

    def restore(self, like: Any) -> Any | None:
        """The newest readable checkpoint, restored into the structure, shapes and shardings of ``like``.

        Unreadable checkpoints are skipped with a warning, falling back to the next older one.

        Args:
            like: a pytree of the structure, shapes, dtypes and shardings to restore into (the freshly
                initialised train state); its values are not read.

        Returns:
            The restored pytree, of ``like``'s structure, or None when the directory holds no checkpoint.

        Raises:
            CheckpointError: checkpoints exist but none can be restored (damaged, or written by a model of
                another shape than ``like``).
        """
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        problems = []
        for step in reversed(self.steps()):
            try:
                return self._manager.restore(step, args=ocp.args.StandardRestore(abstract))
            except (
                Exception
            ) as err:  # orbax raises many kinds (JSON, tensorstore, value errors) for one cause
                other_model = any(text in str(err) for text in _OTHER_MODEL)
                reason = "written by a model of another shape" if other_model else _first_line(err)
                problems.append((step, other_model, reason))
                warnings.warn(
                    f"checkpoint of step {step} in {self.directory} skipped: {reason}", stacklevel=2
                )
        if not problems:
            return None
        if all(other for _, other, _ in problems):
            raise CheckpointError(
                f"the checkpoints in {self.directory} were written by a model of another shape than this "
                f"config's; use a fresh workdir (or the config that wrote them)"
            )
        listed = "; ".join(f"step {step}: {reason}" for step, _, reason in problems)
        raise CheckpointError(
            f"no readable checkpoint in {self.directory} ({listed}); delete that folder to start again, "
            f"or use a fresh workdir"
        )

    def close(self) -> None:
        """Release the checkpoint manager (its threads and open files); the checkpoints stay on disk."""
        self._manager.close()


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200]}" if text else type(err).__name__
