"""The fenced code blocks of README.md and docs/*.md, and how the docs test treats each one.

Every block either runs (a ```python or ```sh block with no marker) or carries a marker on the
line just before its opening fence, an HTML comment that does not show when rendered::

    <!-- example: fragment -->  code or configuration that is part of something larger: a piece
                                of a program, a configuration file, a query, a command synopsis
    <!-- example: output -->    text to read, not to run: what a command printed, a transcript of
                                commands with their output, a file's or a node's content, a diagram
    <!-- example: manual -->    a command a person runs by hand: it installs or starts things that
                                keep running, or runs the test suite or a benchmark

and one that runs a block in a language of its own::

    <!-- example: transcript -->  commands (``$ `` lines) with their output: the commands run in
                                  order, each must exit 0; the output shown is not compared

Text after the kind is a free comment (``<!-- example: manual: starts a broker -->``). The
convention is described for writers in docs/contributing.md. This module only reads and
classifies; ``tests/integration/test_docs_examples.py`` runs the runnable blocks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Markers a block may carry, and what each means (quoted in failure messages).
MARKS = {
    "fragment": "code or configuration that is part of something larger",
    "output": "text to read, not to run: output, a transcript, a file's content, a diagram",
    "manual": "a command a person runs by hand: it installs or starts things that keep "
              "running, or runs the test suite or a benchmark",
}
#: An explicit marker for a block that runs (the default for the languages below).
RUN = "run"
#: The marker of a transcript whose ``$`` commands run.
TRANSCRIPT = "transcript"
#: Fence languages the test runs when the block has no marker.
RUNNABLE = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh"}

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_MARK = re.compile(r"^\s*<!--\s*example:\s*(?P<kind>[a-z-]+)\b(?P<note>.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: ``line`` is the 1-based line of its opening fence."""

    path: Path
    line: int
    lang: str
    code: str
    #: The marker's kind (``fragment``, ``output``, ``manual``, ``run``) or None without one.
    mark: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        """True when the docs test runs this block."""
        if self.mark is None:
            return self.lang in RUNNABLE
        return self.mark in (RUN, TRANSCRIPT)

    @property
    def runner(self) -> str:
        """``python``, ``sh`` or ``transcript``: how the block runs (only for blocks that run)."""
        return TRANSCRIPT if self.mark == TRANSCRIPT else RUNNABLE[self.lang]

    def commands(self) -> list[str]:
        """A transcript's commands: each ``$ `` line, with the lines it continues onto (a
        trailing backslash); the other lines are output."""
        found: list[str] = []
        continued = False
        for line in self.code.splitlines():
            if continued:
                found[-1] += "\n" + line
            elif line.startswith("$ "):
                found.append(line[2:])
            else:
                continue
            continued = line.endswith("\\")
        return found


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md, then every page of docs/, sorted: the files whose examples are checked."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, in order (an unclosed fence runs to the end)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    found = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence = m.group("fence")
        lang = (m.group("info").strip().split() or [""])[0].lower()
        end = i + 1
        while end < len(lines) and not (lines[end].strip().startswith(fence[0] * len(fence))
                                        and not lines[end].strip().strip(fence[0])):
            end += 1
        mark = _MARK.match(lines[i - 1]) if i > 0 else None
        found.append(Block(path, i + 1, lang, "\n".join(lines[i + 1:end]) + "\n",
                           mark.group("kind") if mark else None))
        i = end + 1
    return found


def all_blocks(root: Path = ROOT) -> list[Block]:
    return [b for path in doc_files(root) for b in blocks_of(path)]


def problem(block: Block) -> str | None:
    """Why ``block`` is neither runnable nor properly marked, as an instruction to the writer;
    None when it is fine."""
    kinds = ", ".join(f"`<!-- example: {k} -->` ({v})" for k, v in MARKS.items())
    if block.mark is not None and block.mark not in (RUN, TRANSCRIPT) and block.mark not in MARKS:
        return (f"{block.where}: unknown marker 'example: {block.mark}'; use one of {kinds}, "
                f"`<!-- example: transcript -->` (its `$ ` commands run), or no marker for a "
                f"```python or ```sh block that runs (docs/contributing.md)")
    if block.mark == TRANSCRIPT and not block.commands():
        return (f"{block.where}: marked 'example: transcript' but has no `$ ` command line "
                f"(docs/contributing.md)")
    if block.mark == RUN and block.lang not in RUNNABLE:
        return (f"{block.where}: marked 'example: run' but its fence says "
                f"'{block.lang or '(no language)'}'; only ```python and ```sh blocks run "
                f"(docs/contributing.md)")
    if block.mark is None and block.lang not in RUNNABLE:
        return (f"{block.where}: this ```{block.lang} block is not run by the docs test and has "
                f"no marker. Put one of {kinds} on the line just before its opening fence "
                f"(docs/contributing.md)")
    return None


#: The quickstart cluster's addresses (scripts/quickstart.sh), which the examples use.
QUICKSTART_BROKERS = ("127.0.0.1:9092", "127.0.0.1:9093", "127.0.0.1:9094")
QUICKSTART_METRICS = ("127.0.0.1:9404", "127.0.0.1:9405", "127.0.0.1:9406")


def with_addresses(code: str, mapping: dict[str, str]) -> str:
    """``code`` with each documented address replaced by the test cluster's (whole addresses
    only: ``127.0.0.1:90921`` is left alone)."""
    if not mapping:
        return code
    pattern = re.compile("(?:" + "|".join(re.escape(a) for a in mapping) + r")(?!\d)")
    return pattern.sub(lambda m: mapping[m.group(0)], code)
