#!/usr/bin/env python3
"""Reads C API facts out of a llama.h: functions, structs, enums, typedefs, #defines.

The tests derive what they check from upstream's header (so nothing is hand-listed and
nothing is missed) and compare with ours using the same parser. The header is run through
the real preprocessor (`gcc -E`), so comments, macros and attributes never reach the parser;
linemarkers tell which file each declaration came from.

Usage as a script (paths default from scripts/env.sh's variables):
    upstream_api.py functions            one upstream llama.h function name per line
    upstream_api.py decls                one upstream declaration per line (attributes stripped)
    upstream_api.py names-c              the function names as a C array (for the dlopen test)
"""

import os
import re
import subprocess
import sys

IDENT = re.compile(r"[A-Za-z_]\w*")


def upstream_paths():
    """(llama.h, include dirs) of the pinned upstream, from the environment (scripts/env.sh)."""
    llama = os.environ.get("UPSTREAM_LLAMA")
    if not llama:
        sys.exit("UPSTREAM_LLAMA is not set: source scripts/env.sh first")
    header = os.path.join(llama, "include", "llama.h")
    return header, [os.path.join(llama, "include"), os.path.join(llama, "ggml", "include")]


class Header:
    """A preprocessed header: per-file declaration text and the macros it defines."""

    def __init__(self, path, include_dirs=(), cc="gcc"):
        self.path = os.path.abspath(path)
        args = [cc, "-E", "-dD", "-std=c11", "-x", "c"]
        for d in include_dirs:
            args += ["-I", d]
        args.append(self.path)
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
        self.chunks = {}  # file -> list of text pieces
        self.defines = {}  # macro name -> (file, replacement text)
        current = "<built-in>"
        for line in out.splitlines():
            m = re.match(r'^# \d+ "([^"]*)"', line)
            if m:
                current = m.group(1)
                continue
            m = re.match(r"^#\s*define\s+(\w+)(\([^)]*\))?\s*(.*)$", line)
            if m:
                if not m.group(2):
                    self.defines[m.group(1)] = (current, m.group(3).strip())
                continue
            if line.startswith("#"):
                continue
            self.chunks.setdefault(current, []).append(line)
        for f in self.chunks:
            self.chunks[f] = strip_attributes("\n".join(self.chunks[f]))

    def text(self, only_self=False):
        """Declaration text of the header itself (only_self) or of everything it includes."""
        if only_self:
            return self.chunks.get(self.path, "")
        return "\n".join(self.chunks.values())

    def own_defines(self):
        """Object-like macros defined by the header file itself, in order."""
        return {k: v for k, (f, v) in self.defines.items() if f == self.path}

    def statements(self, only_self=False):
        return split_top(self.text(only_self), ";")


