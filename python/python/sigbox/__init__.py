"""sigbox: the checkpoint of a crash-safe, file-based signal broker for agent pipelines.

    import sigbox

    with sigbox.Checkpoint("signals", "Executor") as cp:
        for signal in cp.poll():
            if signal.type is sigbox.SignalType.ABORT:
                ...

A checkpoint holds the agent's presence while open. What `poll` and `wait` return stays in
flight until acknowledged: by `ack()`, by the next `poll`/`wait`, or by leaving the `with`
block without an exception. A process that dies first gets them again at its next checkpoint,
marked (`Signal.redelivery > 0`).

An agent that needs a person's yes asks, and a person answers from anywhere (spec/asks.md):

    with sigbox.Checkpoint("signals", "Executor") as cp:
        outcome = cp.ask("deploy to prod?", timeout=600, key="deploy-42")
        if outcome.choice == "approve":
            ...

    sigbox.answer("signals", "Executor.deploy-42", "approve", "go ahead", from_="alice")
"""

from __future__ import annotations

import asyncio
import enum
import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Optional, Union

from . import _sigbox
from ._sigbox import InvalidSignalError, MailboxError, SigboxError

Root = Union[str, "os.PathLike[str]", bytes]
"""A mailbox root: a str, a path-like (pathlib.Path), or bytes (any file name, as the OS has it)."""


def _root(root: Root) -> str:
    # os.fsdecode keeps bytes that are not UTF-8 (surrogate escapes), and the native side
    # encodes them back: every root the OS can name works.
    return os.fsdecode(os.fspath(root))


def _timeout(timeout: Optional[float]) -> Optional[float]:
    if timeout is not None and math.isinf(timeout) and timeout > 0:
        return None  # for ever, as None
    if timeout is not None and not (math.isfinite(timeout) and timeout >= 0):
        reason = f"timeout {timeout}: a number of seconds, 0 or more, or None"
        e = InvalidSignalError(reason)
        e.reason, e.path = reason, None
        raise e
    return timeout

__all__ = [
    "AnswerRefused",
    "Checkpoint",
    "Outcome",
    "InvalidSignalError",
    "Root",
    "MailboxError",
    "Signal",
    "SignalType",
    "SigboxError",
    "answer",
    "init",
    "send",
]


class SignalType(str, enum.Enum):
    """A signal's type (STOP is delivered as ABORT)."""

    STEER = "STEER"
    INFO = "INFO"
    PAUSE = "PAUSE"
    ABORT = "ABORT"
    APPROVE = "APPROVE"
    SKIP = "SKIP"
    RESUME = "RESUME"


def _datetime(text: Optional[str]) -> Optional[datetime]:
    if text is None:
        return None
    # The instant keeps the offset the sender wrote. Python 3.9's fromisoformat wants
    # `+00:00`, never `Z`, and 0, 3 or 6 fractional digits: a datetime holds microseconds.
    text = text.replace("Z", "+00:00")
    if text[19:20] == ".":
        end = 20
        while end < len(text) and text[end].isdigit():
            end += 1
        text = text[:20] + text[20:end][:6].ljust(6, "0") + text[end:]
    return datetime.fromisoformat(text)


@dataclass(frozen=True)
class Signal:
    """A delivered signal, immutable."""

    id: str
    """Its identity for its whole life (what `send` returned)."""
    type: SignalType
    target: Optional[str]
    """An agent, "ALL", or None (no target)."""
    message: Optional[str]
    sender: Optional[str]
    """Who sent it (the body's `from`)."""
    iteration: Optional[int]
    created_at: Optional[datetime]
    """When it was created: timezone-aware, in the offset the sender wrote, or None when the
    body does not say."""
    redelivery: int
    """0, or how many times it was given again after a consumer stopped before the hand-over."""
    path: str
    """Where the file is once this delivery is acknowledged (by `ack()`, the next `poll` or
    `wait`, or leaving the `with` block): its record in `processed/`; for a broadcast, its file
    in `inputs/`, where it stays until the orchestrator archives it into `processed/`."""
    fields: Dict[str, Any] = field(hash=False)
    """The whole body, unknown fields included: this signal's own copy."""

    @classmethod
    def _of(cls, d: dict) -> "Signal":
        return cls(
            id=d["id"],
            type=SignalType(d["type"]),
            target=d["target"],
            message=d["message"],
            sender=d["from"],
            iteration=d["iteration"],
            created_at=_datetime(d["created_at"]),
            redelivery=d["redelivery"],
            path=d["path"],
            fields=json.loads(d["fields"]),
        )


