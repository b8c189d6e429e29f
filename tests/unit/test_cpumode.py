"""Which CPU mode a process reports (supportbench._cpumode.effective): the mode's settings as torch
and the environment show them, and the CPU's vendor, since MKL's AVX2 branch runs on Intel CPUs
only. Hand-written expectations; no torch is loaded or built."""

from __future__ import annotations

import pytest

from supportbench import _cpumode

AVX2_LIBS = {"MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
PORTABLE_LIBS = {"MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"}


@pytest.mark.parametrize(
    ("capability", "libs", "vendor", "want"),
    [
        ("AVX2", AVX2_LIBS, "GenuineIntel", "avx2"),
        # MKL ignores MKL_CBWR=AVX2 on another vendor's CPU: the bits are that CPU kind's own
        ("AVX2", AVX2_LIBS, "AuthenticAMD", "native-avx2"),
        ("AVX2", AVX2_LIBS, "HygonGenuine", "native-avx2"),
        ("AVX2", AVX2_LIBS, "", "native-avx2"),  # no /proc/cpuinfo: nothing assumed
        # COMPATIBLE is MKL's branch for every vendor
        ("DEFAULT", PORTABLE_LIBS, "GenuineIntel", "portable"),
        ("DEFAULT", PORTABLE_LIBS, "AuthenticAMD", "portable"),
        # a library that did not take its setting, or ATen on other kernels
        ("AVX2", {"MKL_CBWR": "AUTO", "ONEDNN_MAX_CPU_ISA": "AVX2"}, "GenuineIntel", "native-avx2"),
        ("AVX512", AVX2_LIBS, "GenuineIntel", "native-avx512"),
        ("DEFAULT", AVX2_LIBS, "AuthenticAMD", "native-default"),
    ],
)
def test_the_reported_mode_follows_the_settings_and_the_vendor(
    monkeypatch, capability, libs, vendor, want
):
    for k, v in libs.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(_cpumode, "_late", False)
    assert _cpumode.effective(capability, vendor) == want


@pytest.fixture
def cpuinfo(monkeypatch, tmp_path):
    """Write a stand-in /proc/cpuinfo with the given text; ``open`` of /proc/cpuinfo reads it."""
    info = tmp_path / "cpuinfo"
    real_open = open
    monkeypatch.setattr(
        "builtins.open",
        lambda f, *a, **k: real_open(info if f == "/proc/cpuinfo" else f, *a, **k),
    )

    def write(text: str):
        info.write_text(text)
        return info

    return write


def test_the_vendor_is_read_from_the_kernel(monkeypatch, cpuinfo):
    info = cpuinfo("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n")
    assert _cpumode.cpu_vendor() == "AuthenticAMD"
    for k, v in AVX2_LIBS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(_cpumode, "_late", False)
    assert _cpumode.effective("AVX2") == "native-avx2"  # the vendor read, not assumed
    info.unlink()
    assert _cpumode.cpu_vendor() == ""


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("vendor_id\t: GenuineIntel\n", "GenuineIntel"),
        ("vendor_id\n", ""),  # no colon: no vendor, no crash
        ("vendor_id GenuineIntel\n", ""),
        ("vendor_id_x\t: GenuineIntel\nvendor_id\t: AuthenticAMD\n", "AuthenticAMD"),
        ("processor\t: 0\nBogoMIPS\t: 50.00\n", ""),  # an arm64 kernel's file names no vendor
    ],
)
def test_odd_cpuinfo_gives_no_vendor_rather_than_an_error(cpuinfo, text, want):
    cpuinfo(text)
    assert _cpumode.cpu_vendor() == want
