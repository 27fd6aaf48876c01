"""KDIAG_LAB_HEAP: the lab nodes' -Xmx for big labs, refused with one clear error when malformed."""

from __future__ import annotations

import pytest

from kdiag.tools.lab.jars import LabError
from kdiag.tools.lab.nodes import HEAP, heap


def test_default_and_override(monkeypatch):
    monkeypatch.delenv("KDIAG_LAB_HEAP", raising=False)
    assert heap() == HEAP
    monkeypatch.setenv("KDIAG_LAB_HEAP", "1536m")
    assert heap() == "-Xmx1536m"


@pytest.mark.parametrize("bad", ["abc", "0m", "1536", "-Xmx2g", "2g -XX:+Foo", "9" * 100 + "m x"])
def test_malformed_is_refused_naming_the_variable(monkeypatch, bad):
    monkeypatch.setenv("KDIAG_LAB_HEAP", bad)
    with pytest.raises(LabError, match=r"KDIAG_LAB_HEAP=.*expected a size like 1536m"):
        heap()
