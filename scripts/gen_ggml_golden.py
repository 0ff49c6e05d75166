#!/usr/bin/env python3
# Golden data for what the `gguf` Python package does not do (Q1_0 and Q2_0 altogether,
# NVFP4's quantization), written by ggml itself: its `to_float` and `from_float_ref` type traits, called
# through ctypes from a libggml-base built from llama.cpp (the release vendored in the
# llama-cpp-python 0.3.36 source package). Neither the library nor its code is committed.
#
#     python3 scripts/gen_ggml_golden.py /path/to/libggml-base.so
#
# It writes crates/device/tests/golden/{dequant,quant}/<type>.bin in the format of
# scripts/gen_dequant_golden.py (whose header describes it); the seed is fixed.
#
# It also writes what ggml's quantizers make of random rows, without and with an
# importance per column (`ggml_quantize_chunk`, as llama-quantize calls it), for the types
# whose quantizers search (the k-quants, the IQ grid types), under
# crates/device/tests/golden/quantizer/:
#   rows.bin:    b"TDQR", u32 version 1, u32 n_rows, u32 n_per_row, then the rows
#                (n_rows * n_per_row f32) and the importances (n_per_row f32);
#   <type>.bin:  b"TDQQ", u32 version 1, u32 ggml type id, u32 bytes per row, then the
#                rows quantized without importances (n_rows rows; absent, bytes per row 0
#                for the plain part, where ggml refuses without them: flag below) and with
#                them (n_rows rows).

import ctypes
import struct
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates" / "device" / "tests" / "golden"

# ggml type id: (name, block size, bytes per block, byte offsets of the f16 scales,
# whether to write its dequantization golden too)
TYPES = {
    40: ("nvfp4", 64, 36, [], False),
    41: ("q1_0", 128, 18, [0], True),
    42: ("q2_0", 64, 18, [0], True),
}


class Traits(ctypes.Structure):
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


ROW_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


def write(kind_dir: str, type_id: int, name: str, kind: int, inp: bytes, out: bytes) -> None:
    path = OUT / kind_dir / f"{name}.bin"
    header = b"TDQG" + struct.pack("<5I", 1, type_id, kind, len(inp), len(out))
    path.write_bytes(header + inp + out)


# ggml type id: (name, bytes per row of 256, whether ggml quantizes it without importances)
SEARCH_TYPES = {
    10: ("q2_k", 84, True),
    11: ("q3_k", 110, True),
    12: ("q4_k", 144, True),
    13: ("q5_k", 176, True),
    14: ("q6_k", 210, True),
    16: ("iq2_xxs", 66, False),
    17: ("iq2_xs", 74, False),
    18: ("iq3_xxs", 98, True),
    19: ("iq1_s", 50, False),
    21: ("iq3_s", 110, True),
    22: ("iq2_s", 82, True),
}


def quantizer_golden(lib, rng) -> None:
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    n_rows, n_per_row = 16, 256
    x = rng.standard_normal((n_rows, n_per_row)) * 10.0 ** rng.uniform(-3, 1, size=(n_rows, 1))
    x[3] *= rng.standard_t(3, size=n_per_row)
    x[4] = np.where(rng.random(n_per_row) < 0.1, x[4] * 20, x[4])
    x[5, :128] = 0.0
    x[6] = np.abs(x[6])
    x = x.astype(np.float32)
    x[0] = 0.0
    x[1] = 1.5
    x[2] = -np.arange(n_per_row, dtype=np.float32) / 64
    imp = (10.0 ** rng.uniform(-1, 2, size=n_per_row)).astype(np.float32)
    out_dir = OUT / "quantizer"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "rows.bin").write_bytes(
        b"TDQR" + struct.pack("<3I", 1, n_rows, n_per_row) + x.tobytes() + imp.tobytes())
    for type_id, (name, row_bytes, plain) in SEARCH_TYPES.items():
        parts = []
        for weights in ([None] if plain else []) + [imp]:
            q = np.zeros(n_rows * row_bytes, dtype=np.uint8)
            w = None if weights is None else weights.ctypes.data
            n = lib.ggml_quantize_chunk(type_id, x.ctypes.data, q.ctypes.data, 0, n_rows, n_per_row, w)
            assert n == q.size, name
            parts.append(q.tobytes())
        header = b"TDQQ" + struct.pack("<3I", 1, type_id, row_bytes if plain else 0)
        (out_dir / f"{name}.bin").write_bytes(header + b"".join(parts))


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    lib.ggml_get_type_traits.restype = ctypes.POINTER(Traits)
    rng = np.random.default_rng(0x6A1)
    for type_id, (name, block, size, scales, dequant) in TYPES.items():
        t = lib.ggml_get_type_traits(type_id).contents
        assert (t.type_name.decode(), t.blck_size, t.type_size) == (name, block, size), name
        to_float, from_float = ROW_FN(t.to_float), ROW_FN(t.from_float_ref)

        n = 48
        blocks = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
        for off in scales:
            mag = 10.0 ** rng.uniform(-4.0, np.log10(4.0), size=n)
            sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
            blocks[:, off:off + 2] = (sign * mag).astype(np.float16).reshape(n, 1).view(np.uint8)
        blocks[0, :] = 0
        blocks[1, 2:] = 0xFF
        inp = np.ascontiguousarray(blocks)
        out = np.zeros(n * block, dtype=np.float32)
        to_float(inp.ctypes.data, out.ctypes.data, n * block)
        if dequant:
            write("dequant", type_id, name, 0, inp.tobytes(), out.tobytes())

        x = (rng.standard_normal((16, block)) * 10.0 ** rng.uniform(-3, 2, size=(16, 1))).astype(np.float32)
        x[0] = 0.0
        x[1] = 1.5
        x[2] = -np.arange(block, dtype=np.float32)
        q = np.zeros(16 * size, dtype=np.uint8)
        from_float(x.ctypes.data, q.ctypes.data, x.size)
        write("quant", type_id, name, 1, x.tobytes(), q.tobytes())
    quantizer_golden(lib, rng)
    print(f"wrote {len(TYPES)} types and {len(SEARCH_TYPES)} quantizers under {OUT}")


if __name__ == "__main__":
    main()
