"""Tensor-train (TT) matrices (Hong, Meng & Yuan 2018, §3; Oseledets 2011).

A matrix R [b, d] with b = ∏ b_k and d = ∏ d_k is stored as t cores G_k [r_{k-1}, b_k, d_k, r_k],
r_0 = r_t = 1, so that R(s, l) = G_1[ν_1(s), μ_1(l)] ⋯ G_t[ν_t(s), μ_t(l)] (Hong, Meng & Yuan 2018,
eq. 2). Row and column indices are split into mode indices in row-major (C) order:
s = ((ν_1 b_2 + ν_2) b_3 + …), and the same for l, so ``x.reshape(d_1, …, d_t)`` is the tensor 𝒳 of eq. 4.
The "eq." numbers below are those of Hong, Meng & Yuan 2018.

Fitting (``tt_svd``, ``als_sweep``) rejects concrete input holding NaN or ±inf (``ValueError`` naming the
argument); traced input is not checked. The products (``to_dense``, ``matvec``, ``merge_cores``…) are
kernels and propagate NaN.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from geojax import _checks

_HIGHEST = jax.lax.Precision.HIGHEST


class TTMatrix(NamedTuple):
    """A TT matrix (Hong, Meng & Yuan 2018, eq. 2): cores G_k [r_{k-1}, b_k, d_k, r_k], r_0 = r_t = 1.

    A NamedTuple and so a JAX pytree. R(s, l) = G_1[ν_1(s), μ_1(l)] ⋯ G_t[ν_t(s), μ_t(l)], row and column
    indices split into mode indices in row-major order (module docstring).

    Attributes:
        cores: the t cores, a tuple of [r_{k-1}, b_k, d_k, r_k] arrays.

    References:
        Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI 2018), eq.
        2; Oseledets 2011, "Tensor-Train Decomposition" (SIAM J. Sci. Comput. 33(5)).

    Example:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from geojax import tt
        >>> m = tt.init(jax.random.key(0), (2, 2), (3, 2), 2)  # a [4, 6] matrix, two cores, rank 2
        >>> m.out_modes, m.in_modes, m.ranks, m.shape
        ((2, 2), (3, 2), (1, 2, 1), (4, 6))
    """

    cores: tuple[jax.Array, ...]

    @property
    def out_modes(self) -> tuple[int, ...]:
        """Row modes (b_1, …, b_t)."""
        return tuple(int(g.shape[1]) for g in self.cores)

    @property
    def in_modes(self) -> tuple[int, ...]:
        """Column modes (d_1, …, d_t)."""
        return tuple(int(g.shape[2]) for g in self.cores)

    @property
    def ranks(self) -> tuple[int, ...]:
        """TT-ranks (r_0, …, r_t)."""
        return (1,) + tuple(int(g.shape[3]) for g in self.cores)

    @property
    def shape(self) -> tuple[int, int]:
        """Shape of the dense matrix, (∏ b_k, ∏ d_k)."""
        return math.prod(self.out_modes), math.prod(self.in_modes)


def _check_modes(
    out_modes: Sequence[int], in_modes: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Validate two equally long, non-empty sequences of positive integers."""
    for name, modes in (("out_modes", out_modes), ("in_modes", in_modes)):
        if isinstance(modes, int | np.integer) or len(modes) == 0:
            raise ValueError(f"{name} must be a non-empty sequence of positive integers, got {modes!r}")
        for v in modes:
            _checks.check_positive_int(v, name)
    if len(out_modes) != len(in_modes):
        raise ValueError(
            "out_modes and in_modes must have the same number of cores, got "
            f"{len(out_modes)} and {len(in_modes)}"
        )
    return tuple(int(v) for v in out_modes), tuple(int(v) for v in in_modes)


def _full_ranks(ranks: int | Sequence[int], cores: int, name: str = "ranks") -> tuple[int, ...]:
    """Expand ``ranks`` (one inner rank, or r_0 … r_t) to the full tuple (1, r_1, …, r_{t-1}, 1)."""
    if isinstance(ranks, int | np.integer) and not isinstance(ranks, bool):
        _checks.check_positive_int(ranks, name)
        return (1,) + (int(ranks),) * (cores - 1) + (1,)
    if not isinstance(ranks, Sequence) or len(ranks) != cores + 1:
        raise ValueError(f"{name} must be a positive integer or {cores + 1} integers r_0…r_t, got {ranks!r}")
    for v in ranks:
        _checks.check_positive_int(v, name)
    if ranks[0] != 1 or ranks[-1] != 1:
        raise ValueError(f"{name} must start and end with 1 (r_0 = r_t = 1), got {tuple(ranks)}")
    return tuple(int(v) for v in ranks)


