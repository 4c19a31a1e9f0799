"""Frozen-feature classifiers: a linear probe (SimO, Bouhsine et al. 2024) and MSimCLR's piecewise linear
evaluation (Korman 2021 §3.1: one linear classifier per chart on the compressed code, each point classified
by the classifier of its most probable chart).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax


def _fit(
    features: np.ndarray,
    groups: np.ndarray,
    labels: np.ndarray,
    *,
    n_groups: int,
    num_classes: int,
    epochs: int,
    batch: int,
    lr: float,
    seed: int,
):
    """Softmax regression per group: weights [G, F, C], biases [G, C]; row i uses group groups[i]."""
    f = features.shape[1]
    params = {"w": jnp.zeros((n_groups, f, num_classes)), "b": jnp.zeros((n_groups, num_classes))}
    tx = optax.adam(lr)
    opt = tx.init(params)

    def logits(p, x, g):
        return jnp.einsum("nf,nfc->nc", x, p["w"][g]) + p["b"][g]

    @jax.jit
    def step(p, o, x, g, y):
        def loss(p):
            return optax.softmax_cross_entropy_with_integer_labels(logits(p, x, g), y).mean()

        grads = jax.grad(loss)(p)
        upd, o = tx.update(grads, o, p)
        return optax.apply_updates(p, upd), o

    rng = np.random.default_rng(seed)
    n = len(features)
    size = min(batch, n)
    for _ in range(epochs):
        order = rng.permutation(n)
        for start in range(0, n - size + 1, size):
            idx = order[start : start + size]
            params, opt = step(params, opt, features[idx], groups[idx], labels[idx])
    return lambda x, g: np.asarray(jnp.argmax(logits(params, x, g), axis=1))


def _standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, std = train.mean(0), train.std(0) + 1e-6
    return (train - mean) / std, (test - mean) / std


def linear_probe(
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    *,
    num_classes: int,
    epochs: int = 1,
    batch: int = 64,
    lr: float = 1e-2,
    seed: int = 0,
) -> float:
    """Test accuracy of softmax regression trained ``epochs`` epochs on frozen, standardised features.

    The linear probe of SimO (Bouhsine et al. 2024): each feature is standardised by the training set's mean
    and standard deviation, then one linear classifier is trained with Adam on the cross-entropy, in
    shuffled mini-batches (a last incomplete batch of each epoch is dropped); its weights start at zero.

    Args:
        train_x: training features [N, F], float.
        train_y: training labels [N], integers in [0, num_classes).
        test_x: test features [M, F], float.
        test_y: test labels [M], integers.
        num_classes: the number of classes C.
        epochs: passes over the training set, ≥ 1.
        batch: mini-batch size (at most N is used).
        lr: Adam's learning rate, > 0.
        seed: seed of the mini-batches' shuffling.

    Returns:
        The fraction of test rows classified correctly, in [0, 1].
    """
    tr, te = _standardise(train_x, test_x)
    train_chart, test_chart = np.zeros(len(tr), np.int32), np.zeros(len(te), np.int32)
    return piecewise_linear(
        tr,
        train_chart,
        train_y,
        te,
        test_chart,
        test_y,
        charts=1,
        num_classes=num_classes,
        epochs=epochs,
        batch=batch,
        lr=lr,
        seed=seed,
    )


def piecewise_linear(
    train_code: np.ndarray,
    train_chart: np.ndarray,
    train_y: np.ndarray,
    test_code: np.ndarray,
    test_chart: np.ndarray,
    test_y: np.ndarray,
    *,
    charts: int,
    num_classes: int,
    epochs: int = 1,
    batch: int = 64,
    lr: float = 1e-2,
    seed: int = 0,
) -> float:
    """Korman 2021 §3.1 piecewise linear accuracy: one linear classifier per chart on the compressed code.

    Each row is classified by the classifier of its chart (its most probable one); the classifiers are
    trained jointly with Adam on the cross-entropy, in shuffled mini-batches, from zero weights.

    Args:
        train_code: training codes [N, d], in [0, 1] (the chart coordinates after the sigmoid).
        train_chart: each training row's chart [N], integers in [0, charts).
        train_y: training labels [N], integers in [0, num_classes).
        test_code: test codes [M, d].
        test_chart: each test row's chart [M].
        test_y: test labels [M].
        charts: how many charts, and so classifiers, there are.
        num_classes: C, the classes each classifier tells apart.
        epochs: training epochs of the classifiers (≥ 1), as for :func:`linear_probe`.
        batch: rows per Adam step (capped at N).
        lr: the learning rate of Adam (> 0).
        seed: shuffles the rows into mini-batches.

    Returns:
        The test accuracy, a float in [0, 1].
    """
    predict = _fit(
        train_code,
        train_chart,
        train_y,
        n_groups=charts,
        num_classes=num_classes,
        epochs=epochs,
        batch=batch,
        lr=lr,
        seed=seed,
    )
    return float(np.mean(predict(test_code, test_chart) == test_y))
