"""A downstream on the real Python `mcp` 2.3 SDK (`MCPServer`) served over Streamable HTTP,
speaking both eras: 2025-11-25 sessions (`initialize`) and 2026-07-28 (`server/discover`,
stateless, `input_required` + `requestState` for its questions).

Usage: py_server.py PORT [--json-response] [--stateless]
  echo(message)              -> "Echo: <message>"
  ask_reason(path)           asks "Why touch <path>?" {reason} -> "reason for <path>: <reason>"
                             (a decline or cancel ends the call with an error result)
Serves http://127.0.0.1:PORT/mcp (the SDK's own DNS-rebinding protection is on: loopback
Host/Origin only).
"""

import sys
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from pydantic import BaseModel

server = MCPServer("py-http")


class Reason(BaseModel):
    reason: str


def ask(path: str):
    return Elicit(f"Why touch {path}?", Reason)


@server.tool()
def echo(message: str) -> str:
    """Echoes the message back."""
    return f"Echo: {message}"


@server.tool()
def ask_reason(path: str, reason: Annotated[Reason, Resolve(ask)]) -> str:
    """Asks the user why, then answers with the reason."""
    return f"reason for {path}: {reason.reason}"


if __name__ == "__main__":
    port = int(sys.argv[1])
    server.run(
        "streamable-http",
        host="127.0.0.1",
        port=port,
        json_response="--json-response" in sys.argv,
        stateless_http="--stateless" in sys.argv,
    )
