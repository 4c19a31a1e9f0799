"""The distance kernels of the exact scans (:mod:`geojax.search.scan`): wraparound L1 and squared L2 on packed
torus codes (Stowell 2026, §4), Hamming distance on packed bits, and PQ's asymmetric distance by lookup
tables (Jégou et al. 2011, eq. 13).

Every kernel is ``kernel(qdata [b, W, ...], rows, shared) -> [b, n]`` distances. With shared=True, rows are
one database chunk stored column-major [W, n] (every query of the block against every row: the loops run
along contiguous rows, which vectorises); with shared=False, rows are [b, n, W], row i's for query i; with
shared=BLOCKS, rows are (blocks [B, W, n] of column-major rows, numbers [b, m]): query i against blocks
numbers[i] → [b, m, n] (inverted lists), each column read straight from the blocks, not copied out first.
"""

from __future__ import annotations

import functools
import os
import platform
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_F32 = jnp.float32
_MAX_UNROLL = 128
BLOCKS = "blocks"  # the kernels' third layout: per-query blocks of column-major rows


def _columns(term, q: jax.Array, rows: jax.Array, shared: bool, acc_dtype):
    """The function w ↦ term(q[:, w], rows' column w) in ``acc_dtype`` (w a Python or traced int).

    Shared rows [W, *S] give [b, *S]; per-query rows [b, n, W] give [b, n]; per-query blocks
    (blocks [B, W, n], numbers [b, m]) (shared = BLOCKS) give [b, m, n].
    """

    def column(w):
        qw = lax.dynamic_index_in_dim(q, w, axis=1, keepdims=False)
        if shared == BLOCKS:
            blocks, numbers = rows
            return term(qw[:, None, None], blocks[numbers, w]).astype(acc_dtype)
        if shared:
            qw = qw.reshape(qw.shape[0], *([1] * (rows.ndim - 1)))
            return term(qw, lax.dynamic_index_in_dim(rows, w, axis=0, keepdims=True)).astype(acc_dtype)
        return term(qw[:, None], lax.dynamic_index_in_dim(rows, w, axis=2, keepdims=False)).astype(acc_dtype)

    return column


def _sum_columns(term, q: jax.Array, rows: jax.Array, shared: bool, acc_dtype) -> jax.Array:
    """Σ_w term(q[:, w], rows' column w) (:func:`_columns`), unrolled for narrow codes, a fori_loop for wide
    ones."""
    width = q.shape[1]
    column = _columns(term, q, rows, shared, acc_dtype)
    if width <= _MAX_UNROLL:
        total = column(0)
        for w in range(1, width):
            total = total + column(w)
        return total
    return lax.fori_loop(1, width, lambda w, acc: acc + column(w), column(0))


def _wrap_byte_distance(a: jax.Array, b: jax.Array) -> jax.Array:
    """Per-byte flat-torus distance min((a−b) mod 256, (b−a) mod 256) on uint8 (overflow is the torus)."""
    return jnp.minimum(a - b, b - a)


def _lane_mask(bits: int, lane_bit: int) -> int:
    """uint32 mask with bit ``lane_bit`` of every ``bits``-bit lane set."""
    return sum(1 << (i + lane_bit) for i in range(0, 32, bits))


def _wrap_word_distance(a: jax.Array, b: jax.Array, bits: int = 8) -> jax.Array:
    """Per-lane flat-torus distance of 32/bits codes packed in a uint32 word (SWAR), summed into two
    16-bit lanes.

    d = a − b per ``bits``-bit lane without borrows between lanes; min(d, 2^b − d) = (d XOR (2^b − 1)·s) + s
    with s = d ≥ 2^(b−1), which never carries out of a lane; then neighbouring lanes are added pairwise
    until bytes 0+1 and 2+3 sit in the low and high 16 bits. One word adds at most 2^(b−1)·16/b to a
    16-bit lane (256 for bytes, 32 for nibbles, 16 for 2-bit lanes).
    """
    hi, low = jnp.uint32(_lane_mask(bits, bits - 1)), jnp.uint32(_lane_mask(bits, 0))
    d = ((a | hi) - (b & ~hi)) ^ ((a ^ ~b) & hi)
    s = (d >> (bits - 1)) & low
    r = (d ^ (s * jnp.uint32((1 << bits) - 1))) + s
    width = bits
    while width < 16:
        keep = jnp.uint32(sum(((1 << width) - 1) << i for i in range(0, 32, 2 * width)))
        r = (r & keep) + ((r >> width) & keep)
        width *= 2
    return r


