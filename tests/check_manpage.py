#!/usr/bin/env python3
"""flashjit.1 documents the built tool: its .TH names the version `flashjit
--version` prints, and it has a section with the usage line of every
command `flashjit --help` lists.

usage: check_manpage.py MANPAGE FLASHJIT"""
import re
import subprocess
import sys


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    page = open(argv[1], encoding="utf-8").read()
    binary = argv[2]
    out = lambda *a: subprocess.run([binary] + list(a), check=True, capture_output=True,
                                    text=True).stdout
    problems = []
    version = out("--version").split()[1]
    th = re.search(r"^\.TH .*$", page, flags=re.M)
    if not th or version not in th.group(0):
        problems.append("the .TH line (%s) does not name version %s"
                        % (th.group(0) if th else "missing", version))
    commands = re.findall(r"^  ([a-z][a-z-]*)\s", out("--help").split("commands:", 1)[1], flags=re.M)
    for name in commands:
        usage = out(name, "--help").splitlines()[0].replace("\\", "\\e")
        if not re.search(r"^\.SS %s$" % re.escape(name), page, flags=re.M):
            problems.append("no section for command '%s'" % name)
        elif usage not in page:
            problems.append("command '%s': its usage line '%s' is not in the page" % (name, usage))
    for p in problems:
        print("check_manpage: " + p)
    if not problems:
        print("check_manpage: %s: version %s, %d commands" % (argv[1], version, len(commands)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
