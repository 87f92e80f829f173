#!/usr/bin/env python3
"""Raw chat templates for the chat-template differential test (scripts/test-chat.sh).

    chat_corpus.py UPSTREAM_LLAMA OUT_DIR

Writes one file per template into OUT_DIR and prints their paths, one a line:
  * vocab-<file>--<key>.jinja: every `tokenizer.chat_template*` string of the sdist's
    models/ggml-vocab-*.gguf (read with the small GGUF key/value reader below: gguf-py's
    reader decodes every token array and takes minutes on these files);
  * marker-NNN.txt: the marker strings of upstream's detection heuristics, taken from
    llm_chat_detect_template in src/llama-chat.cpp: each literal alone, and each condition
    line's literals together with those of the conditions enclosing it (so nested branches
    are reached).
The .jinja files of models/templates/ are used in place, not copied.
"""

import glob
import os
import re
import struct
import sys

GGUF_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
GGUF_STRING, GGUF_ARRAY = 8, 9


def gguf_string_kvs(path):
    """{key: bytes} for the string-valued keys of a GGUF file (arrays are skipped)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"GGUF":
        raise ValueError("%s: not a GGUF file" % path)
    pos = 8
    _n_tensors, n_kv = struct.unpack_from("<QQ", data, pos)
    pos += 16

    def string_at(pos):
        (n,) = struct.unpack_from("<Q", data, pos)
        return data[pos + 8 : pos + 8 + n], pos + 8 + n

    def skip(vtype, pos):
        if vtype in GGUF_SCALAR_SIZES:
            return pos + GGUF_SCALAR_SIZES[vtype]
        if vtype == GGUF_STRING:
            return string_at(pos)[1]
        if vtype == GGUF_ARRAY:
            etype, count = struct.unpack_from("<IQ", data, pos)
            pos += 12
            if etype in GGUF_SCALAR_SIZES:
                return pos + count * GGUF_SCALAR_SIZES[etype]
            for _ in range(count):
                pos = skip(etype, pos)
            return pos
        raise ValueError("%s: unknown GGUF type %d" % (path, vtype))

    result = {}
    for _ in range(n_kv):
        key, pos = string_at(pos)
        (vtype,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if vtype == GGUF_STRING:
            value, pos = string_at(pos)
            result[key.decode("utf-8", "replace")] = value
        else:
            pos = skip(vtype, pos)
    return result


def c_unescape(literal):
    """The bytes of a C string literal's body (the escapes llama-chat.cpp uses)."""
    out = bytearray()
    raw = literal.encode("utf-8")
    i = 0
    escapes = {ord("n"): b"\n", ord("t"): b"\t", ord("\\"): b"\\", ord('"'): b'"', ord("'"): b"'"}
    while i < len(raw):
        if raw[i] == ord("\\"):
            out += escapes[raw[i + 1]]
            i += 2
        else:
            out.append(raw[i])
            i += 1
    return bytes(out)


def detection_markers(source):
    """Marker strings of llm_chat_detect_template: each literal, and per line the literals of
    the conditions open there (enclosing ones by indentation, the line's own so far)."""
    start = source.index("llm_chat_template llm_chat_detect_template(")
    end = source.index("return LLM_CHAT_TEMPLATE_UNKNOWN;", start)
    body = source[start:end]
    literal = re.compile(r'"((?:[^"\\]|\\.)*)"')
    markers, stack = [], []
    for line in body.splitlines():
        found = [c_unescape(s) for s in literal.findall(line)]
        if re.search(r"\bif\s*\(", line) or line.strip().startswith("} else"):
            # A condition: closes its siblings and anything nested deeper.
            indent = len(line) - len(line.lstrip())
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, found))
        elif found and stack:
            # The continuation of the open condition (`|| tmpl_contains(...)`, `? ... :`).
            stack[-1][1].extend(found)
        elif not found:
            continue
        markers.extend(found)
        markers.append(b"\n".join(m for _, lits in stack for m in lits))
    unique = []
    for m in markers:
        if m not in unique:
            unique.append(m)
    return unique


def main():
    upstream, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for path in sorted(glob.glob(os.path.join(upstream, "models", "ggml-vocab-*.gguf"))):
        stem = os.path.basename(path)[: -len(".gguf")]
        for key, value in sorted(gguf_string_kvs(path).items()):
            if key == "tokenizer.chat_template" or key.startswith("tokenizer.chat_template."):
                p = os.path.join(out_dir, "vocab-%s--%s.jinja" % (stem, key))
                with open(p, "wb") as f:
                    f.write(value)
                paths.append(p)
    with open(os.path.join(upstream, "src", "llama-chat.cpp"), encoding="utf-8") as f:
        source = f.read()
    for i, marker in enumerate(detection_markers(source)):
        p = os.path.join(out_dir, "marker-%03d.txt" % i)
        with open(p, "wb") as f:
            f.write(marker)
        paths.append(p)
    for p in paths:
        print(p)


if __name__ == "__main__":
    main()
