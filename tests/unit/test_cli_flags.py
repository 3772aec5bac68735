"""`sluice` names a close option when a flag is misspelled, before argparse's own checks."""

from __future__ import annotations

import pytest

from sluice_tools.cli import main


@pytest.mark.parametrize("argv, wrong, right", [
    (["topics", "list", "--bootstrap-servers", "127.0.0.1:1"],
     "--bootstrap-servers", "--bootstrap-server"),
    (["consume", "--bootstrap-server", "h:1", "--topic", "t", "--group", "g",
      "--max-mesages=3"], "--max-mesages", "--max-messages"),
    (["groups", "describe", "--bootstrap-servers", "h:1", "--group", "g"],
     "--bootstrap-servers", "--bootstrap-server"),
])
def test_a_misspelled_flag_is_named_with_the_close_one(capsys, argv, wrong, right):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"unknown option {wrong}; did you mean {right}?" in err
    assert "usage: sluice " + argv[0] in err  # the command's own usage, not the top level's
    assert "is required" not in err


def test_abbreviations_argparse_accepts_are_left_to_it(capsys):
    # --boot abbreviates --bootstrap-server: no hint; argparse parses it, and connecting to a
    # closed port fails as a connection error (exit 1), not a usage error.
    assert main(["topics", "list", "--boot", "127.0.0.1:1"]) == 1
    assert "did you mean" not in capsys.readouterr().err


def test_a_flag_far_from_any_is_left_to_argparse(capsys):
    assert main(["topics", "list", "--bootstrap-server", "h:1", "--frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "did you mean" not in err and "unrecognized arguments: --frobnicate" in err


@pytest.mark.parametrize("prop, says", [
    ("default.api.timeout=1000", "unknown consumer config key 'default.api.timeout' (did you "
                                 "mean 'default.api.timeout.ms'?)"),
    ("default.api.timeout.ms=soon", "default.api.timeout.ms"),
    ("default.api.timeout.ms", "--consumer-property expects key=value"),
])
def test_a_bad_consumer_property_is_bad_usage_before_anything_starts(capsys, prop, says):
    argv = ["consume", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--group", "g",
            "--consumer-property", prop]
    assert main(argv) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["configs", "describe", "--bootstrap-server", "h:9092", "--topic", "t"],
    ["configs", "alter", "--bootstrap-server", "h:9092", "--topic", "t", "--set", "a=1"],
    ["groups", "list", "--bootstrap-server", "h:9092"],
    ["topics", "list", "--bootstrap-server", "h:9092"],
    ["topics", "list", "--zookeeper", "h:2181"],
    ["users", "list", "--bootstrap-server", "h:9092"],
    ["acls", "list", "--bootstrap-server", "h:9092"],
])
def test_every_command_through_the_admin_client_builds_it_from_its_own_flags(argv):
    """Commands that reach the cluster through the brokers only have no ZooKeeper flags; the
    admin client is still built for them (a merge once made that an AttributeError)."""
    from sluice_tools import cli

    args = cli.build_parser().parse_args(argv)
    client = cli._client(args)
    assert (client.bootstrap_servers, client.zookeeper) in (("h:9092", None), (None, "h:2181"))


def test_every_command_has_exactly_one_handler():
    import argparse

    from sluice_tools import cli

    subs = next(a for a in cli.build_parser()._actions
                if isinstance(a, argparse._SubParsersAction))
    assert not set(cli._COMMANDS) & set(cli._ADMIN_COMMANDS)
    assert set(cli._COMMANDS) | set(cli._ADMIN_COMMANDS) == set(subs.choices)
