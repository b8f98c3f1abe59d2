#!/usr/bin/env python3
"""Writes help2man's include file for flashjit(1): a COMMANDS section with
each subcommand's --help text, as the built binary prints it, so the man
page says what the tool says and cannot drift from it.

usage: man_commands.py FLASHJIT OUTPUT

The subcommands are those `flashjit --help` lists under "commands:". Fails
(exit 1, naming the command) when one's --help exits nonzero or prints
nothing."""
import os
import re
import subprocess
import sys
import tempfile


def run_help(binary, args, env):
    r = subprocess.run([binary] + args, capture_output=True, text=True, env=env)
    if r.returncode != 0 or not r.stdout.strip():
        sys.exit("man_commands: `%s %s` exited %d with %d bytes of output: %s"
                 % (os.path.basename(binary), " ".join(args), r.returncode, len(r.stdout),
                    r.stderr.strip()))
    return r.stdout


def roff_verbatim(text):
    """Text shown as is: no fill, backslashes and leading dots escaped."""
    lines = []
    for line in text.rstrip("\n").split("\n"):
        line = line.replace("\\", "\\e")
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return ".nf\n" + "\n".join(lines) + "\n.fi\n"


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    binary, output = argv[1], argv[2]
    with tempfile.TemporaryDirectory() as scratch:
        # --help must not touch a cache; if one did, it is this scratch one.
        env = dict(os.environ, FLASHJIT_CACHE_DIR=scratch, FLASHJIT_BACKEND="cpu")
        top = run_help(binary, ["--help"], env)
        listed = top.split("commands:", 1)[1] if "commands:" in top else ""
        commands = re.findall(r"^  ([a-z][a-z-]*)\s", listed, flags=re.M)
        if not commands:
            sys.exit("man_commands: `flashjit --help` lists no commands under 'commands:'")
        parts = ["[COMMANDS]\n",
                 "Each command's own text, as `flashjit COMMAND --help` prints it.\n"]
        for name in commands:
            parts.append(".SS %s\n" % name)
            parts.append(roff_verbatim(run_help(binary, [name, "--help"], env)))
    parts.append("[SEE ALSO]\n")
    parts.append("The library's API and its documentation: the installed header flashjit.h. "
                 "Measured figures, the tuning file and the semantics: the docs/ directory of "
                 "flashjit's source.\n")
    with open(output, "w", encoding="utf-8") as f:
        f.write("".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