def word_limit(bits: int) -> int:
    """Most uint32 words whose lane sums cannot overflow a 16-bit lane (255 bytes, 2,047 for nibbles …).

    The wraparound L1 scan of :mod:`geojax.search.scan` uses the SWAR word kernels
    (:data:`TORUS_WORDS_KERNELS`) up to this many words, and one byte per coordinate above.

    Args:
        bits: bits per coordinate, 2, 4 or 8.

    Returns:
        The number of words.

    Example:
        >>> from geojax.search import _kernels
        >>> _kernels.word_limit(8), _kernels.word_limit(4)
        (255, 2047)
    """
    return 0xFFFF // ((1 << (bits - 1)) * 16 // bits)


def _torus_words_kernel(q: jax.Array, rows: jax.Array, shared: bool, *, bits: int = 8) -> jax.Array:
    """Wraparound L1 on packed b-bit codes viewed as uint32 words (≤ :func:`word_limit` words)."""
    lanes = _sum_columns(functools.partial(_wrap_word_distance, bits=bits), q, rows, shared, jnp.uint32)
    return ((lanes & jnp.uint32(0xFFFF)) + (lanes >> 16)).astype(jnp.int32)


def _torus_bytes_kernel(q: jax.Array, rows: jax.Array, shared: bool, *, p: int, shift: int = 0) -> jax.Array:
    """Wraparound Lp^p on uint8 codes, one byte column at a time, int32 sums. b-bit codes come shifted left
    by ``shift`` = 8 − b, so that uint8 overflow wraps them at 2^b; the distance is shifted back."""

    def term(a, b):
        d = jnp.right_shift(_wrap_byte_distance(a, b), jnp.uint8(shift)).astype(jnp.int32)
        return d if p == 1 else d * d

    return _sum_columns(term, q, rows, shared, jnp.int32)


# The wraparound kernels the scans pick from: by bits (L1 on uint32 words, up to ``word_limit(bits)`` words)
# and by (bits, p) (one byte per coordinate). One object per key, so that jit's static-argument cache hits.
TORUS_WORDS_KERNELS = {b: functools.partial(_torus_words_kernel, bits=b) for b in (2, 4, 8)}
TORUS_BYTES_KERNELS = {
    (b, p): functools.partial(_torus_bytes_kernel, p=p, shift=8 - b) for b in (2, 4, 8) for p in (1, 2)
}


_M1, _M2, _M4, _M8 = (np.uint32(m) for m in (0x55555555, 0x33333333, 0x0F0F0F0F, 0x00FF00FF))
_BYTE_WORDS = 30  # words whose per-byte bit counts (≤ 8 a word) one uint8 lane sums: 30 · 8 ≤ 255


def _nibble_counts(x: jax.Array) -> jax.Array:
    """The set bits of each 4-bit lane of uint32 words (0–4 a lane), SWAR."""
    x = x - ((x >> 1) & _M1)
    return (x & _M2) + ((x >> 2) & _M2)


def _three_word_nibbles(*words: jax.Array) -> jax.Array:
    """The set bits of each 4-bit lane of up to three uint32 words together (0–12 a lane).

    Three words pass a carry-save adder first: ones = a ⊕ b ⊕ c and twos = majority(a, b, c), so that
    popcount(a) + popcount(b) + popcount(c) = popcount(ones) + 2 · popcount(twos) (two words: a half adder),
    and two nibble counts do the work of three.
    """
    if len(words) == 1:
        return _nibble_counts(words[0])
    a, b, *c = words
    half = a ^ b
    ones, twos = (half, a & b) if not c else (half ^ c[0], (a & b) | (half & c[0]))
    return _nibble_counts(ones) + (_nibble_counts(twos) << 1)


def _byte_counts(v: jax.Array) -> jax.Array:
    """Neighbouring 4-bit lanes added into 8-bit lanes (each ≤ 24 when the nibbles are ≤ 12)."""
    return (v & _M4) + ((v >> 4) & _M4)


def _lane_total(b: jax.Array) -> jax.Array:
    """The sum of a uint32 word's four 8-bit lanes, as int32."""
    h = (b & _M8) + ((b >> 8) & _M8)
    return ((h & np.uint32(0xFFFF)) + (h >> 16)).astype(jnp.int32)