class Checkpoint:
    """One agent's handle on a mailbox: a context manager that holds the agent's presence."""

    def __init__(self, root: Root, agent: str, state: Optional[str] = None) -> None:
        self._native = _sigbox.Checkpoint(_root(root), agent, state)
        self._root, self._agent = _root(root), agent
        # Signals a cancelled `wait_async` claimed after its caller stopped listening: given
        # by the next call, never acknowledged unseen.
        self._held: List[Signal] = []

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        # Left normally: what was returned was acted on. On an exception it was perhaps not:
        # the next checkpoint of the agent gives it again, marked.
        self.close(ack=exc_type is None and not self._held)

    def _take(self, got: List[dict]) -> List[Signal]:
        held, self._held = self._held, []
        out = held + [Signal._of(d) for d in got]
        # Confirmed and returned in one call: an interrupt landing before it leaves the
        # native side holding them, and the next call returns them again.
        return self._native.confirm(out)  # type: ignore[no-any-return]

    def poll(self) -> List[Signal]:
        """One checkpoint pass: the delivered signals, oldest first (the GIL is released)."""
        return self._take(self._native.poll() if not self._held else [])

    def wait(self, timeout: Optional[float] = None) -> List[Signal]:
        """Blocks, sleeping on filesystem events with the GIL released, until a signal is
        delivered or `timeout` seconds pass (None: for ever). Ctrl-C raises KeyboardInterrupt
        within 0.1 s, never losing a signal already claimed."""
        if self._held:
            return self._take([])
        return self._take(self._native.wait(_timeout(timeout)))

    def wait_resume(self, timeout: Optional[float] = None) -> List[Signal]:
        """The PAUSE handler: blocks until a RESUME, ABORT, STEER or INFO arrives (or
        `timeout`), returning everything delivered meanwhile."""
        if self._held:
            return self._take([])
        return self._take(self._native.wait_resume(_timeout(timeout)))

    async def wait_async(self, timeout: Optional[float] = None) -> List[Signal]:
        """`wait` for asyncio: runs in a worker thread in short slices, so a cancelled task
        stops within 0.2 s; signals claimed by a slice still running when it is cancelled are
        kept for the next call."""
        loop = asyncio.get_running_loop()
        timeout = _timeout(timeout)
        if self._held:
            return self._take([])
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            left = 0.2 if deadline is None else max(0.0, min(0.2, deadline - loop.time()))
            task = asyncio.ensure_future(asyncio.to_thread(self._native.wait, left))
            try:
                got = await asyncio.shield(task)
            except asyncio.CancelledError:
                # Let the slice finish (however often the task is cancelled meanwhile), and
                # keep what it claimed for the next call.
                while not task.done():
                    try:
                        await asyncio.shield(task)
                    except asyncio.CancelledError:
                        continue
                    except BaseException:
                        break
                if not task.cancelled() and task.exception() is None:
                    self._held.extend(Signal._of(d) for d in task.result())
                raise
            if got or self._held or (deadline is not None and loop.time() >= deadline):
                return self._take(got)

    def ask(
        self,
        message: str,
        *,
        to: Optional[str] = None,
        choices: Optional[List[str]] = None,
        timeout: Optional[float] = None,
        key: Optional[str] = None,
        context: Optional[Dict[str, Any]] = None,
    ) -> "Outcome":
        """Asks a person as this agent and blocks, sleeping on filesystem events with the GIL
        released, until the request's one answer, or its deadline (`timeout` seconds from now;
        None: none) passes with none: then `Outcome.answered` is False and a later answer is
        refused. The request is durable before the wait starts. With `key`, the request's id
        is `<agent>.<key>`: asking again with the same key and question re-attaches to it (no
        second request) and returns the answer given meanwhile. Ctrl-C raises
        KeyboardInterrupt within 0.1 s and keeps the request open. `choices` default to
        approve, deny; `to` says whom it is for (shown, not enforced); `context` is any JSON
        object (a tool and its input)."""
        if not self._native.is_open():
            reason = "the checkpoint is closed"
            e = MailboxError(reason)
            e.reason, e.path = reason, None
            raise e
        ctx = None if context is None else json.dumps(context)
        got = _sigbox.ask(
            self._root, self._agent, message, to,
            None if choices is None else list(choices), _timeout(timeout), key, ctx,
        )
        return Outcome._of(got)

    def ack(self) -> int:
        """Acknowledges what was delivered: never given again, also after a crash. Signals
        held for the next call (a cancelled `wait_async`) are not acknowledged before that
        call returns them."""
        if self._held:
            return 0
        return self._native.ack()

    def close(self, ack: bool = True) -> None:
        """Releases the presence (acknowledging what was delivered first, unless `ack` is
        false). A closed checkpoint raises MailboxError."""
        self._native.close(ack)


