"""The Lua scripts: loaded once from scheduler/store/lua/, each prefixed with the
shared helpers in _lib.lua, and the return codes they share."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cache
from importlib import resources
from types import MappingProxyType

from scheduler.core.keys import JOB_DEFAULTS, TAG_END, KeyName, key_names
from scheduler.core.outbox import EVENT_TYPES, FAILED_OUTCOMES, JOB_OUTCOMES, SUCCESS_OUTCOMES

SCRIPT_NAMES = (
    "enqueue",
    "claim",
    "complete",
    "fail",
    "cancel",
    "extend_leases",
    "release",
    "prune",
    "upsert_cron",
    "fire_crons",
    "set_cron_paused",
    "remove_cron",
    "list_jobs",
    "retry_job",
    "delete_job",
    "reschedule_job",
    "advertise_worker",
    "forget_worker",
    "replay_dead_letter",
    "delete_dead_letter",
    "prune_dead_letters",
    "put_topic",
    "watch_job",
    "set_progress",
    "append_log",
    "copy_entry",
    "drop_entry",
    "known_topics",
    "forget_topic",
    "request_drain",
    "create_flow",
    "enqueue_many",
)

# Scripts that run another script's body as a local function of theirs, once per item:
# script -> (the function's name, the script whose body it is).
WRAPPED = {"enqueue_many": ("enqueue_one", "enqueue")}

# Fields per job returned by claim.lua, in order.
CLAIM_FIELDS = 18

PAYLOAD_CHUNK_FIELDS: tuple[str, ...] = tuple(f"p{i}" for i in range(1, 9))


class ScriptCode(IntEnum):
    """Negative returns of the scripts: a refused transition (documented in each script's
    header)."""

    LEASE_LOST = -1
    LEASE_ALIVE = -2
    NOT_FOUND = -3
    FINISHED = -4
    STALE = -5
    RUNNING = -6  # an attempt is in flight (a job operation that needs it settled first)
    WRONG_STATE = -7  # the job's state is not one the operation applies to
    DUPLICATE = -10
    KEY_REQUIRED = -11  # the topic's policy (key_strict_fifo) needs a key
    # a schedule declared beside a listener vs one of schedule_cron: neither takes the other's name
    OTHER_ORIGIN = -12
    WRONG_PARTITION = (
        -13
    )  # the job's topic lives on another partition (a topic-wide limit): re-sent there
    CONFLICT = (
        -14
    )  # a partition migration meets another job (or schedule) of the same name on the target
    UNKNOWN_PARENT = -15  # a job of `after=` does not exist: nothing stored (its id follows)


class SettleCode(IntEnum):
    """What complete.lua and fail.lua did with one attempt (a refusal is a ScriptCode)."""

    COMPLETED = 1
    CANCELLED = 2  # the job was cancelled while the attempt ran: it stays cancelled
    RETRY_SCHEDULED = 3
    FAILED = 4  # for good: no attempt left, or DoNotRetry


class EnqueueCode(IntEnum):
    """What enqueue.lua did with a new job (an existing id is ScriptCode.DUPLICATE)."""

    QUEUED = 1
    LEASED = 2  # leased to the caller's own worker at once
    REFUSED = 3  # a dedupe key or the topic's policy kept it out: the holder's id and the reason
    DEBOUNCED = 4  # the waiting holder took its payload and time (dedupe mode debounce)


class FlowCode(IntEnum):
    """What create_flow.lua did with a flow (a refusal of a node is a ScriptCode)."""

    CREATED = 1  # every node was created
    REFUSED = (
        3  # a node's topic's policy kept it out: the holder, the policy, the node; nothing stored
    )


class CancelCode(IntEnum):
    """What cancel.lua did (an unknown or finished job is a ScriptCode)."""

    CANCELLED = 1  # it was waiting or retrying
    CANCELLED_RUNNING = 2  # an attempt is in flight: it finishes, the job stays cancelled


class OperationCode(IntEnum):
    """What a job operation did (retry_job, delete_job, reschedule_job, replay_dead_letter,
    delete_dead_letter; a refusal is a ScriptCode)."""

    RETRIED = 1
    DELETED = 2
    RESCHEDULED = 3
    REPLAYED = 4


class ReportCode(IntEnum):
    """What set_progress.lua and append_log.lua did (a stale attempt is ScriptCode.LEASE_LOST)."""

    RECORDED = 1


class UpsertCode(IntEnum):
    """What upsert_cron.lua did with a schedule."""

    UPDATED = 0  # same trigger (expression and zone, or interval and jitter): the next fire is kept
    CREATED = 1
    RESCHEDULED = 2  # the trigger changed: the next fire is recomputed


class TopicCode(IntEnum):
    """What put_topic.lua did with a topic's configuration (its reply is {code, stored policy})."""

    CREATED = 1
    UPDATED = 2
    POLICY_LOCKED = 3  # the stored policy differs from the new one: nothing written


