"""Miners: which pairs a pair loss sees, as boolean masks of fixed shape.

Each miner takes the similarity ``sim`` [n, M] of n anchors to M keys (higher = more similar), the labels and
the key arguments of :mod:`geojax.losses` (``key_labels``, ``self_index``, ``key_valid``), and returns
``(pos_mask, neg_mask)``, bool [n, M]: the positive and the negative pairs it keeps, each a subset of the
label masks. There are no index lists, so a miner jits, vmaps and runs under ``shard_map`` (an anchor's choice
reads only its own row, so the gathered keys' rows suffice on each device). Every pair loss takes the masks
as ``pos_mask`` / ``neg_mask``::

    pos, neg = miners.multi_similarity(sim, labels)
    loss = losses.multi_similarity(sim, labels, pos_mask=pos, neg_mask=neg)

The masks are computed on ``lax.stop_gradient(sim)``, in ``sim``'s own dtype: mining carries no gradient.

These are the similarity forms of pytorch-metric-learning's miners (whose defaults are for distances; each
docstring states the conversion). A mask holds each pair once. Where pytorch-metric-learning's miner returns
pairs, the mask is that set of pairs. Where it returns triplets (a, p, n), the masks hold their pairs (a, p)
and (a, n): a pair loss then sees each pair once, where a triplet list repeats a pair once per triplet, and a
triplet loss forms every (a, p, n) of the kept pairs, a superset of the mined triplets unless each anchor
keeps one positive and one negative (``batch_hard``).
"""

from __future__ import annotations

from typing import Literal, get_args

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from geojax import _checks
from geojax.losses._common import check_nonnegative, check_sim, fill_doc, pair_masks, resolve_keys
from geojax.losses._margin import triplet_pass

TripletKind = Literal["all", "hard", "semihard", "easy"]
TRIPLET_KINDS: tuple[str, ...] = get_args(TripletKind)


def _pairs(sim, labels, key_labels, self_index, key_valid) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Validate, then (sim without gradient [n, M], positive mask, negative mask)."""
    check_sim(sim, labels, key_labels, self_index, key_valid)
    labels = jnp.asarray(labels)
    key_labels, self_cols = resolve_keys(labels, key_labels, self_index)
    s = lax.stop_gradient(jnp.asarray(sim))
    return s, *pair_masks(labels, key_labels, self_cols, jnp.arange(s.shape[1]), key_valid)


def multi_similarity(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    epsilon: float = 0.1,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The pair mining of the Multi-Similarity loss (Wang et al. 2019, §4, 'pair mining').

    Keeps a negative pair (a, n) when s_an + ε > min_{p∈P(a)} s_ap (it is within ε of the hardest positive)
    and a positive pair (a, p) when s_ap − ε < max_{n∈N(a)} s_an; an anchor without positives keeps no
    negative and one without negatives no positive. The set of pairs of pytorch-metric-learning's
    ``MultiSimilarityMiner(epsilon)``, whose default distance is the cosine similarity (no conversion).

    {miner}
        epsilon: ε ≥ 0, in similarity units.
        {keys}

    Returns:
        (pos_mask, neg_mask), bool [n, M].

    Raises:
        ValueError: ``epsilon`` is negative; ``sim`` or the key arguments are malformed (as for the losses).

    References:
        Wang et al. 2019 (arXiv 1904.06627), §4: the mining step of the MS loss, before its weighting.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import miners
        >>> sim = jnp.array([[1.0, 0.5, 0.6, -0.2], [0.5, 1.0, 0.1, 0.3],
        ...                  [0.6, 0.1, 1.0, 0.4], [-0.2, 0.3, 0.4, 1.0]])
        >>> pos, neg = miners.multi_similarity(sim, jnp.array([0, 0, 1, 1]))
        >>> jnp.argwhere(pos).tolist(), jnp.argwhere(neg).tolist()
        ([[0, 1], [2, 3]], [[0, 2], [2, 0]])
    """
    check_nonnegative(epsilon, "epsilon")
    s, pos, neg = _pairs(sim, labels, key_labels, self_index, key_valid)
    # ±inf stand for 'no such pair' here: they are only compared, never exponentiated
    hardest_neg = jnp.max(jnp.where(neg, s, -jnp.inf), axis=1)
    hardest_pos = jnp.min(jnp.where(pos, s, jnp.inf), axis=1)
    return pos & (s - epsilon < hardest_neg[:, None]), neg & (s + epsilon > hardest_pos[:, None])


