"""geojax keeps XLA:CPU off the YNNPACK fusions that miscompute bfloat16 programs in jaxlib ≥ 0.11."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import jaxlib.version
import numpy as np
import pytest

from geojax import _xla_cpu

AFFECTED = _xla_cpu.parse_version(jaxlib.version.__version__) >= _xla_cpu.FIRST_AFFECTED


@pytest.mark.parametrize(
    ("flags", "version", "expected"),
    [
        ("", "0.10.2", ""),
        ("--xla_force_host_platform_device_count=4", "0.10.9", "--xla_force_host_platform_device_count=4"),
        ("", "0.11.2", _xla_cpu.FLAG),
        ("", "0.12.0.1", _xla_cpu.FLAG),
        ("--a=1", "1.0.0.dev20270101", f"--a=1 {_xla_cpu.FLAG}"),
        # the user's own setting wins, whatever its value
        (
            f"--{_xla_cpu.FLAG_NAME}=LIBRARY_FUSION_TYPE_REDUCE",
            "0.12.0",
            f"--{_xla_cpu.FLAG_NAME}=LIBRARY_FUSION_TYPE_REDUCE",
        ),
    ],
)
def test_the_flag_is_added_for_affected_jaxlib_unless_the_user_set_it(flags, version, expected):
    assert _xla_cpu.flags_without_ynn_fusions(flags, version) == expected


def test_a_version_without_major_minor_is_refused():
    with pytest.raises(ValueError, match="version must start with MAJOR.MINOR"):
        _xla_cpu.parse_version("nightly")


def test_this_process_got_the_flag_exactly_when_its_jaxlib_is_affected():
    # conftest imports geojax before JAX starts its backends
    assert (_xla_cpu.FLAG_NAME in os.environ.get("XLA_FLAGS", "")) == AFFECTED


def test_a_late_import_warns_instead_of_setting_a_flag_that_can_no_longer_act():
    code = "import jax.numpy as jnp; jnp.ones(1).block_until_ready(); import geojax"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert ("could not set XLA_FLAGS" in out.stderr) == AFFECTED


def test_bfloat16_fusion_of_two_relus_and_a_sum_is_computed_right_under_jit():
    """The smallest program jaxlib 0.11–0.12's YNNPACK fusions got wrong (every output entry, most as huge
    numbers or NaN); compared with a float32 NumPy sum of the same bfloat16 values."""
    f = jax.jit(lambda y: jax.nn.relu(jax.nn.relu(y)).astype(jnp.float32).sum(0))
    for rows in (128, 512, 4096):
        y = jnp.asarray(np.random.default_rng(rows).standard_normal((rows, 32)), jnp.bfloat16)
        expected = np.maximum(np.asarray(y, np.float32), 0).sum(0)
        np.testing.assert_allclose(np.asarray(f(y)), expected, rtol=1e-2, atol=1e-2)
