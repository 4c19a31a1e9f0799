"""train.data: loaders (digits, npz, tfds mocked), samplers and jnp augmentations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from train import data


def test_digits_split_is_fixed_stratified_and_scaled():
    a, b = data.load("digits"), data.load("digits", test_fraction=0.25)
    assert a.train_x.shape == (1347, 8, 8, 1) and a.test_x.shape == (450, 8, 8, 1)
    np.testing.assert_array_equal(a.test_y, b.test_y)
    assert a.train_x.dtype == np.float32 and 0 <= a.train_x.min() and a.train_x.max() == 1.0
    # stratified: every class holds ~25 % of its members in the test split
    for c in range(10):
        frac = np.sum(a.test_y == c) / (np.sum(a.test_y == c) + np.sum(a.train_y == c))
        assert abs(frac - 0.25) < 0.02
    shard = data.load("digits", shard=(1, 2))  # multi-host: this process keeps rows 1::2 of the train split
    np.testing.assert_array_equal(shard.train_y, a.train_y[1::2])


def test_npz_loader_and_its_errors(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(40, 6, 5), dtype=np.uint8)
    labels = np.repeat(np.arange(4), 10)
    np.savez(tmp_path / "d.npz", images=images, labels=labels)
    ds = data.load(f"npz:{tmp_path / 'd.npz'}", test_fraction=0.25)
    assert ds.train_x.shape == (30, 6, 5, 1) and ds.test_x.shape == (10, 6, 5, 1)
    assert ds.num_classes == 4
    all_x = np.concatenate([ds.train_x, ds.test_x]).reshape(40, -1)
    want = np.sort((images.reshape(40, -1) / 255.0).astype(np.float32), axis=0)
    np.testing.assert_allclose(np.sort(all_x, axis=0), want)  # uint8 → [0, 1], nothing dropped
    with pytest.raises(ValueError, match="no such file"):
        data.load(f"npz:{tmp_path / 'missing.npz'}")
    np.savez(tmp_path / "bad.npz", pixels=images, labels=labels)
    with pytest.raises(ValueError, match="images"):
        data.load(f"npz:{tmp_path / 'bad.npz'}")
    with pytest.raises(ValueError, match="dataset"):
        data.load("imagenet")


def test_tfds_mnist_through_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=12):
        ds = data.load("mnist")
    assert ds.train_x.shape == (12, 28, 28, 1) and ds.test_x.shape == (12, 28, 28, 1)
    assert ds.train_x.dtype == np.float32 and 0 <= ds.train_x.min() and ds.train_x.max() <= 1
    assert ds.train_y.dtype == np.int32 and ds.train_y.max() < 10


def test_tfds_not_prepared_says_how_to_prepare(tmp_path):
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(ValueError, match="tfds build cifar10"):
        data.load("cifar10", data_dir=str(tmp_path))


def test_samplers_follow_their_recipes_and_are_functions_of_seed_and_step():
    labels = np.repeat(np.arange(10), 30)
    kw = dict(seed=3, step=7)
    idx = data.sample(labels, kind="random", batch=64, **kw)
    assert len(np.unique(idx)) == 64  # without replacement
    np.testing.assert_array_equal(idx, data.sample(labels, kind="random", batch=64, **kw))
    assert not np.array_equal(idx, data.sample(labels, kind="random", batch=64, seed=3, step=8))
    mpc = data.sample(labels, kind="m_per_class", batch=32, m_per_class=4, **kw)
    classes, counts = np.unique(labels[mpc], return_counts=True)
    assert len(classes) == 8 and np.all(counts == 4)  # MTriplet: 8 classes × 4
    sub = data.sample(labels, kind="class_subsampled", batch=50, class_fraction=0.4, **kw)
    assert len(np.unique(labels[sub])) <= 4 < 5  # SimO: fewer than half the classes


def _translations(x):
    """The nine ±1-pixel zero-filled translations of x [H, W, C]."""
    h, w, _ = x.shape
    p = np.pad(x, ((1, 1), (1, 1), (0, 0)))
    return [p[dy : dy + h, dx : dx + w] for dy in range(3) for dx in range(3)]


def test_shift_is_a_one_pixel_translation_times_a_contrast_factor():
    x = np.random.default_rng(0).uniform(0, 0.8, size=(5, 8, 8, 1)).astype(np.float32)
    out = np.asarray(data.views(jax.random.key(0), jnp.asarray(x), jnp.arange(5), n_views=2, kind="shift"))
    assert out.shape == (10, 8, 8, 1)
    for i, v in enumerate(out):
        fits = []
        for t in _translations(x[i % 5]):
            s = float(np.sum(v * t) / max(np.sum(t * t), 1e-12))  # least-squares contrast factor
            fits.append((np.max(np.abs(v - s * t)), s))
        err, s = min(fits)
        assert err < 1e-5 and 0.8 <= s <= 1.2


def test_views_do_not_depend_on_how_the_batch_is_split():
    x = jnp.asarray(np.random.default_rng(1).uniform(size=(6, 8, 8, 3)).astype(np.float32))
    key = jax.random.key(5)
    views = jax.jit(data.views, static_argnames=("n_views", "kind"))
    whole = views(key, x, jnp.arange(6), n_views=2, kind="simclr")
    # the same images at other places of the batch (as on other devices), with their global positions
    perm = np.array([3, 5, 0, 4, 1, 2])
    moved = views(key, x[perm], jnp.asarray(perm), n_views=2, kind="simclr")
    # view-major layout: [view 0 of the rows; view 1 of the rows]
    np.testing.assert_allclose(moved[:6], whole[:6][perm], atol=1e-6)
    np.testing.assert_allclose(moved[6:], whole[6:][perm], atol=1e-6)
    assert not np.allclose(whole[:6], whole[6:])  # the two views differ
    assert float(whole.min()) >= 0 and float(whole.max()) <= 1


def test_random_resized_crop_full_box_is_identity_and_grayscale_is_luma():
    x = jnp.asarray(np.random.default_rng(2).uniform(size=(8, 8, 3)).astype(np.float32))
    same = data.random_resized_crop(jax.random.key(0), x, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    np.testing.assert_allclose(same, x, atol=1e-5)
    crop = data.random_resized_crop(jax.random.key(1), x, scale=(0.25, 0.25), ratio=(1.0, 1.0))
    assert crop.shape == x.shape and not np.allclose(crop, x)
    g = np.asarray(data._gray(x))
    np.testing.assert_allclose(g[..., 0], np.asarray(x) @ np.array([0.299, 0.587, 0.114]), rtol=1e-5)
    np.testing.assert_allclose(g[..., 0], g[..., 2])