def pair_margin(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    pos_margin: float = 0.98,
    neg_margin: float = 0.68,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Pairs that violate a margin, pytorch-metric-learning's ``PairMarginMiner`` in similarity form.

    Keeps the positive pairs with s < ``pos_margin`` and the negative pairs with s > ``neg_margin``.
    pytorch-metric-learning's defaults (0.2 and 0.8) are Euclidean distances between unit vectors, d =
    √(2 − 2s), so s = 1 − d²/2: its default miner is ``pos_margin=0.98, neg_margin=0.68`` here, on the
    cosine. With ``distance=CosineSimilarity()`` it takes these values as they are.

    {miner}
        pos_margin: the similarity below which a positive pair is kept.
        neg_margin: the similarity above which a negative pair is kept.
        {keys}

    Returns:
        (pos_mask, neg_mask), bool [n, M].

    Raises:
        ValueError: ``sim`` or the key arguments are malformed (as for the losses).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import miners, similarity
        >>> e = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.6, -0.8], [0.0, 1.0]])
        >>> labels = jnp.array([0, 0, 1, 1])
        >>> pos, neg = miners.pair_margin(similarity.cosine(e, e), labels, pos_margin=0.5, neg_margin=0.5)
        >>> jnp.argwhere(pos).tolist(), jnp.argwhere(neg).tolist()
        ([[2, 3], [3, 2]], [[0, 2], [1, 3], [2, 0], [3, 1]])
    """
    s, pos, neg = _pairs(sim, labels, key_labels, self_index, key_valid)
    return pos & (s < pos_margin), neg & (s > neg_margin)


def _kind_select(margin, kind: str):
    """The negatives of the triplets ``kind`` keeps, from t = s_ap − s_an (pytorch-metric-learning's
    'triplet margin' of a similarity)."""

    def select(s_ap, s):
        t = s_ap - s
        if kind == "easy":
            return t > margin
        kept = t <= margin
        if kind == "hard":
            return kept & (t <= 0)
        return kept & (t > 0) if kind == "semihard" else kept

    return select


def triplet_margin(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    margin: float = 0.2,
    kind: TripletKind = "all",
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The pairs of the triplets that violate a margin, pytorch-metric-learning's ``TripletMarginMiner``.

    With t = s_ap − s_an for each triplet (a, p, n): 'all' keeps t ≤ m, 'hard' t ≤ m and t ≤ 0 (the negative
    at least as similar as the positive), 'semihard' 0 < t ≤ m, 'easy' t > m. The masks hold the pairs
    (a, p) and (a, n) of the kept triplets (see the module's note on triplets). The margin is in similarity
    units: ``TripletMarginMiner(margin, type_of_triplets=kind, distance=CosineSimilarity())`` on the cosine;
    its default distance (Euclidean) has no exact similarity counterpart for a margin. The triplets are
    visited one positive per anchor at a time (O(n·M·max|P|) time, O(n·M) memory).

    {miner}
        margin: m, in similarity units.
        kind: 'all', 'hard', 'semihard' or 'easy' (above).
        {keys}

    Returns:
        (pos_mask, neg_mask), bool [n, M].

    Raises:
        ValueError: ``kind`` is not one of the names above; ``sim`` or the key arguments are malformed (as
            for the losses).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import miners
        >>> sim = jnp.array([[1.0, 0.7, 0.75, 0.1], [0.7, 1.0, 0.4, 0.65],
        ...                  [0.75, 0.4, 1.0, 0.3], [0.1, 0.65, 0.3, 1.0]])
        >>> pos, neg = miners.triplet_margin(sim, jnp.array([0, 0, 1, 1]), margin=0.1, kind="semihard")
        >>> jnp.argwhere(pos).tolist(), jnp.argwhere(neg).tolist()
        ([[1, 0]], [[1, 3]])
    """
    _checks.check_choice(kind, "kind", TRIPLET_KINDS)
    s, pos, neg = _pairs(sim, labels, key_labels, self_index, key_valid)
    cols = jnp.arange(s.shape[1])

    def visit(acc, col, s_ap, active):
        kept_pos, kept_neg = acc
        hit = (cols[None, :] == col[:, None]) & jnp.any(active, axis=1)[:, None]
        return kept_pos | hit, kept_neg | active

    none = jnp.zeros_like(pos)
    return triplet_pass(s, pos, neg, _kind_select(margin, kind), visit, (none, none))


