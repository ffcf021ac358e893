"""CPU summary from synthetic /proc/cpuinfo texts, and native bf16."""

import os

import pytest

from workflow.scripts.probes import hardware

FLAGS = ("fpu vme sse4_2 ht avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 avx_vnni "
         "amx_bf16 amx_tile amx_int8 avx512_fp16 aes")


def block(processor, socket, core, flags=FLAGS, model="Intel(R) Xeon(R) Platinum 8480+"):
    return (f"processor\t: {processor}\nvendor_id\t: GenuineIntel\nmodel name\t: {model}\n"
            f"physical id\t: {socket}\nsiblings\t: 4\ncore id\t\t: {core}\ncpu cores\t: 2\n"
            f"flags\t\t: {flags}\n")


# 2 sockets x 2 cores x 2 hyperthreads; Linux numbers siblings after all cores.
TWO_SOCKETS = "\n".join(
    block(p, s, c) for p, (s, c) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)] * 2)) + "\n"


def test_two_sockets_with_hyperthreads():
    summary = hardware.cpu_summary(TWO_SOCKETS)
    assert summary["cpu_model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert summary["sockets"] == 2
    assert summary["physical_cores"] == 4
    assert summary["logical_cpus"] == 8


def test_flags_filtered_to_deep_learning_isa():
    flags = hardware.cpu_summary(TWO_SOCKETS)["isa_flags"]
    assert flags == sorted(["avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni",
                            "amx_bf16", "amx_tile", "amx_int8", "avx512_fp16"])
    for dropped in ("fpu", "sse4_2", "ht", "avx", "aes"):
        assert dropped not in flags


def test_core_ids_repeat_across_sockets():
    # core id 0 exists on both sockets: they are different cores
    text = block(0, 0, 0) + "\n" + block(1, 1, 0) + "\n"
    summary = hardware.cpu_summary(text)
    assert (summary["sockets"], summary["physical_cores"], summary["logical_cpus"]) == (2, 2, 2)


def test_vm_without_topology_fields():
    text = ("processor\t: 0\nmodel name\t: QEMU\nflags\t\t: avx2\n\n"
            "processor\t: 1\nmodel name\t: QEMU\nflags\t\t: avx2\n")
    summary = hardware.cpu_summary(text)
    assert (summary["sockets"], summary["physical_cores"], summary["logical_cpus"]) == (1, 2, 2)
    assert summary["isa_flags"] == ["avx2"]


def test_real_cpuinfo_is_consistent():
    summary = hardware.cpu_summary()
    assert 1 <= summary["physical_cores"] <= summary["logical_cpus"]
    assert summary["sockets"] >= 1


@pytest.mark.parametrize("flags, native", [
    (["avx512_bf16"], True),
    (["amx_bf16", "amx_tile"], True),
    ({"avx512f", "avx512_vnni", "avx2"}, False),
    (["avx512_fp16"], False),
    ([], False),
])
def test_has_native_bf16(flags, native):
    assert hardware.has_native_bf16(flags) is native


def test_native_bf16_from_cpuinfo():
    assert hardware.has_native_bf16(hardware.cpu_summary(TWO_SOCKETS)["isa_flags"])
    plain = block(0, 0, 0, flags="fpu avx avx2 fma avx512f") + "\n"
    assert not hardware.has_native_bf16(hardware.cpu_summary(plain)["isa_flags"])


def test_usable_cores_counts_physical_cores_within_affinity():
    allowed = len(os.sched_getaffinity(0))
    # without hyperthreads every allowed CPU is a core
    assert hardware.usable_cores({"physical_cores": allowed, "logical_cpus": allowed}) == allowed
    # never more than the machine's physical cores, never fewer than one
    assert hardware.usable_cores({"physical_cores": 1, "logical_cpus": 1}) == 1
    assert hardware.usable_cores({"physical_cores": 512, "logical_cpus": 1024}) == max(1, allowed // 2)
