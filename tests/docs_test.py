"""The README and docs/ say what is true: the README is a front door (at most 250 lines, the two
commands a newcomer runs, every lesson), every relative link and anchor leads somewhere, every
program they name is built, every docs page is reachable from the README, and the architecture's
table has a row for every op.

Usage: docs_test.py SOURCE_DIR BIN_DIR
"""
import pathlib
import re
import sys

README_LINES = 250
LINK = re.compile(r"\]\(([^)\s]+)\)")
PROGRAM = re.compile(r"build/bin/([A-Za-z0-9_]+)")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", path.read_text(), re.M)}


def check_links(page, failures):
    """Every relative link of `page` names a file that exists, and a heading where it has #anchor."""
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        file, _, anchor = target.partition("#")
        where = (page.parent / file).resolve() if file else page
        if not where.exists():
            failures.append(f"{page.name}: link to {target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            failures.append(f"{page.name}: link to {target}: no heading makes #{anchor}")


def main(source, bin_dir):
    readme = source / "README.md"
    text = readme.read_text()
    docs = sorted((source / "docs").glob("*.md"))
    failures = []

    lines = text.count("\n")
    if lines > README_LINES:
        failures.append(f"README.md: {lines} lines, over {README_LINES}: move the detail to docs/")

    # The two commands, each on a line of its own, in this order (CI and scripts/fresh-root run
    # them as written)
    commands = re.findall(r"^scripts/setup.*$", text, re.M)
    if len(commands) != 2 or not commands[0].startswith("scripts/setup && build/bin/") \
            or not commands[1].startswith("scripts/setup --tests && ctest --test-dir build"):
        failures.append(f"README.md: expected the two commands (lessons, then tests), found {commands}")
    if not (source / "scripts" / "setup").exists():
        failures.append("scripts/setup: missing")

    # Every program named is one the build makes
    for page in [readme, *docs]:
        for program in sorted(set(PROGRAM.findall(page.read_text()))):
            if not (bin_dir / program).exists():
                failures.append(f"{page.name}: names build/bin/{program}, which the build does not make")

    # Every lesson, C++ and Python, is in the README's table
    lessons = [p.name for p in bin_dir.glob("tutorial_*")]
    lessons += [f"tutorials/python/{p.name}" for p in (source / "tutorials" / "python").glob("*.py")]
    for lesson in sorted(lessons):
        if lesson not in text:
            failures.append(f"README.md: lesson {lesson} is not in the lessons table")

    # Links lead somewhere; every page of docs/ is reachable from the README, directly or through
    # another page
    for page in [readme, *docs]:
        check_links(page, failures)
    reached, frontier = set(), [readme]
    while frontier:
        page = frontier.pop()
        for target in LINK.findall(page.read_text()):
            file = target.partition("#")[0]
            if file.endswith(".md") and not re.match(r"[a-z]+:", file):
                linked = (page.parent / file).resolve()
                if linked.exists() and linked not in reached:
                    reached.add(linked)
                    frontier.append(linked)
    for page in docs:
        if page.resolve() not in reached:
            failures.append(f"docs/{page.name}: no link leads to it from the README")

    # One row per op of the table of ops (engine/vulkan/ops.def) in the architecture's table
    architecture = (source / "docs" / "architecture.md").read_text()
    rows = set(re.findall(r"^\| `([a-z_]+)` \| `reference::", architecture, re.M))
    table = (source / "engine" / "vulkan" / "ops.def").read_text()
    ops = set(re.findall(r"^VKATTN_OP\(([a-z_0-9]+),", table, re.M))
    for op in sorted(ops - rows):
        failures.append(f"docs/architecture.md: no row for the op {op} (engine/vulkan/ops.def)")
    for op in sorted(rows - ops):
        failures.append(f"docs/architecture.md: a row for {op}, which engine/vulkan/ops.def does not have")

    for failure in failures:
        print(failure)
    print(f"README.md: {lines} lines; {len(docs)} docs pages; {len(rows)} ops in the table; "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: docs_test.py SOURCE_DIR BIN_DIR")
    sys.exit(main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])))