class DrainCode(IntEnum):
    """What request_drain.lua did with an operator's request that a worker drain and exit."""

    NO_WORKER = 0  # no live worker has that id: nothing written
    REQUESTED = 1
    ALREADY = 2  # requested before, or the worker is stopping already


class CopyCode(IntEnum):
    """What copy_entry.lua did with a job or schedule in a partition migration (a clash is
    ScriptCode.CONFLICT)."""

    PRESENT = 0  # an earlier run copied it already
    COPIED = 1


class DropCode(IntEnum):
    """What drop_entry.lua did with a job or schedule in a partition migration."""

    ABSENT = 0  # an earlier run dropped it already
    DROPPED = 1


class PauseCode(IntEnum):
    """What set_cron_paused.lua did (an unknown schedule is ScriptCode.NOT_FOUND)."""

    UNCHANGED = 0
    CHANGED = 1


SettleReply = SettleCode | ScriptCode


def settle_reply(code: int) -> SettleReply:
    """The enum member of a complete/fail reply (the store hands back plain ints)."""
    return SettleCode(code) if code > 0 else ScriptCode(code)


def script_source(name: str, audit: bool = True) -> str:
    """The full source of a script as sent to Redis: the compiled-in tables (defaults, chunk
    field names) and the helpers of _lib.lua, _flow.lua and _deps.lua that the body uses
    (directly or through another helper), then the body; the compiled-in constants (audit
    flag, claim fields per job, the names of lua_names) written in as literals (_inline).

    Only the helpers used: Redis runs a script's whole top level on every call, and
    each definition costs (measured here: about 8 us per call for all of _lib.lua,
    as much again for _flow.lua, against 12 us for an empty script).

    The flag is compiled in (two variants, two SHAs) so an audit-off namespace pays
    nothing for the outbox. Every process of a namespace must use the same setting.
    """
    lua = resources.files("scheduler.store") / "lua"
    values = "".join(
        (
            "local DEFAULTS = { "
            + ", ".join(f"{k} = {json.dumps(v)}" for k, v in JOB_DEFAULTS.items())
            + " }\n",
            "local CHUNK_FIELDS = { "
            + ", ".join(json.dumps(f) for f in PAYLOAD_CHUNK_FIELDS)
            + " }\n",
        )
    )
    body = (lua / f"{name}.lua").read_text()
    if name in WRAPPED:
        function, inner = WRAPPED[name]
        inner_body = (lua / f"{inner}.lua").read_text()
        body = f"local function {function}(KEYS, ARGV)\n{inner_body}end\n\n{body}"
    blocks = (
        _blocks(values)
        + _blocks((lua / "_lib.lua").read_text())
        + _blocks((lua / "_flow.lua").read_text())
        + _blocks((lua / "_deps.lua").read_text())
    )
    source = "".join(text for _, text in _used(blocks, body)) + "\n" + body
    return _inline(source, audit)


def _constants(audit: bool) -> dict[str, str]:
    """The compiled-in constants as Lua literals: the audit flag, the claim's fields per job
    and every name of lua_names."""
    literals = {"AUDIT": "true" if audit else "false", "CLAIM_FIELDS": str(CLAIM_FIELDS)}
    literals.update({name: json.dumps(text) for name, text in lua_names().items()})
    return literals


_CONSTANT = re.compile(r"\b(?:AUDIT|CLAIM_FIELDS|(?:K|EV|OUTCOME)_\w+|\w+_MARK)\b")


