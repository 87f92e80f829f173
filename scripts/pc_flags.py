#!/usr/bin/env python3
"""Prints `Cflags` and `Libs` of a .pc file with its variables expanded — the part of
`pkg-config --cflags --libs` the tests need, for machines without pkg-config.

    pc_flags.py FILE.pc
"""

import re
import sys


def main(path):
    variables, fields = {}, {}

    def expand(text):
        return re.sub(r"\$\{(\w+)\}", lambda m: variables.get(m.group(1), ""), text)

    with open(path) as f:
        for line in f:
            line = line.strip()
            m = re.match(r"^(\w+)\s*=\s*(.*)$", line)
            if m:
                variables[m.group(1)] = expand(m.group(2))
                continue
            m = re.match(r"^([\w.]+):\s*(.*)$", line)
            if m:
                fields[m.group(1)] = expand(m.group(2))
    for required in ("Name", "Description", "Version", "Libs", "Cflags"):
        if required not in fields:
            sys.exit("%s: no %s field" % (path, required))
    print((fields["Cflags"] + " " + fields["Libs"]).strip())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
