"""The sigbox Python package, end to end. Run by python/tests/pytest.rs (cargo test), which
builds the wheel with maturin, installs it, and passes the CLI's path in SIGBOX_BIN."""

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta, timezone

import pytest

import sigbox
from sigbox import Checkpoint, SignalType

SIGBOX = os.environ["SIGBOX_BIN"]

# A child's Ctrl-C raises KeyboardInterrupt, as in a terminal, even when this test runs where
# SIGINT is ignored (a job a shell started in the background): Python keeps an ignored SIGINT
# ignored, and the child would never see the signal the test sends.
CTRL_C = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"


def cli(root, *args):
    out = subprocess.run([SIGBOX, "--root", str(root), *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "signals"
    sigbox.init(str(r))
    return str(r)


def test_fifo_and_routing(root):
    ids = [sigbox.send(root, "steer", f"s{i}", target="Executor") for i in range(3)]
    sigbox.send(root, SignalType.INFO, "for the planner", target="Planner")
    b = sigbox.send(root, "info", "everyone")
    with Checkpoint(root, "Executor") as ex:
        got = ex.poll()
        assert [s.id for s in got] == ids + [b]
        assert [s.type for s in got] == [SignalType.STEER] * 3 + [SignalType.INFO]
        assert got[-1].target == "ALL"
    with Checkpoint(root, "Planner") as pl:
        assert [s.message for s in pl.poll()] == ["for the planner", "everyone"]


def test_signal_is_immutable_and_typed(root):
    sigbox.send(root, "stop", "halt", target="Executor", sender="alice", iteration=4)
    with Checkpoint(root, "Executor") as cp:
        (s,) = cp.poll()
    assert s.type is SignalType.ABORT
    assert s.sender == "alice" and s.iteration == 4
    assert s.created_at is not None and s.created_at.tzinfo is not None
    assert s.created_at.utcoffset() == timezone.utc.utcoffset(None)
    assert s.fields["type"] == "ABORT"  # `stop` is written as ABORT
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.message = "changed"  # type: ignore[misc]
    # `fields` is the signal's own copy: changing it changes nothing else.
    s.fields["type"] = "x"
    with Checkpoint(root, "Executor") as cp:
        assert cp.poll() == []


def test_unknown_fields_are_kept(root, tmp_path):
    body = {"type": "INFO", "target": "Executor", "message": "m", "ticket": {"id": 7}}
    stage = tmp_path / "drop.json"
    stage.write_text(json.dumps(body))
    # Written a while ago, then renamed in: it arrived whole and is read at once.
    past = time.time() - 3600
    os.utime(stage, (past, past))
    os.rename(stage, os.path.join(root, "inputs", "drop.json"))
    with Checkpoint(root, "Executor") as cp:
        (s,) = cp.poll()
    assert s.fields["ticket"] == {"id": 7}
    assert s.created_at is None
    assert s.id.startswith("drop@")


def test_path_is_where_the_file_is_once_acknowledged(root, tmp_path):
    one = sigbox.send(root, "steer", "mine", target="Executor")
    everyone = sigbox.send(root, "info", "everyone")
    body = {"type": "INFO", "target": "Executor", "created_at": "2026-05-01T10:00:00.5-03:30"}
    stage = tmp_path / "drop.json"
    stage.write_text(json.dumps(body))
    past = time.time() - 3600
    os.utime(stage, (past, past))
    os.rename(stage, os.path.join(root, "inputs", "drop.json"))
    with Checkpoint(root, "Executor") as cp:
        got = {s.id: s for s in cp.poll()}
    mine, all_, dropped = got[one], got[everyone], [s for s in got.values() if s.id.startswith("drop@")][0]
    # Acknowledged (the with block left): each file is at its path.
    assert os.path.dirname(mine.path) == os.path.join(root, "processed")
    assert os.path.dirname(dropped.path) == os.path.join(root, "processed")
    assert os.path.dirname(all_.path) == os.path.join(root, "inputs")
    for s in (mine, dropped, all_):
        assert os.path.isfile(s.path), s
    # The instant in the offset the sender wrote.
    assert dropped.created_at.utcoffset() == timedelta(hours=-3, minutes=-30)
    assert dropped.created_at.isoformat() == "2026-05-01T10:00:00.500000-03:30"


def test_every_exception_type(root):
    with pytest.raises(sigbox.InvalidSignalError) as e:
        sigbox.send(root, "wobble")
    assert "unknown signal type" in e.value.reason and e.value.path is None
    with pytest.raises(sigbox.InvalidSignalError):
        sigbox.send(root, "steer", target="../etc")
    with pytest.raises(sigbox.InvalidSignalError):
        sigbox.send(root, "steer", sender="two\nlines")
    with pytest.raises(sigbox.InvalidSignalError):
        Checkpoint(root, "no such agent!")
    with pytest.raises(sigbox.MailboxError) as e:
        Checkpoint(os.path.join(root, "nope"), "Executor")
    assert e.value.path is not None and "nope" in e.value.path
    cp = Checkpoint(root, "Executor")
    cp.close()
    with pytest.raises(sigbox.MailboxError):
        cp.poll()
    with pytest.raises(sigbox.InvalidSignalError):
        Checkpoint(root, "Executor").wait(-1)
    for t in (sigbox.InvalidSignalError, sigbox.MailboxError):
        assert issubclass(t, sigbox.SigboxError) and issubclass(t, Exception)


def test_wait_is_woken_by_a_send_from_another_process(root):
    with Checkpoint(root, "Executor") as cp:
        threading.Timer(0.3, lambda: cli(root, "send", "steer", "wake", "--target", "Executor")).start()
        t = time.monotonic()
        got = cp.wait(30)
        assert [s.message for s in got] == ["wake"]
        assert time.monotonic() - t < 10
        t = time.monotonic()
        assert cp.wait(0.3) == []
        assert time.monotonic() - t >= 0.25


def test_presence_and_the_hand_over(root):
    with Checkpoint(root, "Planner") as cp:
        sigbox.send(root, "info", "while present", target="Planner")
        cli(root, "poll", "--as", "Orchestrator")
        kinds = [json.loads(l)["kind"] for l in cli(root, "--json", "ls").splitlines()]
        assert kinds == ["pending"]
        assert [s.message for s in cp.poll()] == ["while present"]
    # Left normally: handed over, never given again.
    with Checkpoint(root, "Planner") as cp:
        assert cp.poll() == []
    # Left by an exception: given again, marked.
    sigbox.send(root, "info", "not acted on", target="Planner")
    with pytest.raises(RuntimeError):
        with Checkpoint(root, "Planner") as cp:
            assert len(cp.poll()) == 1
            raise RuntimeError("the agent crashed")
    with Checkpoint(root, "Planner") as cp:
        (s,) = cp.poll()
        assert s.message == "not acted on" and s.redelivery == 1


def test_keyboard_interrupt_during_wait_loses_nothing(root):
    script = textwrap.dedent(
        f"""
        import sys, time, sigbox
        cp = sigbox.Checkpoint({root!r}, "Executor")
        print("waiting", flush=True)
        t = time.monotonic()
        try:
            cp.wait(None)
        except KeyboardInterrupt:
            print("interrupted", round(time.monotonic() - t, 3), flush=True)
            sys.exit(0)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", CTRL_C + script], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "waiting"
    time.sleep(0.5)
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    line = p.stdout.readline().split()
    p.wait(timeout=10)
    assert line[0] == "interrupted", line
    assert time.monotonic() - sent < 2
    # Nothing was claimed by the interrupted wait: a signal sent now is there for the agent.
    sigbox.send(root, "steer", "after", target="Executor")
    with Checkpoint(root, "Executor") as cp:
        assert [s.message for s in cp.poll()] == ["after"]


def test_async_wait_and_its_cancellation(root):
    async def go():
        with Checkpoint(root, "Executor") as cp:
            loop = asyncio.get_running_loop()
            loop.call_later(0.3, lambda: sigbox.send(root, "info", "async", target="Executor"))
            got = await cp.wait_async(10)
            assert [s.message for s in got] == ["async"]
            task = asyncio.ensure_future(cp.wait_async(30))
            await asyncio.sleep(0.3)
            t = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - t < 1
            # A signal a cancelled slice claimed is given by the next call.
            sigbox.send(root, "info", "kept", target="Executor")
            got = cp.wait(5)
            assert [s.message for s in got] == ["kept"]
    asyncio.run(go())


def test_exactly_once_across_python_processes_and_the_cli(root, tmp_path):
    n = 600
    consumer = textwrap.dedent(
        f"""
        import json, sys, sigbox
        seen = []
        with sigbox.Checkpoint({root!r}, "Executor") as cp:
            idle = 0
            while idle < 8:
                got = cp.wait(0.25)
                idle = 0 if got else idle + 1
                seen += [s.message for s in got]
                cp.ack()
        json.dump(seen, open(sys.argv[1], "w"))
        """
    )
    outs = [tmp_path / f"py{i}.json" for i in range(3)]
    procs = [subprocess.Popen([sys.executable, "-c", consumer, str(o)]) for o in outs]
    cli_seen = []
    stop = threading.Event()

    def cli_consumer():
        idle = 0
        while idle < 8:
            lines = cli(root, "--json", "poll", "--as", "Executor").splitlines()
            cli_seen.extend(json.loads(l)["message"] for l in lines)
            idle = 0 if lines else idle + 1
            time.sleep(0.05)

    t = threading.Thread(target=cli_consumer)
    t.start()
    for i in range(n):
        sigbox.send(root, "info", f"m{i}", target="Executor")
    for p in procs:
        assert p.wait(timeout=120) == 0
    t.join(timeout=120)
    seen = cli_seen + [m for o in outs for m in json.loads(o.read_text())]
    assert len(seen) == len(set(seen)), "a signal given twice"
    assert sorted(seen) == sorted(f"m{i}" for i in range(n))
    assert sum(1 for o in outs if json.loads(o.read_text())) >= 2, "the processes raced"


def test_signals_pickle_hash_and_copy(root):
    import copy
    import pickle
    sigbox.send(root, "steer", "p", target="Executor")
    with Checkpoint(root, "Executor") as cp:
        (s,) = cp.poll()
    assert pickle.loads(pickle.dumps(s)) == s
    assert copy.deepcopy(s) == s
    assert dataclasses.asdict(s)["message"] == "p"
    assert len({s, s}) == 1


def test_roots_as_paths_and_bytes(tmp_path):
    import pathlib
    r = tmp_path / "as-path"
    sigbox.init(r)
    sigbox.send(pathlib.Path(r), "info", "x", target="Executor")
    b = os.fsencode(str(tmp_path)) + b"/raw\xffname"
    sigbox.init(b)
    sigbox.send(b, "info", "y", target="Executor")
    assert os.path.isdir(os.path.join(os.fsencode(str(tmp_path)), b"raw\xffname", b"inputs"))
    with Checkpoint(b, "Executor") as cp:
        assert [s.message for s in cp.poll()] == ["y"]
    with Checkpoint(r, "Executor") as cp:
        assert [s.message for s in cp.poll()] == ["x"]


def test_all_is_reserved_for_broadcasts_and_bad_names_say_why(root):
    for name in ["ALL", "all"]:
        with pytest.raises(sigbox.InvalidSignalError) as e:
            Checkpoint(root, name)
        assert "reserved for broadcasts" in e.value.reason, e.value.reason
    with pytest.raises(sigbox.InvalidSignalError) as e:
        Checkpoint(root, "exe.cutor")
    assert "holds '.'" in e.value.reason, e.value.reason
    with pytest.raises(sigbox.InvalidSignalError) as e:
        sigbox.send(root, "steer", "x", target="a/b")
    assert "holds '/'" in e.value.reason, e.value.reason


def test_targets_are_checked_as_the_cli_checks_them(root):
    for bad in ["none", "None", "null", "-", "  ", "../x"]:
        with pytest.raises(sigbox.InvalidSignalError):
            sigbox.send(root, "steer", "x", target=bad)
    with pytest.raises(sigbox.InvalidSignalError):
        sigbox.send(root, "steer", "x", iteration=-1)
    with pytest.raises(sigbox.InvalidSignalError):
        sigbox.send(root, "steer", "x", iteration=True)
    with Checkpoint(root, "Executor") as cp:
        for t in (float("nan"), float("-inf"), -1.0):
            with pytest.raises(sigbox.InvalidSignalError):
                cp.wait(t)
        assert cp.wait(0.0) == []
        assert cp.wait(1e19 * 0) == []


def _child(root, body):
    script = CTRL_C + "import sys, time, signal, sigbox\n" + textwrap.dedent(body).format(root=root)
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)


def test_wait_resume_killed_loses_no_pause(root):
    p = _child(root, """
        cp = sigbox.Checkpoint({root!r}, "Executor")
        print("waiting", flush=True)
        cp.wait_resume(60)
        """)
    assert p.stdout.readline().strip() == "waiting"
    sigbox.send(root, "pause", "hold", target="Executor")
    time.sleep(0.6)
    p.kill()
    p.wait()
    with Checkpoint(root, "Executor") as cp:
        got = cp.poll()
    assert [(s.type, s.redelivery) for s in got] == [(SignalType.PAUSE, 1)]


def test_ctrl_c_with_a_claim_in_hand_keeps_it_for_the_next_call(root):
    p = _child(root, """
        cp = sigbox.Checkpoint({root!r}, "Executor")
        print("waiting", flush=True)
        try:
            cp.wait_resume(60)
        except KeyboardInterrupt:
            print("interrupted", [s.message for s in cp.poll()], flush=True)
        """)
    assert p.stdout.readline().strip() == "waiting"
    sigbox.send(root, "pause", "hold", target="Executor")
    time.sleep(0.6)
    p.send_signal(signal.SIGINT)
    line = p.stdout.readline().strip()
    p.wait(timeout=10)
    assert line == "interrupted ['hold']", line


def test_a_twice_cancelled_async_wait_keeps_its_claim(root):
    async def go():
        with Checkpoint(root, "Executor") as cp:
            task = asyncio.ensure_future(cp.wait_async(30))
            await asyncio.sleep(0.05)
            task.cancel()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            task.cancel()
            sigbox.send(root, "info", "kept twice", target="Executor")
            with pytest.raises(asyncio.CancelledError):
                await task
            got = cp.wait(5)
            assert [s.message for s in got] == ["kept twice"]
    asyncio.run(go())


def test_a_list_lost_between_the_native_call_and_the_caller_comes_again(root):
    # What an interrupt landing right after the native call returns would do: the list never
    # reaches the wrapper, so it is never confirmed. The next call returns it again, and
    # nothing is acknowledged meanwhile.
    sigbox.send(root, "steer", "unseen", target="Executor")
    with Checkpoint(root, "Executor") as cp:
        raw = cp._native.wait(5)
        assert [d["message"] for d in raw] == ["unseen"]
        assert cp.ack() == 0
        assert [s.message for s in cp.poll()] == ["unseen"]
        assert cp.poll() == []