def _inline(source: str, audit: bool) -> str:
    """`source` with each compiled-in constant written as its literal where it is used, not
    as a local of the script's top level: a helper that captured such a local as an upvalue
    paid, on every call, a walk of every open upvalue when Redis ran the top level
    (bench/redis_instructions.py --per-call: enqueue's top level 98k -> 77k instructions per
    call, complete's 79k -> 63k, an empty script 36k)."""
    literals = _constants(audit)
    lines = []
    for line in source.splitlines(keepends=True):
        code, sep, comment = line.partition("--")
        code = _CONSTANT.sub(lambda m: literals.get(m.group(0), m.group(0)), code)
        lines.append(code + sep + comment)
    return "".join(lines)


def lua_names() -> Mapping[str, str]:
    """The names declared in Python that the scripts use, as Lua locals (each compiled into a
    script only when it uses it, as a constant: no cost per call): K_<NAME> each key name
    (scheduler/core/keys.py KeyName); JOB_MARK, PAYLOAD_MARK and LOGS_MARK, where a job's,
    its payload's and its log list's names follow the tag ('}:j:', ...); EV_<TYPE> each event
    type and OUTCOME_<NAME> each attempt outcome (scheduler/core/outbox.py), upper case, '.'
    as '_'. tests/unit/test_lua_names.py checks that the scripts name nothing else."""
    names = {f"K_{name}": text for name, text in key_names().items()}
    names["JOB_MARK"] = TAG_END + KeyName.JOB
    names["PAYLOAD_MARK"] = TAG_END + KeyName.PAYLOAD
    names["LOGS_MARK"] = TAG_END + KeyName.LOGS
    names["CHILDREN_MARK"] = TAG_END + KeyName.CHILDREN
    names["PARENT_RESULTS_MARK"] = TAG_END + KeyName.PARENT_RESULTS
    for prefix, texts in (
        ("EV", sorted(EVENT_TYPES)),
        ("OUTCOME", SUCCESS_OUTCOMES + FAILED_OUTCOMES + JOB_OUTCOMES),
    ):
        names.update({f"{prefix}_{t.upper().replace('.', '_')}": t for t in texts})
    return names


_DEFINITION = re.compile(r"local (?:function )?([A-Za-z_]\w*)")
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def _blocks(text: str) -> list[tuple[str, str]]:
    """The top-level definitions of a helper file, in order: (name, text with the comment
    lines above it). A definition starts at a column-0 `local`; indented lines, blank
    lines and a column-0 `end` or `}` continue it; column-0 comments open the next one."""
    blocks: list[tuple[str, str]] = []
    comments: list[str] = []
    for line in text.splitlines(keepends=True):
        start = _DEFINITION.match(line)
        if start:
            blocks.append((start.group(1), "".join(comments) + line))
            comments = []
        elif (
            blocks
            and not comments
            and (line[:1] in (" ", "\t", "\n", "}") or line.startswith("end"))
        ):
            blocks[-1] = (blocks[-1][0], blocks[-1][1] + line)
        else:
            comments.append(line)
    return blocks


def _code_names(text: str) -> set[str]:
    """The identifiers `text` uses, outside comments."""
    return set(_NAME.findall(re.sub(r"--[^\n]*", "", text)))


def _used(blocks: list[tuple[str, str]], body: str) -> list[tuple[str, str]]:
    """The blocks the body needs, with the ones they need in turn, in their order."""
    by_name = dict(blocks)
    needed, todo = set(), list(_code_names(body) & by_name.keys())
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += list(_code_names(by_name[name]) & by_name.keys())
    return [(n, t) for n, t in blocks if n in needed]


@dataclass(frozen=True)
class Script:
    """One script's source as sent to Redis and its SHA1 (for EVALSHA)."""

    source: str
    sha: str

    @classmethod
    def of(cls, source: str) -> Script:
        return cls(source, hashlib.sha1(source.encode()).hexdigest())


class Scripts:
    """Every script, compiled for one audit setting (run with EVALSHA, loaded on NOSCRIPT)."""

    def __init__(self, audit: bool = True) -> None:
        self._scripts = dict(_compiled(audit))  # (a store's own: a test may swap one)

    def __getitem__(self, name: str) -> Script:
        return self._scripts[name]


@cache
def _compiled(audit: bool) -> Mapping[str, Script]:
    """Every script for one audit setting, compiled once per process (~50 ms: every store of
    the process shares them, read only)."""
    return MappingProxyType({n: Script.of(script_source(n, audit)) for n in SCRIPT_NAMES})
