"""lscpu flags of the kinds of CPU that matter (ISA part only)."""

XEON_SPR = ["avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_bf16", "amx_tile",
            "amx_int8"]
XEON_ICX = ["avx2", "fma", "avx512f", "avx512bw", "avx512_vnni"]
XEON_SKX = ["avx2", "fma", "avx512f", "avx512bw"]  # AVX-512 without VNNI
EPYC_ZEN4 = ["avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"]
CORE_ADL = ["avx2", "fma", "avx_vnni"]  # client cores: VEX-encoded VNNI only
EPYC_ZEN2 = ["avx2", "fma"]  # the slow case: AVX2 only
