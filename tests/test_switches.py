"""The environment switches (`bertkit.switches`): what each value means, and bad values refused."""

from __future__ import annotations

import pytest

from bertkit.errors import BertkitError
from bertkit.switches import AUTO_PRECISION, DEVICE_GENERIC, device_generic, forced_auto_precision


@pytest.mark.parametrize("value,expected", [(None, None), ("", None), ("  ", None),
                                            ("fp32", "fp32"), (" BF16\n", "bf16")])
def test_auto_precision_switch_values(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(AUTO_PRECISION, raising=False)
    else:
        monkeypatch.setenv(AUTO_PRECISION, value)
    assert forced_auto_precision() == expected


@pytest.mark.parametrize("value", ["fp16", "int8", "1", "auto"])
def test_auto_precision_switch_refuses_what_auto_could_never_pick_on_a_cpu(monkeypatch, value):
    monkeypatch.setenv(AUTO_PRECISION, value)
    with pytest.raises(BertkitError, match=f"{AUTO_PRECISION}='{value}': expected fp32 or bf16"):
        forced_auto_precision()


@pytest.mark.parametrize("value,expected", [(None, False), ("", False), ("0", False),
                                            ("false", False), ("No", False), ("1", True),
                                            ("yes", True), ("TRUE", True)])
def test_device_generic_switch_values(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(DEVICE_GENERIC, raising=False)
    else:
        monkeypatch.setenv(DEVICE_GENERIC, value)
    assert device_generic() is expected