@dataclass(frozen=True)
class Outcome:
    """How a request ended: its one answer, or its deadline passed with none."""

    id: str
    """The request's id (`<agent>.<key>`): what `sigbox asks` lists and `answer` takes."""
    answered: bool
    """True for an answer; False when the deadline passed with no answer (the request is
    recorded expired, and every later answer is refused)."""
    choice: Optional[str]
    """The choice the person made, one of those offered; None with no answer."""
    message: Optional[str]
    """What the person said with it, or None."""
    answered_by: Optional[str]
    answered_at: Optional[datetime]
    asked_at: datetime
    deadline: Optional[datetime]
    expired_at: Optional[datetime]
    """When the expiry was recorded, for a request that got no answer."""
    attached: bool
    """True when this ask found the request already asked under its key (a re-attach)."""

    @classmethod
    def _of(cls, d: dict) -> "Outcome":
        asked_at = _datetime(d["asked_at"])
        assert asked_at is not None
        return cls(
            id=d["id"],
            answered=d["status"] == "answered",
            choice=d["choice"],
            message=d["message"],
            answered_by=d["answered_by"],
            answered_at=_datetime(d["answered_at"]),
            asked_at=asked_at,
            deadline=_datetime(d["deadline"]),
            expired_at=_datetime(d["expired_at"]),
            attached=d["attached"],
        )


class AnswerRefused(SigboxError):
    """An answer that was not taken: `reason` says why in one line (who answered first, with
    what and when; the deadline it missed; the choices offered; no such request), `kind` is
    one of "answered", "expired", "not_offered", "unknown", "invalid_id", "invalid_request",
    "invalid_name", "elsewhere" (asked on another host, which decides: answer it there, or
    with `sigbox answer`, which proposes the answer through the bridge), and `id` the
    request's id."""

    kind: str
    id: str


def answer(
    root: Root,
    id: str,
    choice: str,
    message: Optional[str] = None,
    *,
    from_: Optional[str] = None,
) -> Outcome:
    """Answers the request `id` with `choice` (and `message`), as `from_` (default: $USER, else
    "person"). Returns the outcome, durable before this returns: this is the one answer.
    Raises AnswerRefused naming the reason for a second or late answer, an unknown id, or a
    choice not offered."""
    by = from_
    if by is None:
        user = os.environ.get("USER", "")
        by = user if user.strip() and user.isprintable() and len(user.encode()) <= 128 else "person"
    got = _sigbox.answer(_root(root), id, choice, message, by)
    if got["refused"] is not None:
        e = AnswerRefused(got["refused"])
        e.reason, e.path, e.kind, e.id = got["refused"], None, got["kind"], got["id"]
        raise e
    return Outcome._of(got)


def send(
    root: Root,
    type: "SignalType | str",
    message: Optional[str] = None,
    target: Optional[str] = None,
    sender: Optional[str] = None,
    iteration: Optional[int] = None,
) -> str:
    """Sends a signal durably; returns its id. `target`: an agent, "ALL" (the default), or ""
    for no target. Refused as the CLI refuses (InvalidSignalError)."""
    t = type.value if isinstance(type, SignalType) else str(type)
    if isinstance(iteration, bool):
        reason = f"iteration {iteration!r}: a whole number, not a bool"
        e = InvalidSignalError(reason)
        e.reason, e.path = reason, None
        raise e
    return _sigbox.send(_root(root), t, message, target, sender, iteration)


def init(root: Root) -> None:
    """Creates the mailbox layout at `root` (idempotent)."""
    _sigbox.init(_root(root))
