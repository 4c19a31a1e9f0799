"""Best-epoch selection (``select_best``; Stowell 2026 §5's early stopping): P@1 of held-out validation images
against the rest of the training set every ``val_every`` steps (default one epoch), each replica's weights of
its best evaluation kept (on the devices and in the run directory's ``best/``), the history in
``selection.json``. A resumed run keeps the evaluations up to its checkpoint's step and catches up on one it
missed (stopped between the checkpoint and the record)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from geojax import metrics
from train.app import checkpoint, data, hosts, report, step
from train.helpers import files

if TYPE_CHECKING:
    from train.app.config_types import RunConfig


@jax.jit
def keep_better(best: step.State, state: step.State, better: jax.Array) -> step.State:
    """``state``'s entries where ``better``, else ``best``'s: a new copy (``state`` is donated).

    Args:
        best: the kept state.
        state: the state just evaluated, of ``best``'s structure.
        better: a boolean scalar, or [S] for S stacked replicas.

    Returns:
        The merged state.
    """

    def pick(b, s):
        flag = better.reshape(better.shape + (1,) * (s.ndim - better.ndim))
        return jnp.where(flag, s, b)

    return jax.tree.map(pick, best, state)


class Selection:
    """The validation of one run: when it falls due, what it keeps, and its record.

    Constructing it reads back a resumed run's record and kept weights; :meth:`after` is the loop's one call
    per dispatch.

    Args:
        cfg: the run's configuration.
        workdir: the run directory.
        graphdef: the model's NNX graph definition.
        val: the validation split (its ``test_x`` / ``test_y`` the held-out images, ``train_x`` / ``train_y``
            the rest of the training set).
        start: the step the run starts from.
        like: the run's state, whose structure the kept weights are read back into.
    """

    def __init__(
        self, cfg: RunConfig, workdir: str, graphdef: nnx.GraphDef, val: data.Dataset, start: int, like: Any
    ):
        self.cfg, self.graphdef, self.val, self.start = cfg, graphdef, val, start
        self.per_epoch = step.steps_per_epoch(cfg, len(val.train_y))
        self.every = cfg.val_every or self.per_epoch
        self.path = os.path.join(workdir, "selection.json")
        self.ckpt = checkpoint.Checkpointer(os.path.join(workdir, "best"), keep=1)
        self.history: list[dict[str, Any]] = []
        if os.path.exists(self.path):
            with open(self.path) as f:
                self.history = [h for h in json.load(f)["history"] if h["step"] <= start]
        self.best: step.State | None = self.ckpt.restore(like) if self.history else None

    def due(self, first: int, done: int) -> bool:
        """Whether a validation falls after step ``first`` up to ``done`` (or ``done`` ends the run).

        Args:
            first: the step a call started from.
            done: the step it ended at.

        Returns:
            True when a multiple of the validation interval lies in (first, done], or ``done`` is the last
            step.
        """
        return done // self.every > first // self.every or done == self.cfg.steps

    def missed(self) -> bool:
        """Whether the resumed step is a validation point whose evaluation is not recorded.

        Returns:
            True for a run stopped between the checkpoint of a validation step and its record.
        """
        start = self.start
        return start > 0 and self.due(start - 1, start) and start not in [h["step"] for h in self.history]

    def after(
        self, state: step.State, first: int, done: int, ckpt: checkpoint.Checkpointer, saved: bool
    ) -> None:
        """Validate after a call, when due.

        When a replica improved, its weights are kept: a regular checkpoint of ``done`` first (unless one was
        saved just now), so that a resume never starts before the kept weights' step, then ``best/``, then
        the record.

        Args:
            state: the state after the call.
            first: the step the call started from.
            done: the step it ended at.
            ckpt: the run's regular checkpoints.
            saved: whether the loop saved ``done``'s checkpoint already.
        """
        if not self.due(first, done):
            return
        if self.evaluate(state, done):
            if not saved:
                ckpt.save(done, state)
            self.ckpt.save(done, self.best)
        if jax.process_index() == 0:
            files.write_json(self.path, self.record())

    def scores(self) -> np.ndarray:
        """The validation P@1 so far.

        Returns:
            [evaluations, replicas] float64.
        """
        return np.asarray([h["precision_at_1"] for h in self.history], np.float64).reshape(
            len(self.history), self.cfg.seeds
        )

    def evaluate(self, state: step.State, done: int) -> bool:
        """Validate ``state`` (of step ``done``) and keep each replica's weights that improved.

        Args:
            state: the run's state (replicated; stacked replicas for several seeds).
            done: its step.

        Returns:
            Whether a replica improved.
        """
        own = step.local_copy(state) if hosts.several() else state
        queries = report.embed_replicas(self.cfg, self.graphdef, own, self.val.test_x)
        references = report.embed_replicas(self.cfg, self.graphdef, own, self.val.train_x)
        p1 = []
        for query, reference in zip(queries, references, strict=True):
            q, sim = report.retrieval_inputs(self.cfg, query)
            r, _ = report.retrieval_inputs(self.cfg, reference)
            p1.append(float(metrics.precision_at_1(q, self.val.test_y, r, self.val.train_y, similarity=sim)))
        before = self.scores().max(axis=0) if self.history else np.full(self.cfg.seeds, -np.inf)
        # the lead's comparison decides for all processes, which then save (or not) the same weights together
        better = hosts.lead_decides(np.asarray(p1) > before)
        self.history.append({"step": done, "epoch": round(done / self.per_epoch, 3), "precision_at_1": p1})
        if better.any():
            flags = jnp.asarray(better if self.cfg.seeds > 1 else better[0])
            self.best = keep_better(state if self.best is None else self.best, state, flags)
        return bool(better.any())

    def kept(self, state: step.State) -> step.State:
        """``state`` with the kept weights.

        Args:
            state: the run's final state.

        Returns:
            Every replica's weights of its best evaluation, at ``state``'s step (``state`` when none was
            kept).
        """
        return state if self.best is None else {**self.best, "step": state["step"]}

    def record(self) -> dict[str, Any]:
        """What selection.json holds.

        Returns:
            Every evaluation and, per seed, the kept evaluation's step, epoch and P@1.
        """
        scores = self.scores()
        best = [self.history[int(i)] for i in scores.argmax(axis=0)] if self.history else []
        return {
            "val_images": len(self.val.test_y),
            "every_steps": self.every,
            "best": [
                {"step": h["step"], "epoch": h["epoch"], "precision_at_1": h["precision_at_1"][k]}
                for k, h in enumerate(best)
            ],
            "history": self.history,
        }

    def close(self) -> None:
        """Release the kept weights' checkpoint manager."""
        self.ckpt.close()
