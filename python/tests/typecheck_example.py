"""Checked by mypy --strict (python/tests/pytest.rs): the package's types as an agent sees them."""

import pathlib
from datetime import datetime
from typing import List, Optional

import sigbox


def step(root: str) -> List[str]:
    out: List[str] = []
    with sigbox.Checkpoint(root, "Executor", state=None) as cp:
        for s in cp.poll():
            t: sigbox.SignalType = s.type
            when: Optional[datetime] = s.created_at
            out.append(f"{t.value} {s.message or ''} {when} {s.redelivery + 0}")
            if t is sigbox.SignalType.PAUSE:
                cp.wait_resume(30.0)
        n: int = cp.ack()
        out.append(str(n))
    ident: str = sigbox.send(root, sigbox.SignalType.STEER, "x", target="Executor")
    sigbox.init(pathlib.Path(root))
    sigbox.init(root.encode())
    out.append(ident)
    try:
        sigbox.send(root, "wobble")
    except sigbox.InvalidSignalError as e:
        reason: str = e.reason
        path: Optional[str] = e.path
        out.append(reason + (path or ""))
    return out


def approval(root: str) -> Optional[str]:
    with sigbox.Checkpoint(root, "Executor") as cp:
        o: sigbox.Outcome = cp.ask(
            "deploy?", to="alice", choices=["approve", "deny"], timeout=60.0, key="d-1",
            context={"tool_name": "Bash"},
        )
        when: Optional[datetime] = o.answered_at
        if o.answered and when is not None:
            return o.choice
    try:
        got: sigbox.Outcome = sigbox.answer(root, "Executor.d-1", "approve", "ok", from_="alice")
        return got.message
    except sigbox.AnswerRefused as e:
        kind: str = e.kind
        return kind + e.reason