def strip_attributes(text):
    """Removes GNU `__attribute__((...))` (e.g. upstream's DEPRECATED expansion)."""
    out, i = [], 0
    while True:
        j = text.find("__attribute__", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        k = text.index("(", j)
        depth = 0
        while True:
            if text[k] == "(":
                depth += 1
            elif text[k] == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1


def split_top(text, sep):
    """Splits at `sep` outside any (), [] or {} nesting. Returns stripped, non-empty parts."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [" ".join(p.split()) for p in parts if p.strip()]


def matching_brace(text, open_index):
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced braces")


# ---------------------------------------------------------------- functions


FUNC = re.compile(r"^(?P<ret>[^(]*?)\b(?P<name>[A-Za-z_]\w*)\s*\((?P<params>.*)\)$")


def functions(header, only_self=True):
    """{name: declaration} for the function declarations of the header (in order)."""
    result = {}
    for st in header.statements(only_self):
        if st.startswith("typedef") or "{" in st or st.startswith("extern \"C\""):
            continue
        m = FUNC.match(st)
        if not m or not m.group("ret").strip():
            continue
        result[m.group("name")] = st
    return result


def parse_function(decl):
    """(return type, name, [parameter declarations]) of one declaration."""
    m = FUNC.match(decl)
    params = split_top(m.group("params"), ",")
    if params == ["void"]:
        params = []
    return m.group("ret").strip(), m.group("name"), params


def param_type(param):
    """The type of a parameter declaration (its name removed), e.g. 'const char **'."""
    if re.search(r"\(\s*\*", param):  # function pointer parameter: drop the name inside (*name)
        return re.sub(r"\(\s*\*\s*\w+\s*\)", "(*)", param, count=1)
    p = re.sub(r"\[[^\]]*\]", "*", param)  # arrays decay
    m = re.match(r"^(.*?)(\b[A-Za-z_]\w*)\s*$", p)
    words = p.replace("*", " ").split()
    if m and len(words) > 1 and m.group(2) not in ("int", "char", "long", "short", "unsigned",
                                                    "signed", "float", "double", "void"):
        return m.group(1).strip()
    return p


# ---------------------------------------------------------------- structs and enums


def aggregates(text, kind):
    """{name: body} for every `struct NAME { ... }` (kind='struct') or enum definition."""
    result = {}
    for m in re.finditer(r"\b%s\s+([A-Za-z_]\w*)\s*\{" % kind, text):
        end = matching_brace(text, m.end() - 1)
        result.setdefault(m.group(1), text[m.end():end])
    return result


def struct_fields(body, prefix=""):
    """Member designators of a struct body, in order; anonymous members are flattened
    (C11: `val_i64` of kv_override's union), named nested aggregates give `outer.inner`."""
    fields = []
    for decl in split_top(body, ";"):
        if "{" in decl:
            open_i = decl.index("{")
            close_i = matching_brace(decl, open_i)
            inner = decl[open_i + 1:close_i]
            tail = decl[close_i + 1:].strip()
            if tail:
                name = IDENT.findall(tail)[0]
                fields.append(prefix + name)
                fields += struct_fields(inner, prefix + name + ".")
            else:
                fields += struct_fields(inner, prefix)
            continue
        fp = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)", decl)
        if fp:
            fields.append(prefix + fp.group(1))
            continue
        for i, d in enumerate(split_top(decl, ",")):
            d = re.sub(r":\s*\d+$", "", d)  # bit-field width
            d = d.split("[", 1)[0]
            names = IDENT.findall(d)
            if names:
                fields.append(prefix + names[-1])
    return fields


def enumerators(body):
    names = []
    for item in split_top(body, ","):
        names.append(item.split("=", 1)[0].strip())
    return names


def typedef_names(header, only_self=False):
    """Names introduced by typedef statements."""
    names = {}
    for st in header.statements(only_self):
        if not st.startswith("typedef"):
            continue
        if "{" in st:
            tail = st[st.rindex("}") + 1:]
            ids = IDENT.findall(tail)
            if ids:
                names[ids[-1]] = st
            continue
        fp = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)", st)
        if fp:
            names[fp.group(1)] = st
            continue
        ids = IDENT.findall(st.split("[", 1)[0])
        if ids:
            names[ids[-1]] = st
    return names


# ---------------------------------------------------------------- command line


def main(argv):
    if len(argv) != 2 or argv[1] not in ("functions", "decls", "names-c"):
        sys.exit(__doc__)
    header_path, includes = upstream_paths()
    fns = functions(Header(header_path, includes))
    if argv[1] == "functions":
        print("\n".join(fns))
    elif argv[1] == "decls":
        print("\n".join(fns.values()))
    else:
        print("/* generated by scripts/upstream_api.py from upstream's llama.h */")
        print("static const char *const UPSTREAM_FNS[] = {")
        for name in fns:
            print('    "%s",' % name)
        print("};")
        print("#define UPSTREAM_FN_COUNT %d" % len(fns))


if __name__ == "__main__":
    main(sys.argv)
