"""The memo of inductor's vector-ISA probe: real probes, real compiler, a counter around them."""

from __future__ import annotations

import json
import platform

import pytest

from autotune.harness import isa_probe

cpu_vec_isa = pytest.importorskip("torch._inductor.cpu_vec_isa")

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                                reason="the probe memo is exercised on x86 ISAs")


@pytest.fixture
def counted_probe():
    """Count the calls that reach torch's own probe; put it back afterwards."""
    original = cpu_vec_isa.VecISA.check_build
    calls = []

    def counting(isa, code):
        calls.append(str(isa))
        return original(isa, code)

    cpu_vec_isa.VecISA.check_build = counting
    try:
        yield calls
    finally:
        cpu_vec_isa.VecISA.check_build = original


def _an_isa():
    flags = cpu_vec_isa.x86_isa_checker()
    for isa in cpu_vec_isa.supported_vec_isa_list:
        if all(f in flags for f in str(isa).split()):
            return isa
    pytest.skip("this CPU claims no vector ISA inductor knows")


def test_a_successful_probe_is_remembered_and_not_repeated(tmp_path, counted_probe):
    assert isa_probe.install(str(tmp_path))
    assert not isa_probe.install(str(tmp_path)), "a second install must not wrap the probe twice"
    isa = _an_isa()
    code = cpu_vec_isa.VecISA._avx_code

    assert isa.check_build(code) is True
    assert len(counted_probe) == 1
    memo = json.loads((tmp_path / isa_probe.MEMO_NAME).read_text())
    assert list(memo.values()) == [True]

    assert isa.check_build(code) is True
    assert len(counted_probe) == 1, "the remembered probe ran again"


def test_a_failed_probe_is_not_remembered(tmp_path, counted_probe):
    isa_probe.install(str(tmp_path))
    isa = _an_isa()
    broken = "this is not C++;\n"
    assert isa.check_build(broken) is False
    assert isa.check_build(broken) is False
    assert len(counted_probe) == 2
    assert not (tmp_path / isa_probe.MEMO_NAME).exists()


def test_no_cache_directory_no_memo():
    assert isa_probe.install(None) is False
    assert isa_probe.install("") is False
