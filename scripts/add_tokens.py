#!/usr/bin/env python3
"""A copy of a GGUF language model with tokens appended to its vocabulary, as a model's
added special tokens are (control tokens, score 0), their embedding rows (and output-head
rows, where the head is its own matrix) zero: a real model whose vocabulary holds the tokens
a vision projector places images with (Idefics3's `<fake_token_around_image>`, ...), for
tests/server/test_vision.py and scripts/gen_vision_golden.sh.

usage: scripts/add_tokens.py IN OUT TOKEN...
"""
import sys

import gguf
import numpy as np

ROWS = ("token_embd.weight", "output.weight")


def main(src, dst, added):
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    if clash := [t for t in added if t in tokens]:
        sys.exit(f"already tokens: {clash}")
    n_vocab = len(tokens)
    w = gguf.GGUFWriter(dst, arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        value = f.contents()
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        if f.name == "tokenizer.ggml.tokens":
            value = value + added
        elif f.name == "tokenizer.ggml.token_type":
            value = value + [gguf.TokenType.CONTROL] * len(added)
        elif f.name == "tokenizer.ggml.scores":
            value = value + [0.0] * len(added)
        elif f.name == f"{arch}.vocab_size":
            value = value + len(added)
        w.add_key_value(f.name, value, f.types[0], sub_type=sub)
    for t in r.tensors:
        data = np.asarray(t.data)
        if t.name in ROWS and t.shape[-1] == n_vocab:
            data = np.concatenate([data, np.zeros((len(added),) + data.shape[1:], data.dtype)])
        w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
