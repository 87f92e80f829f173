"""What the llama-cpp-python differential scripts share: llama-cpp-python loads its library
once per process, so each library runs the script's `worker` in a subprocess of its own
(LLAMA_CPP_LIB_PATH picks the library, the worker saves what it saw to an .npz file) and the
driver compares the two files."""
import os
import subprocess
import sys

import numpy as np


def run(script, lib_dir, model, out):
    """Runs `script worker MODEL OUT` on the library in `lib_dir`; returns the loaded .npz."""
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=lib_dir)
    proc = subprocess.run([sys.executable, script, "worker", model, out], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"FAIL worker on {lib_dir} exited {proc.returncode}")
    return np.load(out)


def dispatch(doc, worker, main):
    """The command line: `worker MODEL OUT` in a subprocess, else the driver's 4 arguments."""
    if len(sys.argv) == 4 and sys.argv[1] == "worker":
        sys.exit(worker(sys.argv[2], sys.argv[3]))
    if len(sys.argv) != 5:
        sys.exit(doc)
    sys.exit(main(*sys.argv[1:]))
