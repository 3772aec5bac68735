"""The ``quorum-state`` file: the design's ``QuorumStateMessage`` as JSON.

It holds what a node must never forget across a restart: the highest epoch it has seen, whom it
voted for in that epoch, and the leader it knew, plus the voter set as of ``applied_offset``
(only committed voter assignments are persisted here; newer, uncommitted ones are
found again by scanning the log forward from ``applied_offset``).

The core never writes the file itself: it hands a :class:`QuorumState` to its driver
(``Effects.quorum_state``), which must call :func:`write_quorum_state` before sending any
message of the same step. Writes go through the project's atomic checkpoint writer (temp file,
fsync, rename, fsync of the directory), so a crash leaves the old file or the new one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from broker_core.log.checkpoints import write_atomically

FILE_NAME = "quorum-state"
VERSION = 0
NO_ID = -1


class QuorumStateError(ValueError):
    """A quorum-state file that cannot be read; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class QuorumState:
    """One node's durable election state (the design's ``QuorumStateMessage``).

    - ``leader_epoch``: the highest epoch the node has seen; never decreases.
    - ``leader_id``: the leader of ``leader_epoch`` if known, else -1.
    - ``voted_id``: whom the node voted for in ``leader_epoch`` (itself when it stood), else -1.
      At most one vote per epoch: once written it only changes with a new epoch.
    - ``applied_offset``: the log offset up to which ``current_voters`` / ``target_voters``
      reflect committed voter assignments (-1: none yet, the bootstrap voters apply).
    - ``current_voters`` / ``target_voters``: as of ``applied_offset``.
    """

    cluster_id: str
    leader_id: int
    leader_epoch: int
    voted_id: int
    applied_offset: int
    current_voters: tuple[int, ...]
    target_voters: tuple[int, ...] | None = None

    def to_json(self) -> str:
        # Field names are the design's, so the file reads like the message it stands for.
        return json.dumps({
            "version": VERSION,
            "ClusterId": self.cluster_id,
            "LeaderId": self.leader_id,
            "LeaderEpoch": self.leader_epoch,
            "VotedId": self.voted_id,
            "AppliedOffset": self.applied_offset,
            "CurrentVoters": [{"VoterId": v} for v in self.current_voters],
            "TargetVoters": (None if self.target_voters is None
                             else [{"VoterId": v} for v in self.target_voters]),
        }, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, what: str = "quorum-state") -> QuorumState:
        try:
            doc = json.loads(text)
            if doc.get("version") != VERSION:
                raise QuorumStateError(f"{what}: unsupported version {doc.get('version')!r}")
            target = doc["TargetVoters"]
            state = cls(
                cluster_id=_typed(doc["ClusterId"], str, what, "ClusterId"),
                leader_id=_typed(doc["LeaderId"], int, what, "LeaderId"),
                leader_epoch=_typed(doc["LeaderEpoch"], int, what, "LeaderEpoch"),
                voted_id=_typed(doc["VotedId"], int, what, "VotedId"),
                applied_offset=_typed(doc["AppliedOffset"], int, what, "AppliedOffset"),
                current_voters=tuple(_typed(v["VoterId"], int, what, "VoterId")
                                     for v in doc["CurrentVoters"]),
                target_voters=(None if target is None else
                               tuple(_typed(v["VoterId"], int, what, "VoterId") for v in target)),
            )
        except QuorumStateError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise QuorumStateError(f"{what}: malformed quorum state ({e!r})") from None
        if state.leader_epoch < 0:
            raise QuorumStateError(f"{what}: negative LeaderEpoch {state.leader_epoch}")
        return state


def _typed(value: object, kind: type, what: str, field: str):
    # bool is an int in Python; a JSON true in an id field is a corrupt file, not voter 1.
    if not isinstance(value, kind) or isinstance(value, bool):
        raise QuorumStateError(f"{what}: field {field} should be {kind.__name__}, got {value!r}")
    return value


def write_quorum_state(directory: Path, state: QuorumState) -> None:
    """Durably replace ``directory/quorum-state`` with ``state``. BLOCKING (two fsyncs)."""
    write_atomically(directory / FILE_NAME, state.to_json(), sync=True)


def read_quorum_state(directory: Path) -> QuorumState | None:
    """The persisted state, or ``None`` when the node has never written one (a fresh node).
    Raises :class:`QuorumStateError` for a file that exists but cannot be trusted: starting
    from scratch instead could make the node vote twice in an epoch."""
    path = directory / FILE_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise QuorumStateError(f"{path}: not a text file") from None
    return QuorumState.from_json(text, str(path))
