"""Test driver: the real Python `mcp` 2.3 `mcp.Client` over Streamable HTTP, run through a
plan. Contract shared with ts_client.mjs and ts_client2.mjs: see tests/http/README.md.

Usage: py_client.py URL [--mode auto|legacy] [--bearer TOKEN] [--header 'K: V']... [PLAN]
  auto:   probes `server/discover` (2026-07-28) and falls back to `initialize`;
          drives `input_required` rounds itself through the elicitation callback.
  legacy: `initialize` handshake (2025-11-25), a session, the server's elicitation
          requests arrive on the POST's SSE answer or the GET stream.
PLAN is JSON (a list of steps or {"steps": [...]}) on argv, or read from stdin when absent.
"""

import argparse
import json
import sys
from pathlib import Path

import anyio
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

# The JSON-lines output the stdio fixtures share (tests/fixtures/sdk_driver.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
from sdk_driver import dump, emit  # noqa: E402


class Human:
    """The elicitation callback: answers each prompt from the running step's plan."""

    def __init__(self):
        self.step = {}
        self.prompts = []

    def start(self, step):
        self.step = step
        self.prompts = []
        self.answers = list(step.get("answers") or ([step["answer"]] if "answer" in step else []))

    async def __call__(self, context, params):
        self.prompts.append(dump(params))
        answer = self.answers.pop(0) if self.answers else {"action": "decline"}
        return types.ElicitResult(**answer)


def error_of(e):
    if isinstance(e, MCPError):
        return {"code": e.code, "message": e.message, **({"data": e.data} if e.data is not None else {})}
    return None


async def run_step(client, human, i, step):
    op = step.get("op")
    out = {"step": i, "op": op}
    human.start(step)
    try:
        if op == "list":
            r = await client.list_tools(cursor=step.get("cursor"), cache_mode="refresh")
            out.update(ok=True, tools=[t.name for t in r.tools])
            if r.next_cursor is not None:
                out["nextCursor"] = r.next_cursor
        elif op == "call":
            r = await client.call_tool(step["name"], step.get("args") or {})
            out.update(ok=True, result=dump(r))
        elif op == "raw":
            # One round, no automatic driving: the test sees (and may replay) requestState.
            responses = step.get("input_responses")
            if responses is not None:
                responses = {k: types.ElicitResult(**v) for k, v in responses.items()}
            r = await client.session.call_tool(
                step["name"],
                step.get("args") or {},
                input_responses=responses,
                request_state=step.get("request_state"),
                allow_input_required=True,
            )
            out.update(ok=True, result=dump(r))
        elif op == "pause":
            out["ok"] = True
            emit(out)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            return
        else:
            out.update(ok=False, error={"code": None, "message": f"unknown op {op!r}"})
    except MCPError as e:
        out.update(ok=False, error=error_of(e))
    if human.prompts:
        out["prompts"] = human.prompts
    emit(out)


async def main(args):
    plan = json.loads(args.plan if args.plan is not None else sys.stdin.read())
    steps = plan["steps"] if isinstance(plan, dict) else plan
    headers = {}
    if args.bearer:
        headers["Authorization"] = f"Bearer {args.bearer}"
    for h in args.header:
        k, _, v = h.partition(":")
        headers[k.strip()] = v.strip()
    human = Human()
    async with create_mcp_http_client(headers=headers) as http:
        transport = streamable_http_client(args.url, http_client=http)
        async with Client(transport, mode=args.mode, elicitation_callback=human) as client:
            info = client.server_info
            emit(
                {
                    "connected": True,
                    "protocolVersion": client.protocol_version,
                    "era": "modern" if client.session.discover_result is not None else "legacy",
                    "server": dump(info) if info is not None else None,
                }
            )
            for i, step in enumerate(steps):
                await run_step(client, human, i, step)


def cli():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--mode", default="auto", choices=["auto", "legacy"])
    p.add_argument("--bearer")
    p.add_argument("--header", action="append", default=[])
    p.add_argument("plan", nargs="?")
    args = p.parse_intermixed_args()
    try:
        anyio.run(main, args)
    except Exception as e:  # noqa: BLE001 - transport failure: reported, exit 2
        err = e
        while isinstance(err, BaseExceptionGroup) and len(err.exceptions) == 1:
            err = err.exceptions[0]
        emit({"fatal": f"{type(err).__name__}: {err}", "error": error_of(err)})
        sys.exit(2)


if __name__ == "__main__":
    cli()
