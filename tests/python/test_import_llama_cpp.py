"""llama-cpp-python (the pinned 0.3.36 sdist) on top of our libllama.so.

Run by scripts/test-python.sh with PYTHONPATH=<unpacked sdist> and LLAMA_CPP_LIB_PATH=<dir
of our libllama.so>. No pytest: plain asserts, one line per check, exit status 1 on failure.

llama_cpp binds every function with ctypes at import time, so a single missing symbol makes
`import llama_cpp` fail. The first check lists every missing one before importing.
"""

import ctypes
import os
import re
import sys

LIB_DIR = os.environ["LLAMA_CPP_LIB_PATH"]
LIB_PATH = os.path.join(LIB_DIR, "libllama.so")
failures = []


def check(name, ok, detail=""):
    print("%s %s%s" % ("ok  " if ok else "FAIL", name, (": " + detail) if detail else ""))
    if not ok:
        failures.append(name)


def bound_symbols():
    """Names llama_cpp/llama_cpp.py binds with @ctypes_function (found without importing)."""
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    src_dir = os.path.dirname(spec.origin)
    with open(os.path.join(src_dir, "llama_cpp.py")) as f:
        text = f.read()
    return sorted(set(re.findall(r'@ctypes_function\(\s*"(\w+)"', text)))


def main():
    lib = ctypes.CDLL(LIB_PATH)
    names = bound_symbols()
    missing = [n for n in names if not hasattr(lib, n)]
    check("llama_cpp binds %d functions, all exported by %s" % (len(names), LIB_PATH),
          not missing, ("missing %d: %s" % (len(missing), " ".join(missing))) if missing else "")
    if missing:
        return

    import llama_cpp

    check("import llama_cpp loads our library",
          os.path.realpath(llama_cpp.llama_cpp._lib._name) == os.path.realpath(LIB_PATH),
          llama_cpp.llama_cpp._lib._name)
    check("llama_max_devices() == 16", llama_cpp.llama_max_devices() == 16)
    check("llama_supports_mmap()", bool(llama_cpp.llama_supports_mmap()))

    mp = llama_cpp.llama_model_default_params()
    check("ctypes llama_model_params is 80 bytes", ctypes.sizeof(mp) == 80)
    check("model n_gpu_layers == -1", mp.n_gpu_layers == -1, str(mp.n_gpu_layers))
    check("model split_mode == LAYER", mp.split_mode == llama_cpp.LLAMA_SPLIT_MODE_LAYER)
    check("model use_extra_bufts", bool(mp.use_extra_bufts))
    check("model vocab_only is false", not mp.vocab_only)

    cp = llama_cpp.llama_context_default_params()
    check("context n_ctx == 512", cp.n_ctx == 512, str(cp.n_ctx))
    check("context n_batch == 2048", cp.n_batch == 2048, str(cp.n_batch))
    check("context n_ubatch == 512", cp.n_ubatch == 512, str(cp.n_ubatch))
    check("context offload_kqv", bool(cp.offload_kqv))

    check("llama_ftype_name(Q4_K_M)",
          llama_cpp.llama_ftype_name(llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M) == b"Q4_K - Medium")
    buf = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_split_path(buf, ctypes.sizeof(buf), b"/m/x", 1, 4)
    check("llama_split_path", n == 24 and buf.value == b"/m/x-00002-of-00004.gguf",
          "%d %r" % (n, buf.value))
    info = llama_cpp.llama_print_system_info()
    check("llama_print_system_info() returns bytes", isinstance(info, bytes) and len(info) > 0)

    # llama_cpp installed its logging callback at import; our library calls it.
    seen = []

    @llama_cpp.llama_log_callback
    def capture(level, text, user_data):
        seen.append((level, text))

    llama_cpp.llama_log_set(capture, ctypes.c_void_p(0))
    llama_cpp.llama_load_mode_from_str(b"no-such-mode")
    from llama_cpp._logger import llama_log_callback as llama_cpp_logger

    llama_cpp.llama_log_set(llama_cpp_logger, ctypes.c_void_p(0))
    check("log callback receives the library's messages",
          len(seen) == 1 and b"no-such-mode" in seen[0][1], repr(seen))

    tokenizer_checks()


def tokenizer_checks():
    """llama-cpp-python's own tokenize/detokenize wrappers (LlamaModel) on upstream's
    llama-bpe vocab give upstream's expected ids (models/*.inp/.out) and the text back."""
    import llama_cpp
    from llama_cpp._internals import LlamaModel

    models = os.path.join(os.environ["UPSTREAM_LLAMA"], "models")
    path = os.path.join(models, "ggml-vocab-llama-bpe.gguf")
    mp = llama_cpp.llama_model_default_params()
    mp.vocab_only = True
    model = LlamaModel(path_model=path, params=mp, verbose=False)
    raw = open(path + ".inp", "rb").read().split(b"\n__ggml_vocab_test__\n")
    if raw and raw[-1] == b"":  # a trailing separator ends the list (test-tokenizer-0)
        raw.pop()
    expected = [[int(t) for t in line.split()] for line in open(path + ".out").read().splitlines()]
    bad = [text for text, ids in zip(raw, expected)
           if model.tokenize(text, add_bos=False, special=False) != ids]
    check("LlamaModel.tokenize matches upstream's %d llama-bpe cases" % len(raw),
          len(raw) == len(expected) and not bad, repr(bad[:3]))
    ids = model.tokenize(b"Hello world", add_bos=True, special=False)
    check("LlamaModel.tokenize adds BOS", ids[:1] == [model.token_bos()], repr(ids))
    check("LlamaModel.detokenize round trip",
          model.detokenize(ids[1:], special=False) == b"Hello world",
          repr(model.detokenize(ids[1:], special=False)))


if __name__ == "__main__":
    main()
    print("%d failed" % len(failures) if failures else "all python checks passed")
    sys.exit(1 if failures else 0)
