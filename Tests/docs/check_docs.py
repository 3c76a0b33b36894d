"""Docs that cannot drift: doc/architecture.md's module table names every
target of the package (but its test targets), and README.md and doc/ link
nothing that is not in the repository.

Run by `make test` with the package's description on standard input
(`swift package dump-package`). Prints what is wrong and exits 1, or says
what it checked.
"""

import fnmatch
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def listed_modules(text):
    """The names (globs allowed: `*Fuzz`) in the first cells of the module table."""
    names = []
    for line in text.splitlines():
        if line.startswith("| `"):
            names += re.findall(r"`([^`]+)`", line.split("|")[1])
    return names


def broken_links(path):
    """The links of a Markdown file that leave the repository or name nothing in it."""
    problems = []
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        resolved = os.path.realpath(os.path.join(os.path.dirname(path), target.split("#")[0]))
        where = os.path.relpath(path, ROOT)
        if os.path.commonpath([resolved, ROOT]) != ROOT:
            problems.append("%s links %s, outside the repository" % (where, target))
        elif not os.path.exists(resolved):
            problems.append("%s links %s, which does not exist" % (where, target))
    return problems


def main():
    package = json.load(sys.stdin)
    targets = [t["name"] for t in package["targets"] if t["type"] != "test"]
    with open(os.path.join(ROOT, "doc", "architecture.md"), encoding="utf-8") as handle:
        listed = listed_modules(handle.read())
    problems = ["doc/architecture.md's module table does not list the target %s" % name
                for name in targets if not any(fnmatch.fnmatchcase(name, pattern) for pattern in listed)]
    documents = [os.path.join(ROOT, "README.md")]
    for directory, _, files in os.walk(os.path.join(ROOT, "doc")):
        documents += [os.path.join(directory, name) for name in sorted(files) if name.endswith(".md")]
    for document in documents:
        problems += broken_links(document)
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print("docs: the module table lists the package's %d targets; %d documents link only within the repository"
          % (len(targets), len(documents)))


if __name__ == "__main__":
    main()
