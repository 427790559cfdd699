"""Drives one `kith mcp` session with the official Python MCP SDK.

Reads a JSON document on stdin: {"command": ..., "args": [...], "env": {...},
"steps": [...]}. Each step is {"op": "list_tools"} or {"op": "call", "tool":
NAME, "args": {...}}; the string "$citation" in a call's arguments is the
first kith:// citation of the previous answer. Prints one JSON list, one
result per step: the tools (name, description, input schema), or a call's
{"is_error", "text", "ms"} (ms: the stdio round trip) or {"protocol_error"}
when the server refused the request itself. The Rust test
(tests/tests/mcp.rs) asserts on it; kith-eval --pack times searches with it.
"""

import json
import re
import sys
import time

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

CITATION = re.compile(r"kith://[A-Za-z0-9]+/[A-Za-z0-9]+#L\d+-L\d+")


def substitute(value, citation):
    if value == "$citation":
        return citation
    if isinstance(value, dict):
        return {k: substitute(v, citation) for k, v in value.items()}
    return value


async def run(plan):
    params = StdioServerParameters(command=plan["command"], args=plan["args"], env=plan["env"])
    results = []
    citation = None
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for step in plan["steps"]:
                if step["op"] == "list_tools":
                    listed = await session.list_tools()
                    results.append(
                        [
                            {
                                "name": t.name,
                                "description": t.description,
                                "input_schema": t.input_schema,
                            }
                            for t in listed.tools
                        ]
                    )
                    continue
                args = substitute(step.get("args", {}), citation)
                started = time.perf_counter()
                try:
                    res = await session.call_tool(step["tool"], args)
                except Exception as e:  # the server answered with a JSON-RPC error
                    results.append({"protocol_error": str(e)})
                    continue
                text = "\n".join(c.text for c in res.content if getattr(c, "text", None))
                found = CITATION.search(text)
                citation = found.group(0) if found else None
                ms = (time.perf_counter() - started) * 1000
                results.append({"is_error": bool(res.is_error), "text": text, "ms": ms})
    return results


def main():
    plan = json.load(sys.stdin)
    print(json.dumps(anyio.run(run, plan)))


if __name__ == "__main__":
    main()
