"""The environment switches: the one place below the CLI that reads the environment (the CLI
reads its own, such as `BERTKIT_DATA` and a launcher's `WORLD_SIZE`, and passes values down).

They exist so that one machine can take the branches another machine would take, above all in
the test suite, which CI runs on whatever CPU class it gets:

- `BERTKIT_AUTO_PRECISION=fp32|bf16`: what `--precision auto` resolves to on the CPU, whatever
  the CPU's flags say (`auto` picks bf16 on CPUs with native bf16, fp32 elsewhere). Tests that
  compare numbers pin fp32; a test of `auto` end to end takes the `auto_precision` fixture
  (tests/conftest.py), which runs it under both settings in every run of the suite.
- `BERTKIT_DEVICE_GENERIC=1`: the model takes the branches it takes on a GPU (SDPA attention
  with dropout inside it, one attention group, `F.dropout`) on the CPU too, so that every
  parity, gradient and dropout-statistics test also covers them.

Unset (the default) they change nothing. Explicit options (`--precision bf16`) always win.
"""

from __future__ import annotations

import os

from bertkit.errors import BertkitError

AUTO_PRECISION = "BERTKIT_AUTO_PRECISION"
DEVICE_GENERIC = "BERTKIT_DEVICE_GENERIC"


def forced_auto_precision() -> str | None:
    """"fp32"/"bf16" when `BERTKIT_AUTO_PRECISION` forces what `auto` picks on the CPU, else None."""
    value = os.environ.get(AUTO_PRECISION, "").strip().lower()
    if not value:
        return None
    if value not in ("fp32", "bf16"):
        raise BertkitError(f"{AUTO_PRECISION}={value!r}: expected fp32 or bf16 (or unset)")
    return value


def device_generic() -> bool:
    """Whether `BERTKIT_DEVICE_GENERIC` asks the CPU to take the GPU's branches."""
    value = os.environ.get(DEVICE_GENERIC, "").strip().lower()
    return value not in ("", "0", "false", "no")
