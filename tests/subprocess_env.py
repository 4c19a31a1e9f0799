"""The environment of the processes tests start: this suite's XLA flags (conftest's cheaper CPU compile
passes) without its 4 fake devices, so that a child compiles as the suite does but sets up its own devices."""

import os


def child_env(**extra: str) -> dict[str, str]:
    """os.environ with XLA_FLAGS less any ``--xla_force_host_platform_device_count``, then ``extra``."""
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f)
    return {**os.environ, "XLA_FLAGS": flags, **extra}