def _hamming_swar(q: jax.Array, rows: jax.Array, shared: bool) -> jax.Array:
    """Hamming distance of uint32 words, Σ popcount(a XOR b), counted by SWAR: int32.

    For CPUs without a vector population count (x86 before AVX-512 VPOPCNTDQ), where XLA's
    ``lax.population_count`` on a vector becomes a table look-up per nibble: on a 2-core AMD EPYC (AVX2) this
    form scanned 1,000 queries × 1,000,000 256-bit rows about 12 % faster. The bit counts of each nibble of
    three words, through a carry-save adder, are added (≤ 12 a nibble), folded into bytes, and the bytes
    summed over up to :data:`_BYTE_WORDS` words before one fold of each row's four bytes.
    """
    width = q.shape[1]
    column = _columns(lambda a, b: a ^ b, q, rows, shared, jnp.uint32)

    def group(start, count: int) -> jax.Array:  # the distance over words start … start + count − 1
        sums = [
            _byte_counts(_three_word_nibbles(*(column(start + i) for i in range(j, min(j + 3, count)))))
            for j in range(0, count, 3)
        ]
        return _lane_total(sum(sums[1:], sums[0]))

    full, tail = divmod(width, _BYTE_WORDS)
    if width <= _MAX_UNROLL:
        parts = [group(g * _BYTE_WORDS, _BYTE_WORDS) for g in range(full)] + (
            [group(full * _BYTE_WORDS, tail)] if tail else []
        )
        return sum(parts[1:], parts[0])
    total = lax.fori_loop(
        1, full, lambda g, acc: acc + group(g * _BYTE_WORDS, _BYTE_WORDS), group(0, _BYTE_WORDS)
    )
    return total + group(full * _BYTE_WORDS, tail) if tail else total


def _hamming_popcount(q: jax.Array, rows: jax.Array, shared: bool) -> jax.Array:
    """Hamming distance of uint32 words, Σ popcount(a XOR b), one ``lax.population_count`` per word: int32.

    For GPUs and for CPUs with a vector population count (AVX-512 VPOPCNTDQ, Arm's NEON): on a 2-core Intel
    Xeon with VPOPCNTDQ it scanned 1,000 queries × 1,000,000 256-bit rows about 2.5× faster than the SWAR
    form.
    """
    total = _sum_columns(lambda a, b: lax.population_count(a ^ b), q, rows, shared, jnp.uint32)
    return total.astype(jnp.int32)


def vector_popcount(machine: str, cpu_flags: frozenset[str], xla_flags: str) -> bool:
    """Whether XLA's CPU code on this host counts bits with a vector instruction.

    True on Arm (aarch64 / arm64: NEON's CNT) and on x86 with AVX-512 VPOPCNTDQ (``avx512_vpopcntdq`` in the
    CPU flags), unless ``--xla_cpu_max_isa`` in ``xla_flags`` keeps XLA below AVX-512.

    Args:
        machine: ``platform.machine()``.
        cpu_flags: the CPU's feature flags as Linux's /proc/cpuinfo names them (empty when unknown).
        xla_flags: the ``XLA_FLAGS`` environment variable ("" when unset).

    Returns:
        True for a vector population count.

    Example:
        >>> from geojax.search._kernels import vector_popcount
        >>> flags = frozenset({"avx2", "avx512_vpopcntdq"})
        >>> vector_popcount("x86_64", flags, ""), vector_popcount("x86_64", flags, "--xla_cpu_max_isa=AVX2")
        (True, False)
    """
    if machine.lower() in ("aarch64", "arm64"):
        return True
    cap = re.search(r"--xla_cpu_max_isa=(\w+)", xla_flags)
    capped = cap is not None and not cap.group(1).upper().startswith("AVX512")
    return "avx512_vpopcntdq" in cpu_flags and not capped


def cpu_flags() -> frozenset[str]:
    """The host CPU's feature flags, as Linux's /proc/cpuinfo lists them.

    x86's ``flags`` line or Arm's ``Features``.

    Returns:
        The flag names; empty where there is no such file or line.
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@functools.cache
def _host_vector_popcount() -> bool:
    """:func:`vector_popcount` for this process's host (read once)."""
    return vector_popcount(platform.machine(), cpu_flags(), os.environ.get("XLA_FLAGS", ""))


def counts_by_popcount(platform_name: str) -> bool:
    """Whether :func:`hamming_kernel` counts bits with one population count per word on a platform.

    Everywhere but on a CPU host without a vector population count, which counts them by SWAR.

    Args:
        platform_name: the platform of the devices the scan runs on.

    Returns:
        True for the population count.
    """
    return platform_name != "cpu" or _host_vector_popcount()


