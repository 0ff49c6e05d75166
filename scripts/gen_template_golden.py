#!/usr/bin/env python3
"""Golden prompts of llama.cpp's built-in chat templates (`--chat-template NAME`), from
llama_chat_apply_template in the peer's libllama (ctypes; nothing of it is committed).

    scripts/gen_template_golden.py PATH/TO/libllama.so > crates/text/tests/golden/chat_templates.json
"""

import ctypes
import json
import sys

NAMES = ["chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1", "mistral-v3",
         "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken", "phi3", "phi4", "falcon3", "zephyr", "monarch",
         "gemma", "orion", "openchat", "vicuna", "vicuna-orca", "deepseek", "deepseek2", "deepseek3",
         "command-r", "llama3", "minicpm", "granite", "granite-4.0", "chatglm3", "chatglm4", "glmedge",
         "deepseek-ocr", "exaone3", "rwkv-world", "megrez", "llama4", "smolvlm", "kimi-k2", "seed_oss", "grok-2",
         "exaone4", "gigachat", "yandex", "hunyuan-moe", "hunyuan-dense", "bailing", "bailing-think", "exaone-moe", "granite-4.1",
         "bailing2", "gpt-oss", "hunyuan-vl", "pangu-embedded", "solar-open"]

CHATS = [
    [["system", "You are a test."], ["user", "Hi there"]],
    [["user", "Hello"], ["assistant", "Hi! How can I help?"], ["user", "Tell me a joke."]],
    [["system", "Be brief."], ["user", "One"], ["assistant", "Two"], ["user", "Three"]],
    [["system", " padded system "], ["user", "  padded user \n"], ["assistant", " padded answer "],
     ["user", "last"]],
]


class Msg(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


lib = ctypes.CDLL(sys.argv[1])
lib.llama_chat_apply_template.restype = ctypes.c_int32
lib.llama_chat_apply_template.argtypes = [ctypes.c_char_p, ctypes.POINTER(Msg), ctypes.c_size_t,
                                          ctypes.c_bool, ctypes.c_char_p, ctypes.c_int32]
out = {}
for name in NAMES:
    cases = []
    for chat in CHATS:
        msgs = (Msg * len(chat))(*[Msg(r.encode(), c.encode()) for r, c in chat])
        buf = ctypes.create_string_buffer(1 << 16)
        n = lib.llama_chat_apply_template(name.encode(), msgs, len(chat), True, buf, len(buf))
        if n < 0:
            raise SystemExit(f"{name}: llama_chat_apply_template failed ({n})")
        cases.append({"messages": [{"role": r, "content": c} for r, c in chat],
                      "prompt": buf.raw[:n].decode()})
    out[name] = cases
json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
print()
