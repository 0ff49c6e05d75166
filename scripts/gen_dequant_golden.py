#!/usr/bin/env python3
# Golden data for crates/device/tests/dequant_golden.rs, from the reference numpy
# implementation in the `gguf` Python package (gguf.quants).
#
# Run from the repository root (needs `pip install gguf numpy`):
#     python3 scripts/gen_dequant_golden.py
# It rewrites crates/device/tests/golden/{dequant,quant}/<type>.bin. The seed is fixed,
# so rerunning with the same gguf/numpy versions gives identical files.
#
# File format (all integers little-endian u32):
#     b"TDQG", version (1), ggml type id, kind (0 dequantize, 1 quantize),
#     input byte count, output byte count, input bytes, output bytes.
# Dequantize: input is whole blocks of the type, output is f32 (LE) values.
# Quantize: input is f32 (LE) values, output is whole blocks of the type.

import struct
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
import gguf.quants as quants

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates" / "device" / "tests" / "golden"

# Byte offsets of the f16 scale fields inside each block.
F16_FIELDS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q8_0: [0],
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}
N_BLOCKS_LEGACY = 64
N_BLOCKS_K = 24
N_PLAIN = 512

rng = np.random.default_rng(0x7A4D3E)


def moderate_f16(n: int, gen: np.random.Generator = None) -> np.ndarray:
    """Finite f16 values with random sign and magnitude in [1e-4, 4)."""
    gen = gen or rng
    mag = 10.0 ** gen.uniform(-4.0, np.log10(4.0), size=n)
    sign = np.where(gen.random(n) < 0.5, -1.0, 1.0)
    return (sign * mag).astype(np.float16)


def set_f16(blocks: np.ndarray, row: int, offset: int, value) -> None:
    blocks[row, offset:offset + 2] = np.array([value], dtype=np.float16).view(np.uint8)


def quant_blocks(qtype: T, fields: list = None, gen: np.random.Generator = None) -> np.ndarray:
    """Random blocks with moderate f16 scales at `fields` (F16_FIELDS[qtype] unless given),
    edge cases in the first rows; random bytes from `gen` (the shared rng unless given)."""
    gen = gen or rng
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    n = N_BLOCKS_K if block_size == 256 else N_BLOCKS_LEGACY
    blocks = gen.integers(0, 256, size=(n, type_size), dtype=np.uint8)
    fields = F16_FIELDS[qtype] if fields is None else fields
    for off in fields:
        blocks[:, off:off + 2] = moderate_f16(n, gen).reshape(n, 1).view(np.uint8)
    payload = np.ones(type_size, dtype=bool)
    for off in fields:
        payload[off:off + 2] = False
    # Edge cases in the first rows.
    blocks[0, :] = 0                        # zero scales, zero payload
    blocks[1, payload] = 0xFF               # max nibbles / bits
    blocks[2, payload] = 0x00               # min nibbles / bits
    for off in fields:
        set_f16(blocks, 3, off, 0.0)        # zero scales, random payload
        set_f16(blocks, 4, off, -0.0)
        blocks[5, off:off + 2] = [0x01, 0x00]   # smallest subnormal
        blocks[6, off:off + 2] = [0xFF, 0x03]   # largest subnormal
    if fields:
        set_f16(blocks, 7, fields[0], 65504.0)  # largest finite
        set_f16(blocks, 8, fields[0], -65504.0)
    blocks[8, payload] = 0xFF
    for off in fields[1:]:
        set_f16(blocks, 7, off, -65504.0)
        set_f16(blocks, 8, off, 65504.0)
    return blocks


# The IQ grid types, from an rng of their own so that the files above keep their bytes.
GRID_F16_FIELDS = {
    T.IQ2_XXS: [0],
    T.IQ2_XS: [0],
    T.IQ2_S: [0],
    T.IQ3_XXS: [0],
    T.IQ3_S: [0],
    T.IQ1_S: [0],
    T.IQ1_M: [],
}
grid_rng = np.random.default_rng(0x16D1C5)


def iq1_m_blocks() -> np.ndarray:
    """IQ1_M, whose f16 `d` is the top nibbles of the four u16 scale words at 48..56:
    random blocks and edge payloads as the others', then `d` set as theirs is."""
    blocks = quant_blocks(T.IQ1_M, [], grid_rng)
    n = blocks.shape[0]
    d = moderate_f16(n, grid_rng).view(np.uint16)
    d[:5] = [0x0000, 0x3C00, 0x3C00, 0x0000, 0x8000]   # zero block, 1.0, 1.0, +0, -0
    d[5:9] = [0x0001, 0x03FF, 0x7BFF, 0xFBFF]          # subnormals, largest finite
    words = blocks[:, 48:56].copy().view(np.uint16)
    for t in range(4):
        words[:, t] = (words[:, t] & 0x0FFF) | (((d >> (4 * t)) & 0xF) << 12)
    blocks[:, 48:56] = words.view(np.uint8)
    return blocks


def plain_bytes(qtype: T) -> np.ndarray:
    if qtype == T.F32:
        vals = (rng.standard_normal(N_PLAIN) * 10.0 ** rng.uniform(-6, 6, N_PLAIN)).astype(np.float32)
        vals[:8] = [0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 3.4028235e38, np.nan]
        return vals.view(np.uint8)
    if qtype == T.F16:
        bits = rng.integers(0, 1 << 16, size=N_PLAIN, dtype=np.uint16)
        bits[:10] = [0x0000, 0x8000, 0x7C00, 0xFC00, 0x0001, 0x83FF, 0x7BFF, 0xFBFF, 0x7E00, 0x3C00]
        return bits.view(np.uint8)
    if qtype == T.BF16:
        bits = rng.integers(0, 1 << 16, size=N_PLAIN, dtype=np.uint16)
        bits[:10] = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x807F, 0x7F7F, 0xFF7F, 0x7FC0, 0x7F81]
        return bits.view(np.uint8)
    raise ValueError(qtype)


