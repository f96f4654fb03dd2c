"""The official OpenAI Python SDK, pointed at replaygate.

Run by tests/sdk_e2e.rs with the proxy's base URL as the only argument; exits non-zero with a
message on the first expectation that fails.
"""

import sys

import openai

TOOLS = [
    {
        "type": "function",
        "name": "get_latest_sales_report",
        "description": "Latest sales report for a region",
        "parameters": {
            "type": "object",
            "additionalProperties": False,
            "required": ["region"],
            "properties": {"region": {"type": "string", "enum": ["apac", "emea", "amer"]}},
        },
    }
]


def expect(condition, message):
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def main(base_url):
    client = openai.OpenAI(base_url=base_url, api_key="sk-client-test", max_retries=0, timeout=20)

    # Plain: the provider's response comes back as the SDK's Response object.
    response = client.responses.create(model="gpt-5", input="Say hello.")
    expect(response.id == "resp_e2e", f"plain response id: {response.id!r}")
    expect(response.output_text == "Hello", f"plain output_text: {response.output_text!r}")

    # Streaming: events arrive one by one and the SDK parses each.
    stream = client.responses.create(model="gpt-5", input="Say hello.", stream=True)
    kinds, deltas = [], []
    for event in stream:
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
    expect(kinds[0] == "response.created", f"first event: {kinds}")
    expect(kinds[-1] == "response.completed", f"last event: {kinds}")
    expect("".join(deltas) == "Hello", f"streamed text: {deltas}")

    # A replayed call that breaks its tool's schema: the SDK raises with code and param.
    history = [
        {"type": "message", "role": "user", "content": "Sales report for APAC?"},
        {
            "type": "function_call",
            "id": "fc_009",
            "name": "get_latest_sales_report",
            "call_id": "call_129",
            "arguments": '{"region":"global"}',
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "call_129", "output": "..."},
    ]
    try:
        client.responses.create(model="gpt-5", input=history, tools=TOOLS)
        expect(False, "the gated request was not refused")
    except openai.UnprocessableEntityError as error:
        expect(error.status_code == 422, f"status {error.status_code}")
        expect(error.code == "arguments_schema", f"code {error.code!r}")
        expect(error.param == "input[1].arguments", f"param {error.param!r}")
        expect(error.type == "invalid_request_error", f"type {error.type!r}")
        violations = error.body.get("violations") if isinstance(error.body, dict) else None
        expect(violations and violations[0]["pointer"] == "/region", f"violations {violations!r}")

    # An item only OpenAI understands, sent to Bedrock through its path prefix.
    bedrock = openai.OpenAI(base_url=base_url.replace("/v1", "/bedrock/v1"), api_key="x", max_retries=0)
    try:
        bedrock.responses.create(
            model="openai.gpt-oss-120b",
            input=[{"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}}],
        )
        expect(False, "the foreign item was not refused")
    except openai.UnprocessableEntityError as error:
        expect(error.code == "namespaced" and error.param == "input[0].type", f"{error.code!r} {error.param!r}")

    print("openai sdk e2e: ok")


if __name__ == "__main__":
    main(sys.argv[1])
