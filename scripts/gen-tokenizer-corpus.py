#!/usr/bin/env python3
"""Writes the differential tokenizer corpus (deterministic, seeded): texts separated by
"\\n__ggml_vocab_test__\\n", covering random Unicode with combining marks, ZWJ emoji, CJK, RTL,
Hangul, whitespace runs, CRLF, NBSP, long words, digit runs, invalid UTF-8 and NUL, plus every
upstream .inp case. usage: gen-tokenizer-corpus.py MODELS_DIR OUT [SEED]"""
import glob
import os
import random
import sys

SEP = b"\n__ggml_vocab_test__\n"


def main():
    models, out = sys.argv[1], sys.argv[2]
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 1234)
    pools = {
        "ascii": [chr(c) for c in range(0x20, 0x7F)],
        "latin": list("àáâãäåæçèéêëìíîïðñòóôõöøùúûüýþÿĀāĂăĄąĆćŒœŠšŸŽž"),
        "combining": ["e\u0301", "a\u0308", "o\u0303\u0323", "n\u0303", "\u0301", "i\u0307\u0301"],
        "emoji": ["\U0001F600", "\U0001F468\u200D\U0001F469\u200D\U0001F467", "\U0001F44D\U0001F3FD",
                  "\u2764\uFE0F", "\U0001F1EB\U0001F1F7", "\U0001F3F3\uFE0F\u200D\U0001F308"],
        "cjk": list("你好世界中文字符漢字日本語のテキストカタカナひらがな"),
        "rtl": list("שלום עולם مرحبا بالعالم ١٢٣٤٥"),
        "hangul": list("안녕하세요한국어") + ["\u1100\u1161\u11a8"],
        "space": [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2009", "\u0085", "\u200b",
                  "\n\n", "   \n", " \t "],
        "digits": ["0", "12", "123", "1234", "12345", "3.14159", "1,000,000", "٣", "೩", "Ⅻ"],
        "punct": list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~…—–«»¿¡"),
        "contr": ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", " 's"],
    }
    texts = []
    for _ in range(120):
        parts = []
        for _ in range(rng.randint(1, 25)):
            pool = rng.choice(list(pools))
            parts.append(rng.choice(pools[pool]))
        texts.append("".join(parts).encode("utf-8"))
    texts += [
        b"a" * 3000, b"x" + b" " * 700 + b"y", b"9" * 500, b"\n" * 300, ("\u00e9" * 400).encode(),
        b"supercalifragilisticexpialidocious" * 20, b"Hello\r\nWorld\r\n\r\n", b" leading", b"trailing ",
        b"  ", b" ", b"\t\t", b"ab\xff\xfe cd", b"\xc3", b"a\x00b", b"\xed\xa0\x80x", b"\x80\x81abc",
        b"caf\xc3\xa9 \xe2\x82", ("<s>hi</s> <|endoftext|><|im_start|>user\n").encode(),
        b"[CLS] [SEP] [MASK] <mask> <pad> <unk>", b"<0x0A> <0x41>",
    ]
    for inp in sorted(glob.glob(os.path.join(models, "*.inp"))):
        raw = open(inp, "rb").read()
        texts += raw.split(SEP)
    seen = set()
    uniq = []
    for t in texts:
        if t not in seen and SEP not in t:
            seen.add(t)
            uniq.append(t)
    with open(out, "wb") as f:
        f.write(SEP.join(uniq))


if __name__ == "__main__":
    main()