def _exact_ranks(
    ranks: tuple[int, ...], out_modes: tuple[int, ...], in_modes: tuple[int, ...]
) -> tuple[int, ...]:
    """Cap each r_k at the size of the k-th unfolding, min(∏_{i≤k} b_i d_i, ∏_{i>k} b_i d_i)."""
    sizes = [b * d for b, d in zip(out_modes, in_modes, strict=True)]
    return tuple(
        min(r, math.prod(sizes[:k]), math.prod(sizes[k:])) if 0 < k < len(sizes) else 1
        for k, r in enumerate(ranks)
    )


def init(
    key: jax.Array, out_modes: Sequence[int], in_modes: Sequence[int], ranks: int | Sequence[int]
) -> TTMatrix:
    """A random TT matrix [∏ out_modes, ∏ in_modes] with the given TT-ranks (Hong, Meng & Yuan 2018, eq. 2).

    Core entries are N(0, 1/(d_k r_{k-1})), so every entry of the dense matrix has variance 1/∏ d_k. Ranks are
    taken as given (not capped), so ``num_params`` counts exactly what the paper's Tables 1–2 count.

    Args:
        key: a JAX PRNG key.
        out_modes: the row modes (b_1, …, b_t), positive ints.
        in_modes: the column modes (d_1, …, d_t), positive ints, as many as ``out_modes``.
        ranks: one inner TT-rank for all cores, or the full list r_0 … r_t (r_0 = r_t = 1).

    Returns:
        A :class:`TTMatrix`.

    Raises:
        ValueError: the modes are empty, not positive ints, or of different lengths; ``ranks`` is not a
            positive int or r_0 … r_t starting and ending with 1.

    References:
        Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI 2018), eq.
        2.

    Example:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from geojax import tt
        >>> m = tt.init(jax.random.key(0), (2, 2), (3, 2), 2)  # a [4, 6] matrix, two cores, rank 2
        >>> [g.shape for g in m.cores]
        [(1, 2, 3, 2), (2, 2, 2, 1)]
    """
    out_modes, in_modes = _check_modes(out_modes, in_modes)
    full = _full_ranks(ranks, len(out_modes))
    keys = jax.random.split(key, len(out_modes))
    cores = tuple(
        jax.random.normal(keys[k], (full[k], b, d, full[k + 1])) / math.sqrt(d * full[k])
        for k, (b, d) in enumerate(zip(out_modes, in_modes, strict=True))
    )
    return TTMatrix(cores)


def num_params(m: TTMatrix) -> int:
    """Number of parameters Σ_k r_{k-1} b_k d_k r_k (Hong, Meng & Yuan 2018, Tables 1–2).

    Args:
        m: a :class:`TTMatrix`.

    Returns:
        The parameter count, a Python int.

    References:
        Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI 2018),
        Tables 1–2.

    Example:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from geojax import tt
        >>> m = tt.init(jax.random.key(0), (2, 2), (3, 2), 2)  # a [4, 6] matrix, two cores, rank 2
        >>> tt.num_params(m)
        20
    """
    return sum(int(np.prod(g.shape)) for g in m.cores)


def to_dense(m: TTMatrix) -> jax.Array:
    """The dense matrix R [∏ b_k, ∏ d_k] of a TT matrix (Hong, Meng & Yuan 2018, eq. 2).

    For checks and fitting only; a kernel (NaN propagates).

    Args:
        m: a :class:`TTMatrix`.

    Returns:
        [∏ b_k, ∏ d_k] array in the cores' dtype.

    References:
        Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI 2018), eq.
        2.

    Example:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from geojax import tt
        >>> m = tt.init(jax.random.key(0), (2, 2), (3, 2), 2)  # a [4, 6] matrix, two cores, rank 2
        >>> tt.to_dense(m).shape
        (4, 6)
    """
    dense = jnp.ones((1, 1, 1), m.cores[0].dtype)
    for g in m.cores:
        rows, cols, _ = dense.shape
        dense = jnp.einsum("BDr,rbds->BbDds", dense, g, precision=_HIGHEST)
        dense = dense.reshape(rows * g.shape[1], cols * g.shape[2], g.shape[3])
    return dense[:, :, 0]


