"""sigbox-mcp driven by the official MCP Python SDK (`mcp` on PyPI) over stdio.

Run by mcp/tests/mcp_client.rs (cargo test), which passes the binaries and a Python with `mcp`
installed in SIGBOX_MCP_BIN, SIGBOX_BIN. Each test works in its own temporary mailbox.
"""

import asyncio
import fcntl
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
import unittest
from contextlib import asynccontextmanager

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

MCP_BIN = os.environ["SIGBOX_MCP_BIN"]
SIGBOX = os.environ["SIGBOX_BIN"]


def sigbox(root, *args):
    out = subprocess.run([SIGBOX, "--root", root, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError(f"sigbox {args}: {out.stderr}")
    return out.stdout


@asynccontextmanager
async def server(root, agent="Executor"):
    params = StdioServerParameters(command=MCP_BIN, args=["--root", root, "--as", agent])
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def unread(f):
    """How many bytes wait unread in the pipe `f` reads from (FIONREAD), without reading."""
    return struct.unpack("i", fcntl.ioctl(f.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]


# A client process that starts the server, calls `wait`, says when the answer is in the pipe
# (unread: it never reads it), then sleeps until it is killed.
KILLED_CLIENT = r"""
import fcntl, json, struct, subprocess, sys, termios, time
mcp_bin, root = sys.argv[1], sys.argv[2]
p = subprocess.Popen([mcp_bin, "--root", root, "--as", "Executor"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
def send(obj):
    p.stdin.write((json.dumps(obj) + "\n").encode())
    p.stdin.flush()
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
p.stdout.readline()
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "wait", "arguments": {"timeout_s": 60}}})
print(p.pid, flush=True)
fd = p.stdout.fileno()
while struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0] == 0:
    time.sleep(0.01)
print("written", flush=True)
time.sleep(600)
"""


def text(result):
    assert not result.is_error, result
    return json.loads(result.content[0].text)


def messages(result):
    return [s["message"] for s in text(result)["signals"]]


class McpServer(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = os.path.join(self.tmp.name, "signals")
        sigbox(self.root, "init")

    def tearDown(self):
        self.tmp.cleanup()

    def run_async(self, coro):
        return anyio.run(lambda: coro)

    def test_refusals_at_start_say_why_and_what_to_do(self):
        def start(*args, env=None):
            return subprocess.run([MCP_BIN, *args], stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=30,
                                  env={**os.environ, **(env or {})})
        out = start("--root", self.root, "--as", "ALL")
        assert out.returncode == 2, out
        assert "reserved for broadcasts" in out.stderr, out.stderr
        out = start("--root", self.root, "--as", "exe.cutor")
        assert out.returncode == 2 and "holds '.'" in out.stderr, out.stderr
        out = start("--as", "Executor", env={"SIGBOX_ROOT": ""})
        assert out.returncode == 2, out
        assert "SIGBOX_ROOT is set but empty" in out.stderr, out.stderr
        out = start("--root", self.root, "--as", "Executor", env={"SIGBOX_SETTLE": "2"})
        assert out.returncode == 2, out
        assert "SIGBOX_SETTLE" in out.stderr and "2s" in out.stderr and "2ms" in out.stderr, out.stderr

    def test_tools_are_few_and_described(self):
        async def go():
            async with server(self.root) as s:
                tools = (await s.list_tools()).tools
                names = sorted(t.name for t in tools)
                self.assertEqual(names, ["ask", "check", "send", "status", "wait"])
                for t in tools:
                    self.assertTrue(t.description and "\n" not in t.description.strip(), t)
                    self.assertEqual(t.input_schema.get("type"), "object", t)
                by = {t.name: t for t in tools}
                self.assertIn("timeout_s", by["wait"].input_schema["properties"])
                self.assertEqual(
                    sorted(by["send"].input_schema["properties"]), ["message", "target", "type"]
                )
                self.assertEqual(by["send"].input_schema.get("required"), ["type"])
                # What each returns, when wait ends, what a redelivery means: said to the model.
                for t in tools:
                    self.assertEqual(t.output_schema.get("type"), "object", t)
                for name in ("check", "wait"):
                    item = by[name].output_schema["properties"]["signals"]["items"]
                    self.assertIn("act on it unless you already did", item["properties"]["redelivery"]["description"])
                    self.assertEqual(item["required"], ["id", "type", "message"])
                for word in ("ABORT", "PAUSE", "RESUME", "STEER", "once", "redelivery"):
                    self.assertIn(word, by["check"].description)
                for word in ("timeout_s", "empty list", "cancelled", "at least one"):
                    self.assertIn(word, by["wait"].description)
                self.assertIn("every agent but you", by["send"].description)
                self.assertIn("without taking", by["status"].description)
                self.assertEqual(by["ask"].input_schema.get("required"), ["message"])
                self.assertEqual(
                    sorted(by["ask"].input_schema["properties"]),
                    ["choices", "key", "message", "timeout_s", "to", "wait_s"],
                )
                for word in ("key", "cancelled", "open", "timeout_s", "wait_s"):
                    self.assertIn(word, by["ask"].description)
                # Structured results, valid against those schemas (the SDK checks), the same
                # as the text.
                for name, args in (("check", {}), ("wait", {"timeout_s": 0}), ("status", {}),
                                   ("send", {"type": "info", "target": "Planner"}),
                                   ("ask", {"message": "ok?", "wait_s": 0})):
                    r = await s.call_tool(name, args)
                    self.assertEqual(r.structured_content, json.loads(r.content[0].text), name)
        self.run_async(go())

    def test_an_agents_own_broadcast_is_not_given_back_to_it(self):
        async def go():
            async with server(self.root) as me, server(self.root, "Planner") as planner:
                sent = text(await me.call_tool("send", {"type": "info", "message": "step 3 done"}))
                self.assertEqual(text(await me.call_tool("status", {}))["pending_for_agent"], 0)
                self.assertEqual(messages(await me.call_tool("check", {})), [])
                got = text(await planner.call_tool("check", {}))["signals"]
                self.assertEqual([(g["id"], g["from"], g.get("target")) for g in got],
                                 [(sent["id"], "Executor", "ALL")])
                # The CLI's `send --from` is the same sender: not given back, acked for it.
                sigbox(self.root, "send", "steer", "from the CLI", "--from", "Executor")
                self.assertEqual(messages(await me.call_tool("check", {})), [])
                self.assertEqual(messages(await planner.call_tool("check", {})), ["from the CLI"])
                # A signal an agent targets at itself is delivered as any other.
                await me.call_tool("send", {"type": "info", "message": "note to self", "target": "Executor"})
                self.assertEqual(messages(await me.call_tool("check", {})), ["note to self"])
            acks = os.listdir(os.path.join(self.root, "acks", sent["id"]))
            self.assertIn("Executor.ack", acks)
        self.run_async(go())

    def test_check_send_status_and_fifo(self):
        async def go():
            async with server(self.root) as s:
                self.assertEqual(text(await s.call_tool("check", {})), {"signals": []})
                sigbox(self.root, "send", "steer", "first", "--target", "Executor", "--from", "alice")
                sigbox(self.root, "send", "info", "second", "--target", "Executor")
                st = text(await s.call_tool("status", {}))
                self.assertEqual(st["pending_for_agent"], 2, st)
                got = text(await s.call_tool("check", {}))["signals"]
                self.assertEqual([g["message"] for g in got], ["first", "second"])
                self.assertEqual(got[0]["type"], "STEER")
                self.assertEqual(got[0]["from"], "alice")
                self.assertEqual(messages(await s.call_tool("check", {})), [])
                sent = text(await s.call_tool("send", {"type": "info", "message": "hi", "target": "Planner"}))
                self.assertTrue(sent["id"].endswith(".INFO.Planner"), sent)
            ls = [json.loads(l) for l in sigbox(self.root, "--json", "ls").splitlines()]
            self.assertEqual([(l["type"], l["target"]) for l in ls], [("INFO", "Planner")])
            log = sigbox(self.root, "--json", "log")
            self.assertEqual(log.count('"action_taken":"delivered"'), 2, log)
        self.run_async(go())

    def test_errors_are_tool_errors_and_the_server_goes_on(self):
        async def go():
            async with server(self.root) as s:
                r = await s.call_tool("send", {"type": "wobble"})
                self.assertTrue(r.is_error)
                self.assertIn("unknown signal type", r.content[0].text)
                r = await s.call_tool("send", {"type": "steer", "target": "../etc"})
                self.assertTrue(r.is_error)
                r = await s.call_tool("wait", {"timeout_s": -1})
                self.assertTrue(r.is_error)
                r = await s.call_tool("send", {"message": "no type"})
                self.assertTrue(r.is_error)
                with self.assertRaises(Exception):
                    await s.call_tool("nope", {})
                self.assertEqual(text(await s.call_tool("check", {})), {"signals": []})
        self.run_async(go())

    def test_wait_is_woken_by_a_send(self):
        async def go():
            async with server(self.root) as s:
                async def later():
                    await anyio.sleep(0.3)
                    await anyio.to_thread.run_sync(
                        lambda: sigbox(self.root, "send", "abort", "stop now", "--target", "Executor")
                    )
                async with anyio.create_task_group() as tg:
                    tg.start_soon(later)
                    t = time.monotonic()
                    r = await s.call_tool("wait", {"timeout_s": 30})
                    took = time.monotonic() - t
                self.assertEqual(messages(r), ["stop now"])
                self.assertLess(took, 10)
                t = time.monotonic()
                r = await s.call_tool("wait", {"timeout_s": 0.3})
                self.assertEqual(messages(r), [])
                self.assertGreaterEqual(time.monotonic() - t, 0.25)
        self.run_async(go())

    def test_a_blocked_wait_is_cancelled(self):
        async def go():
            async with server(self.root) as s:
                t = time.monotonic()
                with anyio.move_on_after(0.5):
                    await s.call_tool("wait", {"timeout_s": 60})
                # The server took the cancellation: it answers at once afterwards.
                with anyio.fail_after(5):
                    self.assertEqual(text(await s.call_tool("check", {})), {"signals": []})
                self.assertLess(time.monotonic() - t, 5)
        self.run_async(go())

    def asks(self, *flags):
        return [json.loads(l) for l in sigbox(self.root, "--json", "asks", *flags).splitlines()]

    def wait_for_request(self, timeout=20):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            open_ = self.asks()
            if open_:
                return open_
            time.sleep(0.05)
        raise AssertionError("no request was asked")

    def test_ask_is_answered_by_the_cli_from_another_process(self):
        async def go():
            async with server(self.root) as s:
                def answer():
                    [req] = self.wait_for_request()
                    self.assertEqual(req["from"], "Executor")
                    self.assertEqual(req["choices"], ["yes", "no"])
                    out = subprocess.run([SIGBOX, "--root", self.root, "answer", req["id"], "yes",
                                          "go ahead", "--from", "alice"], capture_output=True, text=True)
                    self.assertEqual(out.returncode, 0, out.stderr)
                    # A second answer is refused, naming the first.
                    out = subprocess.run([SIGBOX, "--root", self.root, "answer", req["id"], "no"],
                                         capture_output=True, text=True)
                    self.assertEqual(out.returncode, 2, out)
                    self.assertIn('already answered "yes" by alice', out.stderr)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(anyio.to_thread.run_sync, answer)
                    with anyio.fail_after(30):
                        r = await s.call_tool("ask", {"message": "deploy?", "choices": ["yes", "no"],
                                                      "wait_s": 60})
                got = text(r)
                self.assertEqual(r.structured_content, got)
                self.assertEqual((got["status"], got["choice"], got["message"], got["answered_by"]),
                                 ("answered", "yes", "go ahead", "alice"), got)
                self.assertEqual(got["id"], "Executor." + got["key"])
                # Asked again with its key (the same question): the same request, answered.
                again = text(await s.call_tool("ask", {"message": "deploy?", "choices": ["yes", "no"],
                                                       "key": got["key"], "wait_s": 0}))
                self.assertEqual(again, got)
                self.assertEqual(len(self.asks("--all")), 1)
        self.run_async(go())

    def test_a_cancelled_ask_keeps_the_request(self):
        async def go():
            async with server(self.root) as s:
                t = time.monotonic()
                with anyio.move_on_after(0.5):
                    await s.call_tool("ask", {"message": "migrate?", "key": "m1", "wait_s": 600})
                # The server took the cancellation: it answers at once afterwards.
                with anyio.fail_after(5):
                    self.assertEqual(text(await s.call_tool("check", {})), {"signals": []})
                self.assertLess(time.monotonic() - t, 5)
                [req] = self.asks()
                self.assertEqual((req["id"], req["status"]), ("Executor.m1", "open"))
                # Another question under the key is refused, naming it; nothing is written.
                r = await s.call_tool("ask", {"message": "something else?", "key": "m1"})
                self.assertTrue(r.is_error)
                self.assertIn('"m1"', r.content[0].text)
                # An ask that ends by wait_s says open and keeps the request.
                got = text(await s.call_tool("ask", {"message": "migrate?", "key": "m1", "wait_s": 0.2}))
                self.assertEqual((got["status"], got["key"]), ("open", "m1"))
                sigbox(self.root, "answer", "Executor.m1", "approve", "--from", "bob")
                got = text(await s.call_tool("ask", {"message": "migrate?", "key": "m1"}))
                self.assertEqual((got["status"], got["choice"], got["answered_by"]),
                                 ("answered", "approve", "bob"))
                self.assertEqual(len(self.asks("--all")), 1)
                # A deadline: past it, expired, and a late answer refused.
                got = text(await s.call_tool("ask", {"message": "now?", "key": "d1", "timeout_s": 0.3}))
                self.assertEqual(got["status"], "expired")
                out = subprocess.run([SIGBOX, "--root", self.root, "answer", "Executor.d1", "approve"],
                                     capture_output=True, text=True)
                self.assertEqual(out.returncode, 2)
                self.assertIn("expired", out.stderr)
                # Arguments a model can correct are tool errors.
                for bad in ({"message": "x", "choices": []}, {"message": "x", "key": "../k"},
                            {"message": "x", "wait_s": -1}, {"message": "x", "timeout_s": "soon"}):
                    r = await s.call_tool("ask", bad)
                    self.assertTrue(r.is_error, bad)
        self.run_async(go())

    def test_malformed_requests_do_not_end_the_server(self):
        # Raw JSON-RPC over the server's stdio: garbage, a bad method, a call without a name.
        p = subprocess.Popen(
            [MCP_BIN, "--root", self.root, "--as", "Executor"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        def send(obj):
            p.stdin.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
            p.stdin.flush()
        def recv():
            return json.loads(p.stdout.readline())
        try:
            send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}})
            self.assertIn("result", recv())
            send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            send({"jsonrpc": "2.0", "id": 2, "method": "no/such/method"})
            r = recv()
            self.assertEqual(r["error"]["code"], -32601, r)
            self.assertIn("no/such/method", r["error"]["message"])
            # A known method with params missing or malformed: invalid params, naming it.
            for i, call in ((3, {"params": {"arguments": {}}}), (6, {}), (7, {"params": {"name": 5}})):
                send({"jsonrpc": "2.0", "id": i, "method": "tools/call", **call})
                r = recv()
                self.assertEqual(r["error"]["code"], -32602, r)
                self.assertIn("tools/call", r["error"]["message"])
                self.assertIn('"name"', r["error"]["message"])
            send({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "wait", "arguments": {"timeout_s": "soon"}}})
            r = recv()
            self.assertTrue("error" in r or r.get("result", {}).get("isError"), r)
            send({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "check", "arguments": {}}})
            r = recv()
            self.assertEqual(r["id"], 5)
            self.assertEqual(json.loads(r["result"]["content"][0]["text"]), {"signals": []})
        finally:
            p.stdin.close()
            p.wait(timeout=10)

    def test_presence_is_held_while_the_server_lives(self):
        async def go():
            async with server(self.root, "Planner"):
                # The orchestrator's pass leaves a present agent's signal in inputs/.
                sigbox(self.root, "send", "info", "for planner", "--target", "Planner")
                sigbox(self.root, "poll", "--as", "Orchestrator")
                ls = [json.loads(l) for l in sigbox(self.root, "--json", "ls").splitlines()]
                self.assertEqual([l["kind"] for l in ls], ["pending"], ls)
            sigbox(self.root, "send", "info", "absent now", "--target", "Planner")
            sigbox(self.root, "poll", "--as", "Orchestrator")
            ls = [json.loads(l) for l in sigbox(self.root, "--json", "ls").splitlines()]
            self.assertIn("buffered", [l["kind"] for l in ls], ls)
        self.run_async(go())

    def test_two_servers_for_one_agent_give_each_signal_once(self):
        n = 300
        async def go():
            seen = []
            async def consumer():
                async with server(self.root) as s:
                    idle = 0
                    while idle < 10:
                        got = messages(await s.call_tool("wait", {"timeout_s": 0.2}))
                        if got:
                            idle = 0
                            seen.extend(got)
                        else:
                            idle += 1
            def producer():
                for i in range(n):
                    sigbox(self.root, "send", "info", f"m{i}", "--target", "Executor")
            async with anyio.create_task_group() as tg:
                tg.start_soon(consumer)
                tg.start_soon(consumer)
                await anyio.to_thread.run_sync(producer)
            return seen
        seen = self.run_async(go())
        self.assertEqual(len(seen), len(set(seen)), "a signal given twice")
        self.assertEqual(sorted(seen), sorted(f"m{i}" for i in range(n)))

    def test_a_server_killed_before_the_next_call_gives_again_marked(self):
        sigbox(self.root, "send", "steer", "again", "--target", "Executor")
        p, send = self.raw()
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "check", "arguments": {}}})
        r = json.loads(p.stdout.readline())
        self.assertEqual(json.loads(r["result"]["content"][0]["text"])["signals"][0]["message"], "again")
        p.kill()
        p.wait()
        async def go():
            async with server(self.root) as s:
                got = text(await s.call_tool("check", {}))["signals"]
                self.assertEqual([g["message"] for g in got], ["again"])
                self.assertEqual(got[0]["redelivery"], 1)
        self.run_async(go())

    def test_channel_pushes_each_signal_once(self):
        p = subprocess.Popen(
            [MCP_BIN, "--root", self.root, "--as", "Executor", "--channel"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        def send(obj):
            p.stdin.write(json.dumps(obj) + "\n")
            p.stdin.flush()
        try:
            send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}})
            init = json.loads(p.stdout.readline())
            self.assertIn("claude/channel", init["result"]["capabilities"]["experimental"])
            send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            sigbox(self.root, "send", "steer", "pushed", "--target", "Executor", "--from", "alice")
            n = json.loads(p.stdout.readline())
            self.assertEqual(n["method"], "notifications/claude/channel")
            self.assertEqual(n["params"]["content"], "STEER: pushed")
            self.assertEqual(n["params"]["meta"]["from"], "alice")
            self.assertTrue(all(isinstance(v, str) for v in n["params"]["meta"].values()))
            # Given once: the tools find nothing more, and it is acknowledged.
            send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "check", "arguments": {}}})
            r = json.loads(p.stdout.readline())
            self.assertEqual(json.loads(r["result"]["content"][0]["text"]), {"signals": []})
            deadline = time.monotonic() + 5
            while "delivered" not in sigbox(self.root, "log") and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertIn("STEER", sigbox(self.root, "log"))
        finally:
            p.stdin.close()
            p.wait(timeout=10)

    def raw(self, *extra, stdout=subprocess.PIPE):
        """A server driven by hand, initialized; its answers in a pipe (read here up to the
        initialization's), or in `stdout` (left unread)."""
        p = subprocess.Popen(
            [MCP_BIN, "--root", self.root, "--as", "Executor", *extra],
            stdin=subprocess.PIPE, stdout=stdout, stderr=subprocess.DEVNULL, text=True,
        )
        def send(obj):
            p.stdin.write(json.dumps(obj) + "\n")
            p.stdin.flush()
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}})
        if stdout == subprocess.PIPE:
            json.loads(p.stdout.readline())
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return p, send

    def test_a_cancelled_call_loses_nothing(self):
        for i in range(3):
            sigbox(self.root, "send", "steer", f"c{i}", "--target", "Executor")
        p, send = self.raw()
        try:
            # A check cancelled at once: its answer may never come; its claims must.
            send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "check", "arguments": {}}})
            send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})
            time.sleep(0.3)
            send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "check", "arguments": {}}})
            seen = []
            while True:
                r = json.loads(p.stdout.readline())
                if "result" in r:
                    seen += [x["message"] for x in json.loads(r["result"]["content"][0]["text"])["signals"]]
                if r.get("id") == 3:
                    break
            self.assertEqual(sorted(seen), ["c0", "c1", "c2"])
            # A wait cancelled while a signal arrives: the signal comes with the next call.
            send({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "wait", "arguments": {"timeout_s": 30}}})
            time.sleep(0.5)
            send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}})
            sigbox(self.root, "send", "abort", "raced", "--target", "Executor")
            time.sleep(0.5)
            send({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "wait", "arguments": {"timeout_s": 5}}})
            seen = []
            while True:
                r = json.loads(p.stdout.readline())
                if "result" in r:
                    seen += [x["message"] for x in json.loads(r["result"]["content"][0]["text"])["signals"]]
                if r.get("id") == 5:
                    break
            self.assertEqual(seen, ["raced"])
        finally:
            p.stdin.close()
            p.wait(timeout=10)

    def test_checks_cancelled_at_any_moment_lose_nothing(self):
        async def go():
            async with server(self.root) as s:
                for round in range(10):
                    sent = [f"r{round}m{i}" for i in range(5)]
                    for m in sent:
                        sigbox(self.root, "send", "steer", m, "--target", "Executor")
                    seen = []
                    with anyio.move_on_after(0.002 * (round % 4)):
                        seen += messages(await s.call_tool("check", {}))
                    await anyio.sleep(0.05)
                    seen += messages(await s.call_tool("check", {}))
                    seen += messages(await s.call_tool("check", {}))
                    # An answer the client dropped (cancelled) comes again; a kept one never.
                    self.assertEqual(sorted(set(seen)), sorted(sent), (round, seen))
                    self.assertLessEqual(len(seen) - len(set(seen)), 5)
        self.run_async(go())

    def test_a_connection_closed_mid_wait_acknowledges_nothing_it_claims_after(self):
        p, send = self.raw()
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "wait", "arguments": {"timeout_s": 60}}})
        time.sleep(0.3)
        p.stdin.close()
        time.sleep(0.2)
        sigbox(self.root, "send", "abort", "late", "--target", "Executor")
        p.wait(timeout=15)
        async def go():
            async with server(self.root) as s:
                got = text(await s.call_tool("check", {}))["signals"]
                self.assertEqual([g["message"] for g in got], ["late"], got)
        self.run_async(go())

    def test_a_check_cut_off_by_a_closed_input_says_what_it_keeps(self):
        # Requests piped in and stdin closed at once, as a script does: the check runs while
        # the input is already closed. Its answer is the signal, or an error saying it is kept
        # and comes again; never an empty list while the signal waits in flight.
        sigbox(self.root, "send", "steer", "kept", "--target", "Executor")
        requests = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "check", "arguments": {}}},
        ]
        out = subprocess.run(
            [MCP_BIN, "--root", self.root, "--as", "Executor"],
            input="".join(json.dumps(r) + "\n" for r in requests),
            capture_output=True, text=True, timeout=30,
        )
        answers = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
        answer = [a for a in answers if a.get("id") == 2]
        self.assertEqual(len(answer), 1, out.stdout)
        result = answer[0]["result"]
        async def go():
            async with server(self.root) as s:
                return text(await s.call_tool("check", {}))["signals"]
        later = self.run_async(go())
        if result.get("isError"):
            self.assertIn("come again", result["content"][0]["text"], result)
            self.assertEqual([(g["message"], g["redelivery"]) for g in later], [("kept", 1)], later)
        else:
            got = json.loads(result["content"][0]["text"])["signals"]
            self.assertEqual([g["message"] for g in got], ["kept"], result)
            self.assertEqual(later, [], "answered and read, yet given again")

    def test_calls_sent_back_to_back_acknowledge_only_answers_read(self):
        # A client that writes its next call before reading the last answer: the second call
        # does not prove the first answer was read. Left unread (both ends closed), the
        # signal comes again, marked; read, it is acknowledged once.
        for read in (False, True):
            sigbox(self.root, "send", "steer", f"read={read}", "--target", "Executor")
            p, send = self.raw()
            check = lambda i: send({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "check", "arguments": {}}})
            check(2)
            deadline = time.monotonic() + 15
            while unread(p.stdout) == 0:  # the first answer is in the pipe, unread
                self.assertLess(time.monotonic(), deadline, "no answer written")
                time.sleep(0.01)
            check(3)
            if read:
                answers = [json.loads(p.stdout.readline()) for _ in range(2)]
                got = [s["message"] for a in answers for s in json.loads(a["result"]["content"][0]["text"])["signals"]]
                self.assertEqual(got, [f"read={read}"], answers)
                p.stdin.close()
            else:
                time.sleep(0.3)  # the second answer written too
                p.stdin.close()
                p.stdout.close()
            p.wait(timeout=15)
            async def go():
                async with server(self.root) as s:
                    return text(await s.call_tool("check", {}))["signals"]
            later = [(g["message"], g["redelivery"]) for g in self.run_async(go())]
            if read:
                self.assertEqual(later, [], "read, yet given again")
            else:
                self.assertEqual(later, [(f"read={read}", 1)], "unread, yet acknowledged")

    def test_calls_back_to_back_over_a_socket_acknowledge_only_answers_read(self):
        # As above, with the answers on a local socket (as Node's stdio is): the second call
        # finds the first answer unread in the socket and acknowledges nothing; the client
        # leaves, and the signal comes again, marked.
        import socket
        sigbox(self.root, "send", "steer", "over a socket", "--target", "Executor")
        ours, theirs = socket.socketpair()
        p, send = self.raw(stdout=theirs.fileno())
        theirs.close()
        for i in (2, 3):
            send({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "check", "arguments": {}}})
            time.sleep(0.3)
        self.assertEqual(self.log_ids(), [], "acknowledged while unread")
        p.stdin.close()
        ours.close()
        p.wait(timeout=15)
        async def go():
            async with server(self.root) as s:
                return text(await s.call_tool("check", {}))["signals"]
        later = [(g["message"], g["redelivery"]) for g in self.run_async(go())]
        self.assertEqual(later, [("over a socket", 1)])

    def log_ids(self):
        return [json.loads(l)["id"] for l in sigbox(self.root, "--json", "log").splitlines()]

    def test_an_answer_the_client_closed_unread_comes_again_marked(self):
        p, send = self.raw()
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "wait", "arguments": {"timeout_s": 60}}})
        time.sleep(0.3)
        sigbox(self.root, "send", "abort", "unread", "--target", "Executor")
        deadline = time.monotonic() + 15
        while unread(p.stdout) == 0:
            self.assertLess(time.monotonic(), deadline, "the answer was never written")
            time.sleep(0.01)
        # Both ends closed, the answer never read.
        p.stdin.close()
        p.stdout.close()
        p.wait(timeout=15)
        self.assertEqual(self.log_ids(), [], "acknowledged, never read")
        async def go():
            async with server(self.root) as s:
                got = text(await s.call_tool("check", {}))["signals"]
                self.assertEqual([g["message"] for g in got], ["unread"], got)
                self.assertEqual(got[0]["redelivery"], 1)
        self.run_async(go())

    def test_a_client_killed_before_reading_the_answer_gets_it_again_marked(self):
        client = subprocess.Popen(
            [sys.executable, "-c", KILLED_CLIENT, MCP_BIN, self.root],
            stdout=subprocess.PIPE, text=True,
        )
        try:
            pid = int(client.stdout.readline())
            time.sleep(0.3)
            sigbox(self.root, "send", "abort", "killed", "--target", "Executor")
            self.assertEqual(client.stdout.readline().strip(), "written")
        finally:
            client.send_signal(signal.SIGKILL)
            client.wait(timeout=10)
        # The server sees its client gone, and ends.
        deadline = time.monotonic() + 15
        while os.path.exists(f"/proc/{pid}") and not open(f"/proc/{pid}/stat").read().split(") ")[1].startswith("Z"):
            self.assertLess(time.monotonic(), deadline, "the server did not end")
            time.sleep(0.05)
        self.assertEqual(self.log_ids(), [], "acknowledged, never read")
        async def go():
            async with server(self.root) as s:
                got = text(await s.call_tool("check", {}))["signals"]
                self.assertEqual([g["message"] for g in got], ["killed"], got)
                self.assertEqual(got[0]["redelivery"], 1)
        self.run_async(go())

    def test_a_push_the_client_never_read_comes_again_marked(self):
        p, send = self.raw("--channel")
        sigbox(self.root, "send", "steer", "pushed unread", "--target", "Executor")
        deadline = time.monotonic() + 15
        while unread(p.stdout) == 0:
            self.assertLess(time.monotonic(), deadline, "nothing was pushed")
            time.sleep(0.01)
        time.sleep(0.3)
        self.assertEqual(self.log_ids(), [], "acknowledged while unread")
        p.stdin.close()
        p.stdout.close()
        p.wait(timeout=15)
        self.assertEqual(self.log_ids(), [], "acknowledged, never read")
        async def go():
            async with server(self.root) as s:
                got = text(await s.call_tool("check", {}))["signals"]
                self.assertEqual([g["message"] for g in got], ["pushed unread"], got)
                self.assertEqual(got[0]["redelivery"], 1)
        self.run_async(go())

    def test_an_answer_read_is_acknowledged_once(self):
        ids = [sigbox(self.root, "send", "steer", m, "--target", "Executor").strip() for m in ("one", "two")]
        p, send = self.raw()
        def call(i, name, args):
            send({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": args}})
            r = json.loads(p.stdout.readline())
            self.assertEqual(r["id"], i)
            return [g["message"] for g in json.loads(r["result"]["content"][0]["text"])["signals"]]
        try:
            self.assertEqual(call(2, "wait", {"timeout_s": 5}), ["one", "two"])
            # In flight until the client calls again, which says it read the answer.
            self.assertEqual(self.log_ids(), [])
            self.assertEqual(call(3, "check", {}), [])
            self.assertEqual(sorted(self.log_ids()), sorted(ids))
            # Read, then the connection closed cleanly with no call after it: handed over.
            last = sigbox(self.root, "send", "info", "last", "--target", "Executor").strip()
            self.assertEqual(call(4, "wait", {"timeout_s": 5}), ["last"])
        finally:
            p.stdin.close()
            p.wait(timeout=10)
        self.assertEqual(sorted(self.log_ids()), sorted(ids + [last]))
        async def go():
            async with server(self.root) as s:
                self.assertEqual(text(await s.call_tool("check", {})), {"signals": []})
        self.run_async(go())
        self.assertEqual(sorted(self.log_ids()), sorted(ids + [last]), "acknowledged twice")

    def test_the_settle_window_is_the_callers(self):
        with open(os.path.join(self.root, "inputs", "hand.yaml"), "w") as f:
            f.write("type: STEER\ntarget: Executor\nmessage: by hand\n")
        p, send = self.raw("--settle", "0")
        try:
            send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "check", "arguments": {}}})
            r = json.loads(p.stdout.readline())
            got = json.loads(r["result"]["content"][0]["text"])["signals"]
            self.assertEqual([g["message"] for g in got], ["by hand"])
        finally:
            p.stdin.close()
            p.wait(timeout=10)

    def test_created_at_keeps_the_senders_offset(self):
        stage = os.path.join(self.tmp.name, "drop.json")
        with open(stage, "w") as f:
            f.write('{"type": "INFO", "target": "Executor", "message": "m", '
                    '"created_at": "2026-05-01T10:00:00.250+07:00"}')
        past = time.time() - 3600
        os.utime(stage, (past, past))
        os.rename(stage, os.path.join(self.root, "inputs", "drop.json"))

        async def go():
            async with server(self.root) as s:
                got = text(await s.call_tool("check", {}))["signals"]
                # The sender's offset, to the second: never converted to UTC.
                self.assertEqual([g["created_at"] for g in got], ["2026-05-01T10:00:00+07:00"])
        self.run_async(go())


if __name__ == "__main__":
    unittest.main(verbosity=2)
