"""Asking a person from Python (spec/asks.md): `Checkpoint.ask` and `sigbox.answer`, against
the `sigbox` CLI in other processes. Run by python/tests/pytest.rs (cargo test)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import sigbox
from sigbox import AnswerRefused, Checkpoint

SIGBOX = os.environ["SIGBOX_BIN"]


def cli(root, *args, code=0):
    out = subprocess.run([SIGBOX, "--root", str(root), *args], capture_output=True, text=True)
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    return out


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "signals"
    sigbox.init(str(r))
    return str(r)


def open_requests(root):
    return [json.loads(l) for l in cli(root, "--json", "asks").stdout.splitlines()]


def answer_when_asked(root, choice, *extra, wait=30.0):
    """Answers the first open request with the CLI, from another process, once it is there."""
    def go():
        end = time.monotonic() + wait
        while time.monotonic() < end:
            reqs = open_requests(root)
            if reqs:
                cli(root, "answer", reqs[0]["id"], choice, *extra)
                return
            time.sleep(0.05)
    t = threading.Thread(target=go)
    t.start()
    return t


def test_an_answer_from_the_cli_in_another_process_wakes_the_ask(root):
    with Checkpoint(root, "Executor") as cp:
        t = answer_when_asked(root, "approve", "go ahead", "--from", "alice")
        start = time.monotonic()
        o = cp.ask("deploy to prod?", to="alice", timeout=60, key="deploy-1",
                   context={"tool_name": "Bash", "tool_input": {"command": "make deploy"}})
        t.join()
    assert time.monotonic() - start < 30
    assert o.answered and o.choice == "approve" and o.message == "go ahead"
    assert o.answered_by == "alice" and o.id == "Executor.deploy-1" and not o.attached
    assert o.answered_at is not None and o.answered_at.tzinfo is not None
    assert o.answered_at >= o.asked_at and o.deadline is not None and o.expired_at is None
    # The request on disk carries what was asked.
    (req,) = [json.loads(l) for l in cli(root, "--json", "asks", "--all").stdout.splitlines()]
    assert req["status"] == "answered" and req["to"] == "alice"
    assert req["context"]["tool_input"] == {"command": "make deploy"}


def test_the_gil_is_released_while_asking(root):
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    t = threading.Thread(target=spin)
    t.start()
    with Checkpoint(root, "Executor") as cp:
        o = cp.ask("anyone?", timeout=0.8)
    stop.set()
    t.join()
    assert not o.answered and o.choice is None and o.expired_at is not None
    assert len(ticks) > 20, "another thread ran while ask waited"


def test_the_deadline_gives_no_answer_and_a_later_answer_is_refused(root):
    with Checkpoint(root, "Executor") as cp:
        o = cp.ask("quick?", timeout=0.3, key="quick")
    assert not o.answered and o.id == "Executor.quick"
    with pytest.raises(AnswerRefused) as e:
        sigbox.answer(root, o.id, "approve", from_="late")
    assert e.value.kind == "expired" and "expired at" in e.value.reason, e.value.reason
    assert isinstance(e.value, sigbox.SigboxError)
    # The CLI refuses it the same way.
    assert "expired" in cli(root, "answer", o.id, "approve", code=2).stderr


def test_answer_gives_the_one_answer_and_refuses_the_rest_naming_why(root):
    cli(root, "ask", "--as", "Executor", "--key", "k1", "--choices", "yes,no", "--no-wait", "ok?")
    o = sigbox.answer(root, "Executor.k1", "yes", "fine", from_="bob")
    assert o.answered and o.choice == "yes" and o.answered_by == "bob" and o.message == "fine"
    with pytest.raises(AnswerRefused) as e:
        sigbox.answer(root, "Executor.k1", "no", from_="carol")
    assert e.value.kind == "answered" and e.value.id == "Executor.k1"
    assert 'already answered "yes" by bob' in e.value.reason, e.value.reason
    cli(root, "ask", "--as", "Executor", "--key", "k2", "--choices", "yes,no", "--no-wait", "ok?")
    with pytest.raises(AnswerRefused) as e:
        sigbox.answer(root, "Executor.k2", "maybe")
    assert e.value.kind == "not_offered" and "(yes, no)" in e.value.reason
    with pytest.raises(AnswerRefused) as e:
        sigbox.answer(root, "Executor.nope", "yes")
    assert e.value.kind == "unknown" and "no such request" in e.value.reason
    with pytest.raises(AnswerRefused) as e:
        sigbox.answer(root, "../../etc/passwd", "yes")
    assert e.value.kind == "invalid_id"
    # The ask that comes back for k1 gets the answer given, at once.
    with Checkpoint(root, "Executor") as cp:
        o = cp.ask("ok?", choices=["yes", "no"], key="k1")
    assert o.attached and o.choice == "yes" and o.answered_by == "bob"


def test_ctrl_c_while_asking_keeps_the_request_and_a_second_ask_reattaches(root):
    script = textwrap.dedent(
        f"""
        import sys, time, sigbox
        cp = sigbox.Checkpoint({root!r}, "Executor")
        print("asking", flush=True)
        t = time.monotonic()
        try:
            cp.ask("rotate the keys?", key="rotate", timeout=120)
        except KeyboardInterrupt:
            print("interrupted", round(time.monotonic() - t, 3), flush=True)
            sys.exit(0)
        print("returned", flush=True)
        """
    )
    # Ctrl-C raises KeyboardInterrupt in the child even where this test runs with SIGINT
    # ignored (a background job): Python would keep it ignored.
    ctrl_c = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    p = subprocess.Popen([sys.executable, "-c", ctrl_c + script], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "asking"
    end = time.monotonic() + 30
    while not open_requests(root) and time.monotonic() < end:
        time.sleep(0.05)
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    line = p.stdout.readline().split()
    assert p.wait(timeout=10) == 0
    assert line and line[0] == "interrupted", line
    assert time.monotonic() - sent < 5
    # The request is kept, open, not expired.
    (req,) = open_requests(root)
    assert req["id"] == "Executor.rotate" and req["status"] == "open"
    # Answered meanwhile from the CLI; the next ask with the key gets that answer at once.
    cli(root, "answer", "Executor.rotate", "deny", "not today", "--from", "alice")
    with Checkpoint(root, "Executor") as cp:
        o = cp.ask("rotate the keys?", key="rotate", timeout=120)
    assert o.attached and o.answered
    assert (o.choice, o.message, o.answered_by) == ("deny", "not today", "alice")
    assert open_requests(root) == []


def test_another_question_under_a_used_key_is_refused_and_bad_input_says_why(root):
    with Checkpoint(root, "Executor") as cp:
        cli(root, "ask", "--as", "Executor", "--key", "same", "--no-wait", "first?")
        with pytest.raises(sigbox.SigboxError) as e:
            cp.ask("second?", key="same", timeout=1)
        assert "already names another question" in e.value.reason, e.value.reason
        with pytest.raises(sigbox.InvalidSignalError):
            cp.ask("x", choices=["a b"], timeout=1)
        with pytest.raises(sigbox.InvalidSignalError):
            cp.ask("x", key="../k", timeout=1)
        with pytest.raises(sigbox.InvalidSignalError):
            cp.ask("x", timeout=-1)
    with pytest.raises(sigbox.MailboxError):
        cp.ask("after close", timeout=1)
