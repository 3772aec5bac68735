"""Every code example of README.md and docs/ runs as written, or is marked as not meant to run.

The runnable blocks (```python and ```sh blocks without a marker, and the ``$`` commands of
blocks marked ``<!-- example: transcript -->``; see tests/support/doc_examples.py and
docs/contributing.md) run one after another, each in its own process, against one cluster
started for this module: three broker processes that keep their
metadata in their own quorum, like the quickstart's. Before the first block runs, the module
does what the quickstart does that the examples rely on: it creates the topic ``quickstart``
(6 partitions, replication factor 3, ``min.insync.replicas=2``) and writes messages to it.
The quickstart's addresses in a block (brokers 127.0.0.1:9092-9094, metrics 9404-9406) are
replaced by the test cluster's; nothing else in a block is changed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cluster import ROOT
from tests.support.doc_examples import (
    QUICKSTART_BROKERS,
    QUICKSTART_METRICS,
    Block,
    all_blocks,
    blocks_of,
    problem,
    with_addresses,
)
from tests.support.procs import ProcessCluster

#: Bound on one example's run; an example must end by itself well within it.
EXAMPLE_TIMEOUT = 90.0
#: Messages the setup writes to ``quickstart`` (the quickstart writes 100,000; the examples read
#: fewer than this).
SETUP_MESSAGES = 1000

RUNNABLE = [b for b in all_blocks() if b.runs and problem(b) is None]

HOW_TO_FIX = ("Fix the example so it runs as written against the quickstart cluster "
              "(scripts/quickstart.sh: brokers 127.0.0.1:9092-9094, topic 'quickstart') and ends "
              "by itself, or, if it is not meant to run, mark it with `<!-- example: fragment -->`,"
              " `<!-- example: output -->` or `<!-- example: manual -->` on the line before its "
              "opening fence instead (docs/contributing.md).")


def _run(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float,
         stdin: str | None = None) -> tuple[int | None, str]:
    """Run ``args`` in a new session; ``(exit status, output)``, status None after a timeout
    (the whole process group is killed then, so nothing outlives the test)."""
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdin=subprocess.PIPE if stdin else None,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(stdin, timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out


def _env() -> dict[str, str]:
    """The examples' environment: the repository importable, the venv's commands on PATH."""
    venv_bin = str(Path(sys.executable).parent)
    return {**os.environ, "PYTHONPATH": str(ROOT),
            "PATH": venv_bin + os.pathsep + os.environ.get("PATH", "")}


_SETUP = """
import sys
from consumer_client.blocking_producer import BlockingProducer

with BlockingProducer({"bootstrap.servers": sys.argv[1]}) as producer:
    futures = [producer.send("quickstart", b"quickstart message %08d" % i)
               for i in range(1, int(sys.argv[2]) + 1)]
    for f in futures:
        f.get(timeout=60)
"""


@pytest.fixture(scope="module")
def docs_cluster(tmp_path_factory):
    """The quickstart's cluster, on free ports: ``(cluster, {documented address: real one})``."""
    cluster = ProcessCluster(None, tmp_path_factory.mktemp("docs-cluster"), size=3, quorum=True,
                             metrics=True, extra={
                                 "group.min.session.timeout.ms": "1000",
                                 "group.initial.rebalance.delay.ms": "300",
                                 "rebalance.backoff.ms": "300",
                                 "offsets.commit.interval.ms": "300"})
    try:
        cluster.start()
        cluster.wait_registered(timeout=60)
        brokers = [cluster.brokers[i] for i in (1, 2, 3)]
        mapping = dict(zip(QUICKSTART_BROKERS, (b.address for b in brokers), strict=True))
        mapping.update(zip(QUICKSTART_METRICS, (f"127.0.0.1:{b.metrics_port}" for b in brokers),
                           strict=True))
        env, work = _env(), tmp_path_factory.mktemp("docs-setup")
        status, out = _run(["sluice", "topics", "create", "--bootstrap-server", cluster.bootstrap,
                            "--topic", "quickstart", "--partitions", "6",
                            "--replication-factor", "3", "--config", "min.insync.replicas=2"],
                           cwd=work, env=env, timeout=60)
        assert status == 0, f"setup: creating topic 'quickstart' failed ({status}): {out}"
        status, out = _run([sys.executable, "-c", _SETUP, cluster.bootstrap,
                            str(SETUP_MESSAGES)], cwd=work, env=env, timeout=60)
        assert status == 0, f"setup: producing to 'quickstart' failed ({status}): {out}"
        yield cluster, mapping
    finally:
        cluster.stop()


def test_every_example_runs_or_is_marked():
    """No block of README.md or docs/ is left unchecked: each runs below or says why not."""
    problems = [p for p in map(problem, all_blocks()) if p is not None]
    assert not problems, "\n".join(problems)