def matvec(m: TTMatrix, x: ArrayLike, *, block: int | None = None) -> jax.Array:
    """y = R x for x [..., ∏ d_k] → [..., ∏ b_k], one core at a time (Hong, Meng & Yuan 2018, eq. 4).

    The dense matrix is never formed. The working tensor has layout [N, d_k, M, r_{k-1}], where M holds the
    input modes not yet contracted (d_{k+1} … d_t) followed by the output modes already produced
    (b_1 … b_{k-1}); contracting (d_k, r_{k-1}) with G_k appends b_k, r_k at the end, which after a reshape is
    the layout of the next step. Cost O(t r² b̂ max(b, d)) per vector; the intermediate holds about
    N · max(b, d) · r values. ``plan`` picks a core grouping (``merge_cores``) and a block for a fast product.

    Args:
        m: a :class:`TTMatrix` [b, d].
        x: [..., d] floating vectors, d = ∏ in_modes.
        block: rows per slab: the batch runs in slabs of that many rows, one after another (``map_rows``), so
            that on a CPU each slab's intermediates stay in cache; None does the whole batch at once.

    Returns:
        [..., b] products R x.

    Raises:
        ValueError: ``x`` is not floating with last dimension ∏ in_modes, or ``block`` is not a positive int.

    References:
        Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI 2018), eq.
        4.

    Example:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from geojax import tt
        >>> m = tt.init(jax.random.key(0), (2, 2), (3, 2), 2)  # a [4, 6] matrix, two cores, rank 2
        >>> x = jnp.ones((5, 6))
        >>> bool(jnp.allclose(tt.matvec(m, x), x @ tt.to_dense(m).T, atol=1e-5))
        True
    """
    _checks.check_floating(x, "x")
    if jnp.ndim(x) < 1 or jnp.shape(x)[-1] != m.shape[1]:
        raise ValueError(f"x must have last dimension {m.shape[1]} (∏ in_modes), got {tuple(jnp.shape(x))}")
    if block is not None:
        _checks.check_positive_int(block, "block")
    lead = jnp.shape(x)[:-1]
    rows = jnp.asarray(x).reshape(-1, m.shape[1])
    y = _contract(m, rows) if block is None else map_rows(partial(_contract, m), rows, block)
    return y.reshape(*lead, m.shape[0])


def _contract(m: TTMatrix, x: jax.Array) -> jax.Array:
    """The core-by-core product of ``matvec`` for x [N, ∏ d_k] → [N, ∏ b_k]."""
    n = x.shape[0]
    t = x.reshape(n, m.in_modes[0], -1, 1)
    for k, g in enumerate(m.cores):
        t = jnp.einsum("ndmr,rbds->nmbs", t, g)
        if k + 1 < len(m.cores):
            t = t.reshape(n, m.in_modes[k + 1], -1, g.shape[3])
    return t.reshape(n, m.shape[0])


