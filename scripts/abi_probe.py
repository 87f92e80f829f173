#!/usr/bin/env python3
"""Generates the ABI probe: one C source that prints the layout of every public struct, the
value of every enum constant and #define, and the size of every typedef of the API.

    abi_probe.py OUR_HEADER OUT_DIR

Everything probed is read out of upstream's headers (scripts/upstream_api.py), never
hand-listed. The same probe.c is compiled once against our header and once against
upstream's; scripts/test-abi.sh diffs the two outputs. Items our header lacks would not
compile, so the probe guards each with a HAVE_ macro: have_upstream.h defines all of them,
have_ours.h those our header declares, and a missing item prints a MISSING line instead.

Struct members are reached by the names upstream's C code uses (kv_override's anonymous
union members as `val_i64`, nested members as `adamw.alpha`), so the probe also proves that
C code written against upstream's header compiles against ours.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import upstream_api as api  # noqa: E402

# ggml types that llama.h's API uses and our header declares itself (upstream takes them
# from ggml's headers, so they are not found by looking at llama.h alone).
GGML_STRUCTS = ["ggml_backend_dev_props", "ggml_backend_dev_caps", "ggml_opt_optimizer_params"]
GGML_ENUMS = ["ggml_type", "ggml_log_level", "ggml_numa_strategy", "ggml_opt_optimizer_type",
              "ggml_backend_dev_type"]
# Macros of upstream's llama.h that are plumbing, not API constants.
IGNORED_DEFINES = {"LLAMA_H", "LLAMA_API"}
INTEGER_TYPEDEF = re.compile(r"^typedef (u?int\d+_t|int|unsigned|size_t) \w+$")


def is_api_name(name):
    return name.startswith(("llama_", "ggml_", "gguf_"))


def guard(kind, name):
    return "HAVE_%s_%s" % (kind, name.replace(".", "_"))


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    our_path, out_dir = argv[1], argv[2]
    up_path, up_includes = api.upstream_paths()
    up = api.Header(up_path, up_includes)
    ours = api.Header(our_path, [os.path.dirname(os.path.abspath(our_path))])

    up_all, up_own = up.text(), up.text(only_self=True)
    up_structs = api.aggregates(up_all, "struct")
    up_enums = api.aggregates(up_all, "enum")
    our_text = ours.text()
    our_structs = api.aggregates(our_text, "struct")
    our_enums = api.aggregates(our_text, "enum")

    struct_names = list(api.aggregates(up_own, "struct"))
    struct_names += [s for s in GGML_STRUCTS if s not in struct_names]
    struct_names += [s for s in our_structs
                     if s in up_structs and s not in struct_names and is_api_name(s)]
    enum_names = list(api.aggregates(up_own, "enum"))
    enum_names += [e for e in GGML_ENUMS if e not in enum_names]
    enum_names += [e for e in our_enums
                   if e in up_enums and e not in enum_names and is_api_name(e)]
    defines = [d for d in up.own_defines() if d not in IGNORED_DEFINES]
    up_typedefs = api.typedef_names(up, only_self=True)
    our_typedefs = api.typedef_names(ours)

    our_enumerators = set()
    for body in our_enums.values():
        our_enumerators.update(api.enumerators(body))
    our_macros = set(ours.defines)

    have_up, have_ours, missing = [], [], []

    def declare(kind, name, present):
        g = guard(kind, name)
        have_up.append("#define %s 1" % g)
        if present:
            have_ours.append("#define %s 1" % g)
        else:
            missing.append("%s %s" % (kind, name))
        return g

    body = []
    emit = body.append
    for s in struct_names:
        if s not in up_structs:
            sys.exit("abi_probe: upstream defines no struct %s" % s)
        g = declare("struct", s, s in our_structs)
        t = "struct " + s
        emit("#ifdef %s" % g)
        emit('    P("%s size=%%zu align=%%zu\\n", sizeof(%s), _Alignof(%s));' % (t, t, t))
        for f in api.struct_fields(up_structs[s]):
            emit('    P("%s.%s offset=%%zu size=%%zu\\n", offsetof(%s, %s), sizeof(((%s *)0)->%s));'
                 % (t, f, t, f, t, f))
        emit("#else")
        emit('    P("%s MISSING\\n");' % t)
        emit("#endif")
    for e in enum_names:
        g = declare("enum", e, e in our_enums)
        t = "enum " + e
        emit("#ifdef %s" % g)
        emit('    P("%s size=%%zu\\n", sizeof(%s));' % (t, t))
        emit("#else")
        emit('    P("%s MISSING\\n");' % t)
        emit("#endif")
        for c in api.enumerators(up_enums[e]):
            gc = declare("const", c, c in our_enumerators or c in our_macros)
            emit("#ifdef %s" % gc)
            emit('    P("%s::%s = %%lld\\n", (long long)(%s));' % (t, c, c))
            emit("#else")
            emit('    P("%s::%s MISSING\\n");' % (t, c))
            emit("#endif")
    for d in defines:
        g = declare("define", d, d in our_macros)
        emit("#ifdef %s" % g)
        # Value, and the type's size and signedness: 0xFFFFFFFFu and 4294967295 are equal
        # but not interchangeable in C (printf formats, sign-compare warnings, promotions).
        emit('    P("#define %s = %%lld size=%%zu signed=%%d\\n", (long long)(%s), sizeof(%s), '
             '(int)(((__typeof__(%s))0 - 1) < 0));' % (d, d, d, d))
        emit("#else")
        emit('    P("#define %s MISSING\\n");' % d)
        emit("#endif")
    for name, st in up_typedefs.items():
        g = declare("typedef", name, name in our_typedefs)
        emit("#ifdef %s" % g)
        if INTEGER_TYPEDEF.match(st):
            emit('    P("typedef %s size=%%zu signed=%%d\\n", sizeof(%s), (int)(((%s)0 - 1) < 0));'
                 % (name, name, name))
        else:
            emit('    P("typedef %s size=%%zu\\n", sizeof(%s));' % (name, name))
        emit("#else")
        emit('    P("typedef %s MISSING\\n");' % name)
        emit("#endif")

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "probe.c"), "w") as f:
        f.write("/* Generated by scripts/abi_probe.py; compiled against both headers. */\n")
        f.write("#include <stddef.h>\n#include <stdio.h>\n#include \"llama.h\"\n")
        f.write("#define P printf\n")
        f.write("int main(void) {\n%s\n    return 0;\n}\n" % "\n".join(body))
    with open(os.path.join(out_dir, "have_upstream.h"), "w") as f:
        f.write("\n".join(have_up) + "\n")
    with open(os.path.join(out_dir, "have_ours.h"), "w") as f:
        f.write("\n".join(have_ours) + "\n")
    with open(os.path.join(out_dir, "missing.txt"), "w") as f:
        f.write("".join(m + "\n" for m in missing))
    print("abi_probe: %d structs, %d enums, %d defines, %d typedefs; %d missing from our header"
          % (len(struct_names), len(enum_names), len(defines), len(up_typedefs), len(missing)))


if __name__ == "__main__":
    main(sys.argv)
