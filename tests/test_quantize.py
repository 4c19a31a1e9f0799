"""geojax.quantize against numpy references: torus uint8 codes, grid, sign bits, product quantisation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geojax import quantize


def test_torus_uint8_pinned_and_round_trip():
    t = np.array([0.0, 0.5, 0.25, 0.999, -0.25, 1.0, 250 / 256, 5 / 256], np.float32)
    codes = np.asarray(quantize.torus_uint8(t))
    np.testing.assert_array_equal(codes, [0, 128, 64, 0, 192, 0, 250, 5])
    assert codes.dtype == np.uint8
    every = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(quantize.torus_uint8(quantize.torus_from_uint8(every)), every)
    # Any angle comes back within half a code step, measured on the circle.
    u = np.random.default_rng(0).uniform(-2, 2, 1000).astype(np.float32)
    back = np.asarray(quantize.torus_from_uint8(quantize.torus_uint8(u)))
    gap = np.abs((back - u + 0.5) % 1.0 - 0.5)
    assert gap.max() <= 0.5 / 256 + 1e-6


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_torus_codes_pack_round_trip(bits):
    levels, per = 1 << bits, 8 // bits
    rng = np.random.default_rng(bits)
    t = rng.uniform(-2, 2, (50, 16)).astype(np.float32)
    packed = np.asarray(quantize.torus_codes(t, bits))
    assert packed.dtype == np.uint8 and packed.shape == (50, 16 // per)
    codes = np.round(t.astype(np.float64) * levels).astype(np.int64) % levels
    # numpy packing reference: coordinate per·j + i in bits i·b … of byte j.
    ref = (codes.reshape(50, 16 // per, per) << (np.arange(per) * bits)).sum(-1).astype(np.uint8)
    np.testing.assert_array_equal(packed, ref)
    unpacked = np.asarray(quantize.torus_unpack(packed, bits))
    np.testing.assert_array_equal(unpacked, codes)
    # Every code survives code → angle → code, and every byte survives unpack → angle → pack.
    every = np.arange(256, dtype=np.uint8)[:, None]
    angles = np.asarray(quantize.torus_unpack(every, bits), np.float32) / levels
    np.testing.assert_array_equal(quantize.torus_codes(angles, bits), every)
    if bits == 8:
        np.testing.assert_array_equal(packed, quantize.torus_uint8(t))
    if bits == 1:
        np.testing.assert_array_equal(packed, quantize.pack_bits(codes))


def test_torus_codes_pinned_and_checked():
    # 4-bit: 0.5 → 8, 0.999 → 16 mod 16 = 0, −1/16 → 15; 2-bit: 0.25 → 1, 0.75 → 3.
    t = np.array([[0.5, 0.999, -1 / 16, 0.0]], np.float32)
    np.testing.assert_array_equal(quantize.torus_codes(t, 4), [[8 | 0 << 4, 15 | 0 << 4]])
    np.testing.assert_array_equal(
        quantize.torus_codes(np.array([[0.25, 0.75, 0, 0.5]]), 2), [[1 | 3 << 2 | 2 << 6]]
    )
    with pytest.raises(ValueError, match="bits"):
        quantize.torus_codes(t, 3)
    with pytest.raises(ValueError, match="multiple of 8"):
        quantize.torus_codes(np.zeros((1, 3), np.float32), 4)
    with pytest.raises(ValueError, match="t"):
        quantize.torus_codes(np.array([[np.nan, 0.0]], np.float32), 4)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_torus_fake_quantize_forward_and_straight_through_gradient(bits):
    levels = 1 << bits
    t = np.random.default_rng(3).uniform(-1.5, 1.5, (6, 8)).astype(np.float32)
    out = np.asarray(quantize.torus_fake_quantize(t, bits))
    # Forward: exactly the grid angle of the code, up to whole turns.
    codes = np.asarray(quantize.torus_unpack(quantize.torus_codes(t, bits), bits))
    np.testing.assert_array_equal(np.round(out * levels).astype(np.int64) % levels, codes)
    np.testing.assert_allclose(out * levels, np.round(out * levels), atol=1e-5)
    # Backward: the identity (straight-through), not the zero gradient of round.
    w = np.random.default_rng(4).normal(size=t.shape).astype(np.float32)
    g = jax.grad(lambda x: jnp.sum(jnp.sin(quantize.torus_fake_quantize(x, bits)) * w))(t)
    np.testing.assert_allclose(g, np.cos(out) * w, rtol=1e-6)
    # Noise: within half a grid step of t, not on the grid, gradient 1, deterministic in t, and jit-able.
    noisy = np.asarray(jax.jit(lambda x: quantize.torus_fake_quantize(x, bits, noise=True))(t))
    assert np.abs(noisy - t).max() <= 0.5 / levels + 1e-6
    assert np.abs(noisy * levels - np.round(noisy * levels)).max() > 1e-3
    u = (noisy - t) * levels
    assert -0.5 <= u.min() < -0.2 and 0.2 < u.max() < 0.5  # spread over the step, both signs
    np.testing.assert_array_equal(noisy, quantize.torus_fake_quantize(t, bits, noise=True))
    g = jax.grad(lambda x: jnp.sum(quantize.torus_fake_quantize(x, bits, noise=True) * w))(t)
    np.testing.assert_array_equal(g, w)


def test_grid_fit_encode_decode():
    x = np.random.default_rng(1).normal(size=(200, 5)).astype(np.float32)
    g = quantize.grid_fit(x, nbits=8)
    codes = np.asarray(quantize.grid_encode(g, x))
    lo, hi = x.min(0), x.max(0)
    ref = np.clip(np.floor((x - lo) / (hi - lo) * 256), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(codes, ref)
    assert codes.min() == 0 and codes.max() == 255
    dec = np.asarray(quantize.grid_decode(g, codes))
    assert np.abs(dec - x).max() <= (hi - lo).max() / 256 * 0.5 + 1e-5
    g12 = quantize.grid_fit(x, nbits=12)
    assert quantize.grid_encode(g12, x).dtype == jnp.uint16


def test_pack_bits_little_endian_matches_numpy():
    bits = np.random.default_rng(2).integers(0, 2, (7, 48)).astype(np.uint8)
    packed = np.asarray(quantize.pack_bits(bits))
    np.testing.assert_array_equal(packed, np.packbits(bits, axis=-1, bitorder="little"))
    np.testing.assert_array_equal(quantize.unpack_bits(packed), bits)
    np.testing.assert_array_equal(quantize.pack_bits(np.eye(8, dtype=bool))[:, 0], 1 << np.arange(8))


def test_one_bit_sign_zero_is_one():
    x = np.array([[0.0, -1.0, 2.0, -0.0, -3.0, 1e-9, -1e-9, 5.0]], np.float32)
    # bits 1,0,1,1,0,1,0,1 little-endian (bit j = coordinate j; -0.0 counts as ≥ 0)
    np.testing.assert_array_equal(quantize.one_bit(x), [[1 + 4 + 8 + 32 + 128]])


def _nearest_numpy(x, codebooks):
    m, _, ds = codebooks.shape
    xs = x.reshape(len(x), m, ds).astype(np.float64)
    d = ((xs[:, :, None, :] - codebooks[None].astype(np.float64)) ** 2).sum(-1)  # [N, m, K]
    return d.argmin(-1), d.min(-1)


@pytest.mark.parametrize("init", ["kmeans++", "random"])
def test_pq_codes_are_nearest_centroids_and_objective_decreases(init):
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(6, 8)) * 4
    x = (centres[rng.integers(0, 6, 300)] + rng.normal(size=(300, 8))).astype(np.float32)
    pq = quantize.pq_fit(x, m=4, nbits=3, key=jax.random.key(0), iters=12, init=init)
    assert pq.codebooks.shape == (4, 8, 2) and pq.objective.shape == (4, 12)
    codes = np.asarray(quantize.pq_encode(pq, x))
    assert codes.dtype == np.uint8
    ref_idx, ref_d = _nearest_numpy(x, np.asarray(pq.codebooks))
    np.testing.assert_array_equal(codes, ref_idx)
    obj = np.asarray(pq.objective)
    assert np.all(np.diff(obj, axis=1) <= 1e-5 * obj[:, :-1])
    # The reported objective is the mean squared distance to the assigned centroid (last assignment <=).
    assert np.all(ref_d.mean(0) <= obj[:, -1] + 1e-4)
    dec = np.asarray(quantize.pq_decode(pq, codes))
    np.testing.assert_allclose(dec, np.asarray(pq.codebooks)[np.arange(4), ref_idx].reshape(300, 8), rtol=0)


def test_pq_wide_codes_uint16_and_chunked(monkeypatch):
    # 300 rows a block: 1100 rows run in 4 blocks, the last one overlapping the third.
    monkeypatch.setattr(quantize, "_BLOCK_ELEMENTS", 300 * 2 * 1024)
    x = np.random.default_rng(4).normal(size=(1100, 4)).astype(np.float32)
    pq = quantize.pq_fit(x, m=2, nbits=10, key=jax.random.key(1), iters=2, init="random")
    codes = np.asarray(quantize.pq_encode(pq, x))
    assert codes.dtype == np.uint16 and codes.max() < 1024
    np.testing.assert_array_equal(codes, _nearest_numpy(x, np.asarray(pq.codebooks))[0])
    assert quantize.pq_decode(pq, codes).shape == (1100, 4)


def test_pq_empty_clusters_reseeded():
    # 4 distinct points, 4 clusters, random init may repeat points; every centroid ends on a data point
    x = np.repeat(np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]], np.float32), 5, axis=0)
    pq = quantize.pq_fit(x, m=1, nbits=2, key=jax.random.key(3), iters=5, init="random")
    cb = np.asarray(pq.codebooks[0])
    assert {tuple(r) for r in cb} == {tuple(r) for r in x}
    assert float(pq.objective[0, -1]) == 0.0


def test_bad_inputs():
    x = np.zeros((10, 8), np.float32)
    with pytest.raises(ValueError, match="nbits"):
        quantize.pq_fit(x, m=2, nbits=4, key=jax.random.key(0))  # 16 centroids > 10 rows
    with pytest.raises(ValueError, match="m must divide"):
        quantize.pq_fit(x, m=3, nbits=1, key=jax.random.key(0))
    with pytest.raises(ValueError, match="init"):
        quantize.pq_fit(x, m=2, nbits=1, key=jax.random.key(0), init="kmeans")
    with pytest.raises(ValueError, match="x.shape"):
        quantize.one_bit(np.zeros((2, 12), np.float32))
    with pytest.raises(ValueError, match="bits.shape"):
        quantize.pack_bits(np.zeros((2, 12), np.uint8))
    with pytest.raises(ValueError, match="packed"):
        quantize.unpack_bits(np.zeros((2, 3), np.int32))
    with pytest.raises(ValueError, match="t"):
        quantize.torus_uint8(np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="codes"):
        quantize.torus_from_uint8(np.zeros(3, np.int32))
    pq = quantize.pq_fit(x, m=2, nbits=1, key=jax.random.key(0), iters=1)
    with pytest.raises(ValueError, match="codes"):
        quantize.pq_decode(pq, np.zeros((3, 2), np.int32))
    with pytest.raises(ValueError, match="x"):
        quantize.pq_encode(pq, np.zeros((3, 6), np.float32))