def map_rows(fn: Callable[[jax.Array], Any], x: ArrayLike, block: int) -> Any:
    """``fn`` (rows [block, ...] → [block, ...], row by row) on x [N, ...] in slabs of ``block`` rows.

    One slab after another in a loop, each written in place into the output [N, ...], so a slab's
    intermediates can stay in cache. When ``block`` does not divide N the last slab is the last ``block``
    rows, overlapping the one before it (those rows are computed twice, with the same result), so no row is
    padded or copied. N ≤ ``block`` is a single call.

    Args:
        fn: a row-wise function, rows [block, ...] → [block, ...], or → a pytree of such arrays.
        x: [N, ...] rows.
        block: rows per slab (a positive int).

    Returns:
        [N, ...] the rows of ``fn(x)`` (a pytree of them where ``fn`` returns one).

    Raises:
        ValueError: ``block`` is not a positive int, or ``fn`` changes the number of rows.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import tt
        >>> print(tt.map_rows(lambda r: 2 * r, jnp.arange(5.0)[:, None], 2).ravel())
        [0. 2. 4. 6. 8.]
    """
    _checks.check_positive_int(block, "block")
    x = jnp.asarray(x)
    n = x.shape[0]
    if n <= block:
        return fn(x)
    out = jax.eval_shape(fn, jax.ShapeDtypeStruct((block, *x.shape[1:]), x.dtype))
    for leaf in jax.tree_util.tree_leaves(out):
        if leaf.shape[:1] != (block,):
            raise ValueError(f"fn must keep the number of rows, got {block} → {leaf.shape[:1]}")

    def slab(i, y):
        start = jnp.minimum(i * block, n - block)
        rows = jax.lax.dynamic_slice_in_dim(x, start, block)
        put = partial(jax.lax.dynamic_update_slice_in_dim, start_index=start, axis=0)
        return jax.tree_util.tree_map(put, y, fn(rows))

    empty = jax.tree_util.tree_map(lambda o: jnp.zeros((n, *o.shape[1:]), o.dtype), out)
    return jax.lax.fori_loop(0, -(-n // block), slab, empty)


def merge_cores(m: TTMatrix, group: int | Sequence[int]) -> TTMatrix:
    """The same TT matrix with adjacent cores contracted into one (eq. 2 of Hong, Meng & Yuan 2018).

    Cores k … k+g−1 become one core [r_{k-1}, b_k ⋯ b_{k+g−1}, d_k ⋯ d_{k+g−1}, r_{k+g−1}]: fewer, larger
    cores, so ``matvec`` makes fewer passes over its N · max(b, d) · r intermediate at the price of more
    arithmetic and parameters (e.g. 4096 → 4096 bits, 6 cores of 4×4 at rank 4, group 3: 2 cores, 32,768
    parameters).

    Args:
        m: a :class:`TTMatrix`.
        group: either a number of cores per group (the last group may be shorter) or the sizes of the groups
            in order, summing to the number of cores (e.g. (2, 1, 1, 2)).

    Returns:
        A :class:`TTMatrix` with the same dense matrix.

    Raises:
        ValueError: ``group`` is not a positive int or a non-empty sequence of positive ints summing to the
            number of cores.

    References:
        Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI 2018), eq.
        2.

    Example:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from geojax import tt
        >>> m = tt.init(jax.random.key(0), (2, 2), (3, 2), 2)  # a [4, 6] matrix, two cores, rank 2
        >>> merged = tt.merge_cores(m, 2)
        >>> len(merged.cores), bool(jnp.allclose(tt.to_dense(merged), tt.to_dense(m), atol=1e-6))
        (1, True)
    """
    t = len(m.cores)
    if isinstance(group, int | np.integer) and not isinstance(group, bool):
        _checks.check_positive_int(group, "group")
        sizes = [min(int(group), t - start) for start in range(0, t, int(group))]
    else:
        if not isinstance(group, Sequence) or len(group) == 0:
            raise ValueError(f"group must be a positive integer or a sequence of group sizes, got {group!r}")
        for v in group:
            _checks.check_positive_int(v, "group")
        sizes = [int(v) for v in group]
        if sum(sizes) != t:
            raise ValueError(f"group sizes must sum to the number of cores {t}, got {tuple(sizes)}")
    merged, start = [], 0
    for size in sizes:
        core = m.cores[start]
        for g in m.cores[start + 1 : start + size]:
            r0, b, d, _ = core.shape
            core = jnp.einsum("abdr,rBDs->abBdDs", core, g, precision=_HIGHEST)
            core = core.reshape(r0, b * g.shape[1], d * g.shape[2], g.shape[3])
        merged.append(core)
        start += size
    return TTMatrix(tuple(merged))


class Plan(NamedTuple):
    """A fast exact layout for ``matvec`` on a CPU: ``merge_cores(m, groups)``, slabs of ``block`` rows.

    Made by :func:`plan`.

    Attributes:
        groups: the group sizes for :func:`merge_cores`.
        block: rows per slab for ``matvec`` / :func:`map_rows`.
    """

    groups: tuple[int, ...]
    block: int


# Weight of one value read or written by a contraction pass, in multiply-adds, in ``plan``'s cost model;
# and the number of values a slab's largest pass may hold (4 MiB of float32).
_PASS_WEIGHT = 8
_SLAB_VALUES = 1 << 20


def _group_cost(m: TTMatrix, sizes: Sequence[int]) -> tuple[int, int]:
    """(cost per vector, largest pass in values per vector) of ``matvec`` on ``merge_cores(m, sizes)``.

    A pass through merged core [r, B, D, s] when the working tensor has P other values per (d, r) slice
    costs P·D·r·B·s multiply-adds and reads P·D·r and writes P·B·s values.
    """
    out_modes, in_modes, ranks = m.out_modes, m.in_modes, m.ranks
    cost, largest, start, produced, remaining = 0, 0, 0, 1, math.prod(in_modes)
    for size in sizes:
        b = math.prod(out_modes[start : start + size])
        d = math.prod(in_modes[start : start + size])
        r0, r1 = ranks[start], ranks[start + size]
        remaining //= d
        other = remaining * produced
        moved = other * (d * r0 + b * r1)
        cost += other * d * r0 * b * r1 + _PASS_WEIGHT * moved
        largest = max(largest, moved)
        produced *= b
        start += size
    return cost, largest


def _compositions(t: int) -> list[tuple[int, ...]]:
    """All ways to split t cores into runs of adjacent cores, as run lengths."""
    found = []
    for cuts in itertools.product((False, True), repeat=t - 1):
        sizes, run = [], 1
        for cut in cuts:
            if cut:
                sizes.append(run)
                run = 1
            else:
                run += 1
        found.append((*sizes, run))
    return found


def plan(m: TTMatrix) -> Plan:
    """A core grouping and row block for a fast exact ``matvec`` of ``m`` on a CPU.

    Every grouping of adjacent cores (``merge_cores``) gives the same matrix, but a different amount of
    arithmetic and memory traffic: merging cores makes fewer passes over the intermediate with more
    multiply-adds per value, and small contractions (r·d of 4–16) are bound by memory, not arithmetic. Each
    grouping is scored by its multiply-adds plus 8 per value each pass reads or writes (a model fitted to
    XLA:CPU timings of 4096-d inputs, 6 cores of 4, rank 4); groupings are searched exhaustively for up to 12
    cores, else cores are kept as they are. Merging itself (once per call, whatever the batch) is not counted,
    and for a small matrix the cheapest grouping may be one core, the dense matrix. The block holds about 1 M
    values (4 MiB of float32) in the largest pass. E.g. 4096 → 4096 bits, 6 cores of 4×4, rank 4: groups
    (2, 1, 1, 2), block 32; about 1.05 M multiply-adds per vector against 16.8 M dense.

    Args:
        m: a :class:`TTMatrix`.

    Returns:
        Plan(groups, block).

    Example:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from geojax import tt
        >>> m = tt.init(jax.random.key(0), (2, 2), (3, 2), 2)  # a [4, 6] matrix, two cores, rank 2
        >>> tt.plan(m).groups  # small: one core, the dense matrix
        (2,)
    """
    t = len(m.cores)
    candidates = _compositions(t) if t <= 12 else [(1,) * t]
    groups = min(candidates, key=lambda sizes: (_group_cost(m, sizes)[0], len(sizes)))
    largest = _group_cost(m, groups)[1]
    return Plan(groups, max(1, _SLAB_VALUES // max(1, largest)))


def _halves(m: TTMatrix) -> tuple[jax.Array, jax.Array]:
    """Cores 1…⌊t/2⌋ and the rest, each merged: A [r, B1, D1] and Bᵀ [r, D2, B2] with R = Σ_a A_a ⊗ B_a."""
    h = max(1, len(m.cores) // 2)
    left = merge_cores(TTMatrix(m.cores[:h]), h).cores[0]  # [1, B1, D1, r]
    if h == len(m.cores):
        return left[0].transpose(2, 0, 1), jnp.ones((1, 1, 1), left.dtype)
    right = merge_cores(TTMatrix(m.cores[h:]), len(m.cores) - h).cores[0]  # [r, B2, D2, 1]
    return left[0].transpose(2, 0, 1), right[..., 0].transpose(0, 2, 1)


def _fused_kernel(x_ref, a_ref, bt_ref, y_ref):
    """Y_v = Σ_a A_a X_v B_aᵀ for each vector of the block.

    x_ref [n, D1, D2], a_ref [r, B1, D1], bt_ref [r, D2, B2], y_ref [n, B1, B2].
    """
    for v in range(x_ref.shape[0]):
        x = x_ref[v]
        acc = jnp.zeros(y_ref.shape[1:], jnp.float32)
        for a in range(a_ref.shape[0]):
            t = jnp.dot(x, bt_ref[a], preferred_element_type=jnp.float32)
            acc += jnp.dot(a_ref[a], t, preferred_element_type=jnp.float32)
        y_ref[v] = acc


def _pow2(n: int) -> int:
    """Smallest power of two ≥ max(n, 16) (block sizes of the GPU kernel)."""
    return 1 << max(4, (n - 1).bit_length())


def matvec_fused(m: TTMatrix, x: ArrayLike, *, block: int = 2, interpret: bool = False) -> jax.Array:
    """y = R x as one fused Pallas kernel (GPU; Hong, Meng & Yuan 2018, eq. 4), in float32.

    ``matvec`` writes an N · max(b, d) · r intermediate to memory after every core; on a GPU those passes, not
    the arithmetic, bound its speed. Here the cores are merged into two halves, A [B1, D1, r] (cores
    1 … ⌊t/2⌋) and B [r, B2, D2] (the rest), so that R = Σ_a A_a ⊗ B_a, and each vector x, viewed as
    X [D1, D2], gives Y = Σ_a A_a X B_aᵀ [B1, B2] without leaving the chip: 2r small matrix products per
    vector, ``block`` vectors per program. Matrix dimensions are zero-padded to powers of two (≥ 16).

    Args:
        m: a :class:`TTMatrix` [b, d].
        x: [..., d] floating vectors, d = ∏ in_modes.
        block: vectors per program (a positive int).
        interpret: run the Pallas interpreter instead (any backend; slow, for checks).

    Returns:
        [..., b] float32 products R x.

    Raises:
        ValueError: ``x`` is not floating with last dimension ∏ in_modes, or ``block`` is not a positive int.

    References:
        Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI 2018), eq.
        4.

    Example:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from geojax import tt
        >>> m = tt.init(jax.random.key(0), (2, 2), (3, 2), 2)  # a [4, 6] matrix, two cores, rank 2
        >>> x = jnp.ones((5, 6))
        >>> y = tt.matvec_fused(m, x, interpret=True)
        >>> bool(jnp.allclose(y, tt.matvec(m, x), atol=1e-5))
        True
    """
    from jax.experimental import pallas as pl

    _checks.check_floating(x, "x")
    if jnp.ndim(x) < 1 or jnp.shape(x)[-1] != m.shape[1]:
        raise ValueError(f"x must have last dimension {m.shape[1]} (∏ in_modes), got {tuple(jnp.shape(x))}")
    _checks.check_positive_int(block, "block")
    a, bt = _halves(m)
    (r, b1, d1), (_, d2, b2) = a.shape, bt.shape
    p_b1, p_d1, p_d2, p_b2 = map(_pow2, (b1, d1, d2, b2))
    a = jnp.pad(a, ((0, 0), (0, p_b1 - b1), (0, p_d1 - d1))).astype(jnp.float32)
    bt = jnp.pad(bt, ((0, 0), (0, p_d2 - d2), (0, p_b2 - b2))).astype(jnp.float32)
    lead = jnp.shape(x)[:-1]
    n = math.prod(lead)
    n_pad = -(-n // block) * block
    xs = jnp.pad(
        jnp.reshape(x, (n, d1, d2)).astype(jnp.float32), ((0, n_pad - n), (0, p_d1 - d1), (0, p_d2 - d2))
    )
    y = pl.pallas_call(
        _fused_kernel,
        out_shape=jax.ShapeDtypeStruct((n_pad, p_b1, p_b2), jnp.float32),
        grid=(n_pad // block,),
        in_specs=[
            pl.BlockSpec((block, p_d1, p_d2), lambda i: (i, 0, 0)),
            pl.BlockSpec((r, p_b1, p_d1), lambda i: (0, 0, 0)),
            pl.BlockSpec((r, p_d2, p_b2), lambda i: (0, 0, 0)),
        ],
        out_specs=pl.BlockSpec((block, p_b1, p_b2), lambda i: (i, 0, 0)),
        interpret=interpret,
    )(xs, a, bt)
    return y[:n, :b1, :b2].reshape(*lead, b1 * b2)


def tt_svd(
    dense: ArrayLike, out_modes: Sequence[int], in_modes: Sequence[int], ranks: int | Sequence[int]
) -> TTMatrix:
    """TT-SVD (Oseledets 2011, used by Hong, Meng & Yuan 2018, §5.4): round a dense matrix to TT format.

    Sequential truncated SVDs of the unfoldings of the tensor with modes (b_1 d_1, …, b_t d_t). Each requested
    rank is capped at the size of its unfolding, min(∏_{i≤k} b_i d_i, ∏_{i>k} b_i d_i), where the
    decomposition is exact, so at those ranks ``to_dense(tt_svd(a, ...)) == a``.

    Args:
        dense: [∏ b_k, ∏ d_k] finite floating matrix.
        out_modes: the row modes (b_1, …, b_t), positive ints.
        in_modes: the column modes (d_1, …, d_t), positive ints, as many as ``out_modes``.
        ranks: one inner TT-rank for all cores, or the full list r_0 … r_t (r_0 = r_t = 1).

    Returns:
        A :class:`TTMatrix` with the (capped) ranks.

    Raises:
        ValueError: the modes or ranks are malformed, ``dense`` is not floating of shape (∏ out_modes,
            ∏ in_modes), or a concrete ``dense`` holds NaN or ±inf.

    References:
        Oseledets 2011, "Tensor-Train Decomposition" (SIAM J. Sci. Comput. 33(5)); Hong, Meng & Yuan 2018,
        "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI 2018), §5.4.

    Example:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from geojax import tt
        >>> m = tt.init(jax.random.key(0), (2, 2), (3, 2), 2)  # a [4, 6] matrix, two cores, rank 2
        >>> a = tt.to_dense(m)
        >>> s = tt.tt_svd(a, (2, 2), (3, 2), 4)
        >>> s.ranks, bool(jnp.allclose(tt.to_dense(s), a, atol=1e-5))
        ((1, 4, 1), True)
    """
    out_modes, in_modes = _check_modes(out_modes, in_modes)
    _checks.check_floating(dense, "dense")
    want = (math.prod(out_modes), math.prod(in_modes))
    if jnp.shape(dense) != want:
        raise ValueError(f"dense must have shape {want} (∏ out_modes, ∏ in_modes), got {jnp.shape(dense)}")
    _checks.check_finite(dense, "dense")
    dense = jnp.asarray(dense)
    t = len(out_modes)
    r = _exact_ranks(_full_ranks(ranks, t), out_modes, in_modes)
    interleave = [axis for k in range(t) for axis in (k, t + k)]
    rest = jnp.transpose(dense.reshape(out_modes + in_modes), interleave)
    cores = []
    for k in range(t - 1):
        u, s, vt = jnp.linalg.svd(rest.reshape(r[k] * out_modes[k] * in_modes[k], -1), full_matrices=False)
        cores.append(u[:, : r[k + 1]].reshape(r[k], out_modes[k], in_modes[k], r[k + 1]))
        rest = s[: r[k + 1], None] * vt[: r[k + 1]]
    cores.append(rest.reshape(r[t - 1], out_modes[t - 1], in_modes[t - 1], 1))
    return TTMatrix(tuple(cores))


def balanced_modes(n: int, cores: int) -> tuple[int, ...]:
    """Split n into ``cores`` integer modes with product n, as even as its prime factors allow.

    Prime factors, largest first, go to the currently smallest mode. Modes of 1 appear only when n has fewer
    prime factors than ``cores``.

    Args:
        n: the dimension to split (a positive int).
        cores: the number of modes (a positive int).

    Returns:
        The modes, a tuple of ints in descending order.

    Raises:
        ValueError: ``n`` or ``cores`` is not a positive int.

    Example:
        >>> from geojax import tt
        >>> tt.balanced_modes(4096, 6), tt.balanced_modes(784, 4)
        ((4, 4, 4, 4, 4, 4), (7, 7, 4, 4))
    """
    _checks.check_positive_int(n, "n")
    _checks.check_positive_int(cores, "cores")
    primes, rest, p = [], int(n), 2
    while p * p <= rest:
        while rest % p == 0:
            primes.append(p)
            rest //= p
        p += 1
    if rest > 1:
        primes.append(rest)
    modes = [1] * cores
    for q in sorted(primes, reverse=True):
        modes[int(np.argmin(modes))] *= q
    return tuple(sorted(modes, reverse=True))


def _mode_split(modes: tuple[int, ...], k: int) -> tuple[int, int, int]:
    """(∏ modes before k, modes[k], ∏ modes after k)."""
    return math.prod(modes[:k]), modes[k], math.prod(modes[k + 1 :])


def _right_orthogonalize(cores: list[jax.Array]) -> list[jax.Array]:
    """Make cores 2 … t right-orthonormal by QR from the right; the dense matrix is unchanged."""
    cores = list(cores)
    for k in range(len(cores) - 1, 0, -1):
        r0, b, d, r1 = cores[k].shape
        q, rr = jnp.linalg.qr(cores[k].reshape(r0, b * d * r1).T)
        cores[k] = q.T.reshape(r0, b, d, r1)
        cores[k - 1] = jnp.einsum("abdr,sr->abds", cores[k - 1], rr, precision=_HIGHEST)
    return cores


def als_sweep(m: TTMatrix, gram: ArrayLike, cross: ArrayLike) -> TTMatrix:
    """One ALS sweep (cores 1 → t) of min_R tr(R S Rᵀ) − 2⟨R, T⟩ in TT format (Hong, Meng & Yuan 2018).

    Eqs. 17–22. With S = X Xᵀ (``gram``) and T = Z Xᵀ (``cross``) this is min_R ‖R X − Z‖²_F (eq. 13) at the
    ranks of ``m``. Each core is the exact least-squares minimiser of eq. 22 with the others fixed, so the
    objective never increases. With ``R(s, l) = L[s_<, l_<, α] G_k[α, i, j, β] Rt[β, s_>, l_>]`` the normal
    matrix ``(QG_≠k)ᵀ(QG_≠k)`` of eq. 22 is ``I_{b_k} ⊗ H̃_k`` with
    ``H̃_k = Σ PL[l_<, α, l'_<, α'] S[(l_<, j, l_>), (l'_<, j', l'_>)] PR[β, l_>, β', l'_>]``, where PL, PR are
    the Grams of the left and right interfaces (eq. 19) summed over the row indices. The cores are kept
    orthonormal on both sides of the one being solved (QR moves, which leave R unchanged), so each small
    system is as well conditioned as S allows; a pseudo-inverse handles a singular S.

    Args:
        m: the current :class:`TTMatrix` [b, d], with ranks no larger than its unfoldings (as ``tt_svd``
            gives).
        gram: S = X Xᵀ, [d, d], finite.
        cross: T = Z Xᵀ, [b, d], finite.

    Returns:
        The updated :class:`TTMatrix`, same modes and ranks.

    Raises:
        ValueError: ``gram`` or ``cross`` has the wrong shape or (concrete) holds NaN or ±inf, or ``m``'s
            ranks exceed its unfoldings.

    References:
        Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI 2018),
        eqs. 13 and 17–22.

    Example:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from geojax import tt
        >>> m = tt.init(jax.random.key(0), (2, 2), (3, 2), 2)  # a [4, 6] matrix, two cores, rank 2
        >>> a = tt.to_dense(m)
        >>> x = jax.random.normal(jax.random.key(1), (6, 20))
        >>> z = a @ x
        >>> start = tt.tt_svd(a + 0.1, (2, 2), (3, 2), 2)
        >>> swept = jax.jit(tt.als_sweep)(start, x @ x.T, z @ x.T)  # traceable; one compilation
        >>> def error(r):
        ...     return float(jnp.sum((tt.to_dense(r) @ x - z) ** 2))
        >>> error(swept) < error(start)
        True
    """
    b, d = m.shape
    if jnp.shape(gram) != (d, d):
        raise ValueError(f"gram must have shape {(d, d)} (X Xᵀ), got {tuple(jnp.shape(gram))}")
    if jnp.shape(cross) != (b, d):
        raise ValueError(f"cross must have shape {(b, d)} (Z Xᵀ), got {tuple(jnp.shape(cross))}")
    if m.ranks != _exact_ranks(m.ranks, m.out_modes, m.in_modes):
        raise ValueError(f"m must have ranks no larger than its unfoldings (as tt_svd gives), got {m.ranks}")
    _checks.check_finite(gram, "gram")
    _checks.check_finite(cross, "cross")
    gram, cross = jnp.asarray(gram), jnp.asarray(cross)
    bm, dm, t = m.out_modes, m.in_modes, len(m.cores)
    cores = _right_orthogonalize(list(m.cores))
    # Right interfaces Rt_k [r_k, B_>, D_>] and their Grams PR_k [r_k, D_>, r_k, D_>], k = t … 1.
    rts = [jnp.ones((1, 1, 1), gram.dtype)]
    prs = [jnp.ones((1, 1, 1, 1), gram.dtype)]
    for g in cores[:0:-1]:
        rt = jnp.einsum("aijb,btm->aitjm", g, rts[0], precision=_HIGHEST)
        rts.insert(0, rt.reshape(g.shape[0], g.shape[1] * rts[0].shape[1], -1))
        pr = jnp.einsum("aijb,AiJB,bmBM->ajmAJM", g, g, prs[0], precision=_HIGHEST)
        prs.insert(0, pr.reshape(g.shape[0], -1, g.shape[0], pr.shape[-1] * g.shape[2]))
    left = jnp.ones((1, 1, 1), gram.dtype)
    pl = jnp.ones((1, 1, 1, 1), gram.dtype)
    for k in range(t):
        r0, r1 = cores[k].shape[0], cores[k].shape[3]
        d_lo, d_k, d_hi = _mode_split(dm, k)
        b_lo, b_k, b_hi = _mode_split(bm, k)
        s6 = gram.reshape(d_lo, d_k, d_hi, d_lo, d_k, d_hi)
        hess = jnp.einsum("lapA,ljmpJM,bmBM->ajbAJB", pl, s6, prs[k], precision=_HIGHEST)
        t6 = cross.reshape(b_lo, b_k, b_hi, d_lo, d_k, d_hi)
        lin = jnp.einsum("sla,sitljm,btm->ajbi", left, t6, rts[k], precision=_HIGHEST)
        size = r0 * d_k * r1
        g = jnp.matmul(
            jnp.linalg.pinv(hess.reshape(size, size), hermitian=True),
            lin.reshape(size, b_k),
            precision=_HIGHEST,
        )
        g = g.reshape(r0, d_k, r1, b_k).transpose(0, 3, 1, 2)
        if k + 1 < t:
            q, rr = jnp.linalg.qr(g.reshape(r0 * b_k * d_k, r1))
            g = q.reshape(r0, b_k, d_k, r1)
            cores[k + 1] = jnp.einsum("sr,rbdt->sbdt", rr, cores[k + 1], precision=_HIGHEST)
            left = jnp.einsum("sla,aijb->siljb", left, g, precision=_HIGHEST)
            left = left.reshape(b_lo * b_k, d_lo * d_k, r1)
            pl = jnp.einsum("lapA,aijb,AiJB->ljbpJB", pl, g, g, precision=_HIGHEST)
            pl = pl.reshape(d_lo * d_k, r1, d_lo * d_k, r1)
        cores[k] = g
    return TTMatrix(tuple(cores))
