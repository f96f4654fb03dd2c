"""A real WebSocket client (the `websockets` package) through replaygate's WebSocket mode.

Usage: websocket_client.py WS_URL

On one socket it sends a turn, a continuation the gate refuses (its output answers no call of
the chain), a continuation that answers the call the provider produced, and a turn the gate
refuses (arguments that are not a string); it checks that every valid turn is answered through
to `response.completed` and every refused one with an `error` event, and that the socket stays
open throughout. It prints, as one JSON object, the messages it sent that were not refused
(`forwarded`) and the codes of the refusals (`refused_codes`).
"""

import asyncio
import json
import sys

from websockets.asyncio.client import connect


async def read_turn(socket):
    """The events of one turn, up to its terminal event or an error event."""
    events = []
    while True:
        event = json.loads(await asyncio.wait_for(socket.recv(), timeout=10))
        events.append(event)
        if event["type"] in ("response.completed", "response.failed", "error"):
            return events


async def main(url):
    forwarded, refused_codes = [], []
    async with connect(url, additional_headers={"Authorization": "Bearer sk-client"}) as socket:

        async def send(message):
            text = json.dumps(message)
            await socket.send(text)
            events = await read_turn(socket)
            last = events[-1]
            if last["type"] == "error":
                assert last["status"] in (400, 422), last
                assert "violations" in last["error"] or last["status"] == 400, last
                refused_codes.append(last["error"]["code"])
            else:
                assert last["type"] == "response.completed", last
                forwarded.append(text)
            return events

        first = await send(
            {
                "type": "response.create",
                "model": "gpt-5",
                "input": [{"role": "user", "content": "What is the weather in Paris?"}],
                "tools": [
                    {
                        "type": "function",
                        "name": "get_weather",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                    }
                ],
                "store": False,
            }
        )
        completed = first[-1]["response"]
        call = next(item for item in completed["output"] if item["type"] == "function_call")

        def output_for(call_id):
            return {
                "type": "response.create",
                "model": "gpt-5",
                "previous_response_id": completed["id"],
                "input": [{"type": "function_call_output", "call_id": call_id, "output": "sunny"}],
            }

        await send(output_for("call_never_made"))
        await socket.ping()
        await send(output_for(call["call_id"]))
        await send(
            {
                "type": "response.create",
                "model": "gpt-5",
                "input": [
                    {"type": "function_call", "call_id": "c9", "name": "get_weather", "arguments": {"city": 1}},
                ],
            }
        )
    print(json.dumps({"forwarded": forwarded, "refused_codes": refused_codes}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
