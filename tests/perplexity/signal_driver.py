#!/usr/bin/env python3
"""Drives llama-hotswap-perplexity in ik_llama.cpp's signal-file mode, as the GGUF-Tool-Suite
driver does: commands with sequence numbers in the control file (written to a temporary file,
then renamed into place), statuses read back from the status file.

usage: signal_driver.py TOOL MODEL_FIRST_SHARD SHARD CANDIDATE TEXT LOG

Scenario (the shard holds one tensor; CANDIDATE is the same tensor in another type):
  done 1 0 -> swap the candidate in, `reload 1` -> done 2 1
  `reload 1` again (stale: ignored), `reload 2` with nothing changed -> reload_failed 2 2
  restore the original, `reload 3` -> done 3 3;  `exit 4` -> exiting 3 4, exit status 0.
Every status read must be one complete line `<state> <iter> <seq>` (atomic writes). Prints
the three PPL estimates; exits non-zero with a reason on any deviation."""
import os
import re
import subprocess
import sys
import time

tool, first, shard, cand, text, log_path = sys.argv[1:7]
work = os.path.dirname(os.path.abspath(shard))
ctrl = os.path.join(work, "control")
stat = os.path.join(work, "status")
for p in (ctrl, stat):
    if os.path.exists(p):
        os.remove(p)
env = dict(os.environ, LLAMA_HOTSWAP_ENABLED="1",
           LLAMA_HOTSWAP_CONTROL_FILE=ctrl, LLAMA_HOTSWAP_STATUS_FILE=stat)
env.pop("LLAMA_PERPLEXITY_PRE_RELOAD_SCRIPT", None)
log = open(log_path, "wb")
proc = subprocess.Popen([tool, "-m", first, "-f", text, "-c", "128", "--chunks", "1", "-t", "2"],
                        env=env, stdout=log, stderr=subprocess.STDOUT)
LINE = re.compile(r"^(computing|done|reload_failed|exiting) (\d+) (\d+)\n$")


def die(msg):
    proc.kill()
    sys.exit(f"signal driver: {msg} (log: {log_path})")


def wait_status(want, timeout=600):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None and want != "exiting":
            die(f"the tool exited ({proc.returncode}) while waiting for '{want}'")
        try:
            with open(stat) as f:
                s = f.read()
        except FileNotFoundError:
            s = None
        if s is not None:
            if not LINE.match(s):
                die(f"torn or malformed status {s!r}")
            if s == want + "\n":
                return
        time.sleep(0.02)
    die(f"timed out waiting for status '{want}'")


def send(cmd):
    tmp = ctrl + ".w"
    with open(tmp, "w") as f:
        f.write(cmd + "\n")
    os.replace(tmp, ctrl)
    end = time.time() + 60
    while os.path.exists(ctrl):  # the tool deletes a command once it read it
        if time.time() > end:
            die(f"command '{cmd}' was never taken")
        time.sleep(0.02)


def swap(src):
    tmp = shard + ".new"
    with open(src, "rb") as a, open(tmp, "wb") as b:
        b.write(a.read())
    os.replace(tmp, shard)


original = shard + ".orig"
os.link(shard, original)
try:
    wait_status("done 1 0")
    swap(cand)
    send("reload 1")
    wait_status("done 2 1")
    send("reload 1")
    send("reload 2")
    wait_status("reload_failed 2 2")
    os.replace(original, shard)
    send("reload 3")
    wait_status("done 3 3")
    send("exit 4")
    wait_status("exiting 3 4")
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        die("the tool did not exit after 'exit'")
    if rc != 0:
        die(f"exit status {rc}")
finally:
    if os.path.exists(original):
        os.replace(original, shard)
log.close()
out = open(log_path, encoding="utf-8", errors="replace").read()
ppl = re.findall(r"Final estimate: PPL = ([0-9.]+)", out)
if len(ppl) != 3:
    sys.exit(f"signal driver: {len(ppl)} final estimates, expected 3 (log: {log_path})")
if "ignoring stale hot-swap command 'reload' (seq 1 <= 1)" not in out:
    sys.exit("signal driver: the stale command was not reported as ignored")
print(" ".join(ppl))