def quant_input(qtype: T) -> np.ndarray:
    block_size, _ = GGML_QUANT_SIZES[qtype]
    if block_size == 1:
        x = rng.standard_normal(N_PLAIN) * 10.0 ** rng.uniform(-3, 2, N_PLAIN)
        x[:6] = [0.0, -0.0, 65504.0, 65520.0, 1e-8, -3.0e38]
        return x.astype(np.float32)
    n_blocks = 32
    scale = 10.0 ** rng.uniform(-3, 2, size=(n_blocks, 1))
    x = (rng.standard_normal((n_blocks, block_size)) * scale).astype(np.float32)
    x[0] = 0.0                                           # all-zero block
    x[1] = 1.5                                           # constant block
    x[2] = -np.arange(block_size, dtype=np.float32)      # ramp
    x[3, 5] = 1000.0                                     # one outlier
    return x.reshape(-1)


def write(kind_dir: str, qtype: T, kind: int, inp: np.ndarray, out: np.ndarray) -> int:
    inp_b = np.ascontiguousarray(inp).tobytes()
    out_b = np.ascontiguousarray(out).tobytes()
    path = OUT / kind_dir / f"{qtype.name.lower()}.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    header = b"TDQG" + struct.pack("<5I", 1, int(qtype), kind, len(inp_b), len(out_b))
    path.write_bytes(header + inp_b + out_b)
    return path.stat().st_size


# The low-bit types, from an rng of their own so the files above stay byte-identical.
# Scale fields other than f16 (MXFP4's exponent, NVFP4's E4M3 codes) stay random: every
# code is part of the test.
LOWBIT_F16_FIELDS = {
    T.IQ4_NL: [0],
    T.IQ4_XS: [0],
    T.TQ1_0: [52],
    T.TQ2_0: [64],
    T.MXFP4: [],
    T.NVFP4: [],
}
LOWBIT_QUANT = [T.TQ1_0, T.TQ2_0, T.MXFP4]


def lowbit_blocks(qtype: T, r: np.random.Generator) -> np.ndarray:
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    n = N_BLOCKS_K if block_size == 256 else N_BLOCKS_LEGACY
    blocks = r.integers(0, 256, size=(n, type_size), dtype=np.uint8)
    for off in LOWBIT_F16_FIELDS[qtype]:
        mag = 10.0 ** r.uniform(-4.0, np.log10(4.0), size=n)
        sign = np.where(r.random(n) < 0.5, -1.0, 1.0)
        blocks[:, off:off + 2] = (sign * mag).astype(np.float16).reshape(n, 1).view(np.uint8)
    blocks[0, :] = 0
    blocks[1, :] = 0xFF
    for off in LOWBIT_F16_FIELDS[qtype]:
        set_f16(blocks, 1, off, 1.0)
        set_f16(blocks, 2, off, 65504.0)
    return blocks


def lowbit() -> int:
    total = 0
    r = np.random.default_rng(0x10B175)
    for qtype in LOWBIT_F16_FIELDS:
        blocks = lowbit_blocks(qtype, r)
        with np.errstate(over="ignore"):
            out = quants.dequantize(blocks.reshape(-1), qtype)
        assert out.dtype == np.float32
        total += write("dequant", qtype, 0, blocks, out)
    for qtype in LOWBIT_QUANT:
        block_size, _ = GGML_QUANT_SIZES[qtype]
        x = (r.standard_normal((16, block_size)) * 10.0 ** r.uniform(-3, 2, size=(16, 1))).astype(np.float32)
        x[0] = 0.0
        x[1] = 1.5
        x[2] = -np.arange(block_size, dtype=np.float32)
        q = quants.quantize(x.reshape(-1), qtype)
        total += write("quant", qtype, 1, x.reshape(-1), np.asarray(q).view(np.uint8))
    return total


def main() -> None:
    total = 0
    for qtype in [T.F32, T.F16, T.BF16]:
        raw = plain_bytes(qtype)
        out = quants.dequantize(raw, qtype).astype(np.float32, copy=False)
        total += write("dequant", qtype, 0, raw, out.view(np.uint8))
    for qtype in F16_FIELDS:
        blocks = quant_blocks(qtype)
        out = quants.dequantize(blocks.reshape(-1), qtype)
        assert out.dtype == np.float32
        total += write("dequant", qtype, 0, blocks, out)
    for qtype in [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]:
        x = quant_input(qtype)
        with np.errstate(over="ignore"):  # -3e38 -> -inf in f16 is part of the test
            q = quants.quantize(x, qtype)
        total += write("quant", qtype, 1, x, np.asarray(q).view(np.uint8))
    for qtype, fields in GRID_F16_FIELDS.items():
        blocks = iq1_m_blocks() if qtype == T.IQ1_M else quant_blocks(qtype, fields, grid_rng)
        out = quants.dequantize(blocks.reshape(-1), qtype)
        assert out.dtype == np.float32 and np.isfinite(out).all()
        total += write("dequant", qtype, 0, blocks, out)
    total += lowbit()
    print(f"wrote {total} bytes under {OUT}")


if __name__ == "__main__":
    main()