def hamming_kernel(q: jax.Array, rows: jax.Array, shared: bool) -> jax.Array:
    """Hamming distance of uint32 words: Σ popcount(a XOR b), int32 (a kernel of the module docstring).

    One population count per word (:func:`_hamming_popcount`) where the hardware counts bits in vectors: on
    GPUs and, by :func:`vector_popcount`, on this host's CPU; otherwise the CPU program counts them by SWAR
    (:func:`_hamming_swar`), the rule :func:`counts_by_popcount` states. Both give the same distances.

    Args:
        q: [b, W] uint32 query words.
        rows: the rows in the layout ``shared`` names (module docstring).
        shared: True, False or :data:`BLOCKS`.

    Returns:
        [b, n] (or [b, m, n] for blocks) int32 distances.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax.search import _kernels
        >>> q = jnp.array([[0b1011]], jnp.uint32)
        >>> print(_kernels.hamming_kernel(q, jnp.array([[0, 0b1111]], jnp.uint32), True))
        [[3 1]]
    """
    if _host_vector_popcount():
        return _hamming_popcount(q, rows, shared)
    return lax.platform_dependent(
        q,
        rows,
        cpu=functools.partial(_hamming_swar, shared=shared),
        default=functools.partial(_hamming_popcount, shared=shared),
    )


def pq_kernel(tables: jax.Array, rows: jax.Array, shared: bool) -> jax.Array:
    """Asymmetric distance Σ_j T[j, code_j, q] (Jégou et al. 2011 eq. 13), j = 0 … m−1 in order.

    Args:
        tables: [m, K, b] float32 lookup tables (:func:`pq_tables`), queries last, so that one code's entries
            for consecutive queries are contiguous (the scan's loop over queries then reads a row of the
            table).
        rows: shared rows: codes [m, *S]; blocks (shared = BLOCKS): (codes [B, m, n], numbers [b, g]);
            otherwise [b, n, m].
        shared: True, False or :data:`BLOCKS`.

    Returns:
        float32 distances: [b, *S] for shared rows, [b, g, n] for blocks, otherwise [b, n].
    """
    codes = rows if shared == BLOCKS else rows.astype(jnp.int32)
    total = None
    for j in range(tables.shape[0]):
        if shared == BLOCKS:
            blocks, numbers = codes
            b, g = numbers.shape
            column = blocks[numbers, j].astype(jnp.int32).reshape(b, -1)
            part = jnp.take_along_axis(tables[j].T, column, axis=1).reshape(b, g, -1)
        elif shared:
            part = jnp.moveaxis(jnp.take(tables[j], codes[j], axis=0), -1, 0)
        else:
            part = jnp.take_along_axis(tables[j].T, codes[:, :, j], axis=1)
        total = part if total is None else total + part
    return total


@jax.jit
def pq_tables(codebooks: jax.Array, queries: jax.Array) -> jax.Array:
    """Squared distances of each query sub-vector to every centroid (Jégou et al. 2011 eq. 13's tables).

    Summed as Σ_t (q_t − c_t)² in coordinate order, one coordinate per trip of a loop, so a query's table has
    the same bits in any batch of queries and in any search that uses it (a dot product's rounding changes
    with the batch's shape, which would let an inverted-file search, the flat scan and a recomputation rank
    near-equal rows differently). The loop also makes the tables an array written once per query block:
    unrolled, XLA fused the sum into the scan's table reads and recomputed 3·D/m operations for every entry
    read (1,000 × 1M PQ(8×8) codes: 4.6× slower), in a rounding of its own.

    Args:
        codebooks: [m, K, D/m] PQ codebooks.
        queries: [b, D] query vectors.

    Returns:
        [m, K, b] float32 tables.
    """
    m, _, ds = codebooks.shape
    qs = queries.astype(_F32).reshape(queries.shape[0], m, ds).transpose(1, 2, 0)  # [m, D/m, b]
    centroids = codebooks.astype(_F32)

    def term(t):
        q_t = lax.dynamic_index_in_dim(qs, t, axis=1, keepdims=False)[:, None, :]  # [m, 1, b]
        diff = q_t - lax.dynamic_index_in_dim(centroids, t, axis=2, keepdims=True)  # [m, K, b]
        return diff * diff

    zeros = jnp.zeros((m, codebooks.shape[1], queries.shape[0]), _F32)
    return lax.fori_loop(0, ds, lambda t, total: total + term(t), zeros)
