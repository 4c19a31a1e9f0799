"""Which YNNPACK fusions XLA's CPU backend may use: none for convolutions, and none for element-wise or
reduction regions from jaxlib 0.11 on, where they miscompute bfloat16 programs.

XLA:CPU hands some HLO regions to YNNPACK, chosen by ``--xla_cpu_experimental_ynn_fusion_type``:

- Convolutions (``individual_convolution``, on by default since jaxlib 0.10): on a 2-core AMD EPYC (AVX2)
  XLA's own (Eigen) convolutions run the 3×3 convolutions of :class:`geojax.models.SmallCNN` 2–3× faster
  (forward [256, 7, 7, 64] → 128 channels: 13 ms against 42 ms), and its whole training step 1.4×.
- Element-wise and reduction regions (``eltwise``, ``reduce``; jaxlib ≥ 0.11): with bfloat16 operands these
  return wrong values — huge finite numbers, ±inf or NaN, differing from one compilation to the next — where
  the same program run op by op is right. ``relu(relu(x)).sum(0)`` on a bfloat16 ``x`` of shape [512, 32]
  under ``jax.jit`` is the smallest case we found; a bfloat16 ResNet-18 evaluated under ``jax.jit`` came out
  all-NaN (jax 0.12.0.1).

YNNPACK's matrix products stay on (they serve the dense layers and the product-quantisation search).
Importing :mod:`geojax` adds :func:`ynn_fusion_flag` to ``XLA_FLAGS`` unless the flags already set
``xla_cpu_experimental_ynn_fusion_type`` (to any value: yours wins). XLA reads ``XLA_FLAGS`` when JAX starts
its backends, so this takes effect only if geojax is imported before the first JAX computation; otherwise,
on a jaxlib that miscompiles, a warning says what to set.
"""

from __future__ import annotations

import os
import re
import warnings

FLAG_NAME = "xla_cpu_experimental_ynn_fusion_type"
SLOWER = ("individual_convolution",)
MISCOMPILED = ("reduce", "eltwise")
FIRST_MISCOMPILING = (0, 11)


def parse_version(text: str) -> tuple[int, int]:
    """(major, minor) of a version string such as ``"0.12.0.1"`` or ``"0.11.2.dev20260101"``.

    Args:
        text: the version string.

    Returns:
        (major, minor) ints.

    Raises:
        ValueError: ``text`` does not start with MAJOR.MINOR.

    Example:
        >>> from geojax import _xla_cpu
        >>> _xla_cpu.parse_version("0.11.2.dev20260101")
        (0, 11)
    """
    match = re.match(r"(\d+)\.(\d+)", text)
    if match is None:
        raise ValueError(f"version must start with MAJOR.MINOR, got {text!r}")
    return int(match.group(1)), int(match.group(2))


def miscompiles(jaxlib_version: str) -> bool:
    """Whether jaxlib ``jaxlib_version`` puts bfloat16 element-wise / reduction regions through YNNPACK.

    True from jaxlib 0.11 on (module docstring).

    Args:
        jaxlib_version: the jaxlib version string.

    Returns:
        True when that jaxlib miscompiles.

    Raises:
        ValueError: the version does not start with MAJOR.MINOR.

    Example:
        >>> from geojax import _xla_cpu
        >>> _xla_cpu.miscompiles("0.10.2"), _xla_cpu.miscompiles("0.12.0.1")
        (False, True)
    """
    return parse_version(jaxlib_version) >= FIRST_MISCOMPILING


def ynn_fusion_flag(jaxlib_version: str) -> str:
    """The XLA flag that removes the YNNPACK fusion types above from jaxlib ``jaxlib_version``'s defaults.

    Convolutions always; element-wise and reduction regions where the jaxlib :func:`miscompiles`.

    Args:
        jaxlib_version: the jaxlib version string.

    Returns:
        The flag, e.g. ``--xla_cpu_experimental_ynn_fusion_type=-individual_convolution``.

    Example:
        >>> from geojax import _xla_cpu
        >>> _xla_cpu.ynn_fusion_flag("0.10.2")
        '--xla_cpu_experimental_ynn_fusion_type=-individual_convolution'
        >>> _xla_cpu.ynn_fusion_flag("0.11.0")
        '--xla_cpu_experimental_ynn_fusion_type=-individual_convolution,-reduce,-eltwise'
    """
    removed = SLOWER + (MISCOMPILED if miscompiles(jaxlib_version) else ())
    return f"--{FLAG_NAME}=" + ",".join(f"-{kind}" for kind in removed)


def with_ynn_fusion_flag(xla_flags: str, jaxlib_version: str) -> str:
    """``xla_flags`` with :func:`ynn_fusion_flag` appended, unless it already sets the flag.

    Args:
        xla_flags: the value of ``XLA_FLAGS``.
        jaxlib_version: the jaxlib version string.

    Returns:
        The flags to use (unchanged when they set ``xla_cpu_experimental_ynn_fusion_type`` to any value: yours
        wins).

    Example:
        >>> from geojax import _xla_cpu
        >>> _xla_cpu.with_ynn_fusion_flag("--xla_cpu_experimental_ynn_fusion_type=", "0.11.0")
        '--xla_cpu_experimental_ynn_fusion_type='
        >>> _xla_cpu.with_ynn_fusion_flag("", "0.10.2")
        '--xla_cpu_experimental_ynn_fusion_type=-individual_convolution'
    """
    if FLAG_NAME in xla_flags:
        return xla_flags
    return f"{xla_flags} {ynn_fusion_flag(jaxlib_version)}".strip()


def set_ynn_fusion_flag() -> None:
    """Apply :func:`with_ynn_fusion_flag` to ``os.environ["XLA_FLAGS"]`` before JAX's backends start.

    When they already have, leave it (it could no longer act) and warn (``RuntimeWarning``) if the jaxlib
    :func:`miscompiles`. Importing :mod:`geojax` calls it.
    """
    import jaxlib.version
    from jax._src import xla_bridge

    version = jaxlib.version.__version__
    flags = os.environ.get("XLA_FLAGS", "")
    wanted = with_ynn_fusion_flag(flags, version)
    if wanted == flags:
        return
    if not xla_bridge.backends_are_initialized():
        os.environ["XLA_FLAGS"] = wanted
    elif miscompiles(version):
        warnings.warn(
            f"JAX's backends started before geojax was imported, so geojax could not set "
            f"XLA_FLAGS={ynn_fusion_flag(version)}: jaxlib {version}'s CPU backend can miscompute bfloat16 "
            f"programs (wrong values, inf or NaN). Import geojax before the first JAX computation, or set "
            f"that flag before starting Python.",
            RuntimeWarning,
            stacklevel=3,
        )