def batch_hard(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Batch hard (Hermans et al. 2017): each anchor's hardest positive and hardest negative.

    For each anchor with a positive and a negative: the positive of lowest similarity and the negative of
    highest; one pair of each per anchor, so ``losses.triplet`` on these masks sees exactly the mined
    triplets. The set of pairs of pytorch-metric-learning's ``BatchHardMiner()`` (any distance: the hardest
    pair is the same for the cosine and for the Euclidean distance of unit vectors). Ties go to the lower
    column.

    {miner}
        {keys}

    Returns:
        (pos_mask, neg_mask), bool [n, M], at most one True per row in each.

    Raises:
        ValueError: ``sim`` or the key arguments are malformed (as for the losses).

    References:
        Hermans, Beyer & Leibe 2017, "In Defense of the Triplet Loss for Person Re-Identification" (arXiv
        1703.07737), batch hard.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import miners
        >>> sim = jnp.array([[1.0, 0.2, 0.5, 0.1, 0.3], [0.2, 1.0, 0.0, 0.6, 0.4],
        ...                  [0.5, 0.0, 1.0, 0.7, 0.2], [0.1, 0.6, 0.7, 1.0, 0.9],
        ...                  [0.3, 0.4, 0.2, 0.9, 1.0]])
        >>> pos, neg = miners.batch_hard(sim, jnp.array([0, 0, 1, 1, 1]))
        >>> print(jnp.argmax(pos, axis=1), jnp.argmax(neg, axis=1))
        [1 0 4 2 2] [2 3 0 1 1]
    """
    s, pos, neg = _pairs(sim, labels, key_labels, self_index, key_valid)
    cols = jnp.arange(s.shape[1])
    both = (jnp.any(pos, axis=1) & jnp.any(neg, axis=1))[:, None]
    hardest_pos = jnp.argmin(jnp.where(pos, s, jnp.inf), axis=1)
    hardest_neg = jnp.argmax(jnp.where(neg, s, -jnp.inf), axis=1)
    return both & (cols[None, :] == hardest_pos[:, None]), both & (cols[None, :] == hardest_neg[:, None])


# The miners share the Args entries of the similarity, the labels and the keys, written once here in place of
# each docstring's {miner} and {keys} lines.
_MINER_DOC = """Args:
        sim: [n, M] floating similarities of n anchors to M keys (higher = more similar).
        labels: [n] integer labels of the anchors."""
_KEYS_DOC = """key_labels: [M] integer labels of the keys; None: the keys are the anchors.
        self_index: [n] integer column of each anchor's own key in [0, M), never a pair; with ``key_labels``
            but no ``self_index`` no column is excluded.
        key_valid: [M] bool, False on key columns that are no keys; None: every column is a key."""
_SECTIONS = {"miner": _MINER_DOC, "keys": _KEYS_DOC}
multi_similarity.__doc__ = fill_doc(multi_similarity.__doc__, **_SECTIONS)
pair_margin.__doc__ = fill_doc(pair_margin.__doc__, **_SECTIONS)
triplet_margin.__doc__ = fill_doc(triplet_margin.__doc__, **_SECTIONS)
batch_hard.__doc__ = fill_doc(batch_hard.__doc__, **_SECTIONS)
