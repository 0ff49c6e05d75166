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
    print(f"wrote {len(TYPES)} types under {OUT}")


if __name__ == "__main__":
    main()