def test_an_unmarked_block_is_reported_with_its_file_line_and_the_fix(tmp_path, monkeypatch):
    import tests.support.doc_examples as doc_examples

    monkeypatch.setattr(doc_examples, "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# x\n\n```sh\ntrue\n```\n")
    (tmp_path / "docs" / "page.md").write_text(
        "text\n\n```json\n{}\n```\n\n<!-- example: output -->\n```\nok\n```\n\n"
        "<!-- example: outptu -->\n```\nx\n```\n\n<!-- example: run -->\n```properties\na=1\n```\n"
        "\n<!-- example: fragment -->\n```python\nf(x)\n```\n")
    blocks = doc_examples.all_blocks(tmp_path)
    assert [(b.where, b.lang, b.mark, b.runs) for b in blocks] == [
        ("README.md:3", "sh", None, True),
        ("docs/page.md:3", "json", None, False),
        ("docs/page.md:8", "", "output", False),
        ("docs/page.md:13", "", "outptu", False),
        ("docs/page.md:18", "properties", "run", True),
        ("docs/page.md:23", "python", "fragment", False),
    ]
    problems = [doc_examples.problem(b) for b in blocks]
    assert problems[0] is None and problems[2] is None and problems[5] is None
    assert problems[1].startswith("docs/page.md:3: this ```json block is not run")
    assert "<!-- example: fragment -->" in problems[1]
    assert "line just before its opening fence" in problems[1]
    assert problems[3].startswith("docs/page.md:13: unknown marker 'example: outptu'")
    assert problems[4].startswith("docs/page.md:18: marked 'example: run' but its fence says "
                                  "'properties'")


def test_a_transcript_runs_its_dollar_lines_and_needs_one(tmp_path, monkeypatch):
    import tests.support.doc_examples as doc_examples

    monkeypatch.setattr(doc_examples, "ROOT", tmp_path)

    page = tmp_path / "page.md"
    page.write_text("<!-- example: transcript -->\n```\n$ sluice a \\\n    --b c\nout $ x\n"
                    "$ sluice d\n$ e\n```\n\n<!-- example: transcript -->\n```\nno command\n```\n")
    good, bad = doc_examples.blocks_of(page)
    assert good.runs and good.runner == "transcript"
    assert good.commands() == ["sluice a \\\n    --b c", "sluice d", "e"]
    assert doc_examples.problem(good) is None
    assert doc_examples.problem(bad) == ("page.md:11: marked 'example: transcript' but has no "
                                         "`$ ` command line (docs/contributing.md)")


def test_addresses_are_replaced_whole():
    mapping = {"127.0.0.1:9092": "127.0.0.1:40001", "127.0.0.1:9093": "127.0.0.1:40002"}
    assert with_addresses('"127.0.0.1:9092,127.0.0.1:9093" 127.0.0.1:90921', mapping) == \
        '"127.0.0.1:40001,127.0.0.1:40002" 127.0.0.1:90921'


def test_the_readme_setup_commands_are_not_run():
    """scripts/quickstart.sh and scripts/test.sh install and start things: never run here."""
    readme = blocks_of(ROOT / "README.md")
    assert {b.code.strip() for b in readme if b.code.strip().startswith("scripts/")} == \
        {"scripts/quickstart.sh", "scripts/test.sh"}
    assert not [b.where for b in readme if b.runs]


@pytest.mark.slow  # starts three broker processes
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.where for b in RUNNABLE])
def test_example_runs_as_written(block: Block, docs_cluster, tmp_path):
    _, mapping = docs_cluster
    code = with_addresses(block.code, mapping)
    env = _env()
    if block.runner == "python":
        script = tmp_path / "example.py"
        script.write_text(code)
        status, out = _run([sys.executable, str(script)], cwd=tmp_path, env=env,
                           timeout=EXAMPLE_TIMEOUT)
    elif block.runner == "sh":
        # Shell examples are written to run from the repository's root.
        status, out = _run(["bash", "-e", "-o", "pipefail", "-s"], cwd=ROOT, env=env,
                           timeout=EXAMPLE_TIMEOUT, stdin=code)
    else:
        # A transcript: its commands in order, each on its own; the output shown in the docs
        # depends on the cluster (leaders, offsets) and is not compared.
        for command in block.commands():
            command = with_addresses(command, mapping)
            status, out = _run(["bash", "-e", "-o", "pipefail", "-c", command], cwd=ROOT,
                               env=env, timeout=EXAMPLE_TIMEOUT)
            if status != 0:
                break
        code_desc = f"transcript's command `$ {command}`"
    if block.runner != "transcript":
        code_desc = f"```{block.lang} example"
    tail = "\n".join(out.splitlines()[-40:])
    if status is None:
        pytest.fail(f"{block.where}: the {code_desc} did not finish within "
                    f"{EXAMPLE_TIMEOUT:.0f} s (an example must end by itself). {HOW_TO_FIX}\n"
                    f"--- its output ---\n{tail}")
    assert status == 0, (f"{block.where}: the {code_desc} exited with status "
                         f"{status}. {HOW_TO_FIX}\n--- its output ---\n{tail}")
