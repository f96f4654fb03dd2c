"""The official OpenAI Python SDK, pointed at replaygate.

Run by tests/sdk_e2e.rs as `openai_sdk.py BASE_URL SENT_LOG`: drives the SDK through the proxy and
writes every request it sent (path, body as sent, status answered) to SENT_LOG, one JSON object a
line, so the test can compare them with what the providers received. Exits non-zero with a message
on the first expectation that fails.
"""

import json
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

WEATHER_TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "additionalProperties": False,
            "required": ["city"],
            "properties": {"city": {"type": "string", "description": "City name"}},
        },
        "strict": True,
    }
]


def expect(condition, message):
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def weather(call):
    """Runs a get_weather call the way an application would: parse the arguments, answer."""
    expect(call.name == "get_weather", f"called tool {call.name!r}")
    city = json.loads(call.arguments)["city"]
    return json.dumps({"city": city, "temperature_c": 21, "conditions": "sunny"})


def function_calls(response):
    return [item for item in response.output if item.type == "function_call"]


def tool_turn(client, model, history, question):
    """One user turn of the documented loop: `input += response.output`, then the outputs."""
    history.append({"role": "user", "content": question})
    response = client.responses.create(model=model, input=history, tools=WEATHER_TOOLS)
    calls = function_calls(response)
    expect(len(calls) == 1, f"expected one call for {question!r}: {response.output!r}")
    history += response.output
    for call in calls:
        history.append({"type": "function_call_output", "call_id": call.call_id, "output": weather(call)})
    response = client.responses.create(model=model, input=history, tools=WEATHER_TOOLS)
    expect(response.output_text == "It is sunny.", f"answer after the tool: {response.output_text!r}")
    history += response.output
    return calls[0]


def run(base_url, client_for):
    client = client_for(base_url)

    # Plain: the provider's response comes back as the SDK's Response object.
    response = client.responses.create(model="gpt-5", input="Say hello.")
    expect(response.id.startswith("resp_"), f"plain response id: {response.id!r}")
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
    bedrock = client_for(base_url.replace("/v1", "/bedrock/v1"))
    try:
        bedrock.responses.create(
            model="openai.gpt-oss-120b",
            input=[{"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}}],
        )
        expect(False, "the foreign item was not refused")
    except openai.UnprocessableEntityError as error:
        expect(error.code == "namespaced" and error.param == "input[0].type", f"{error.code!r} {error.param!r}")

    # The previous_response_id loop: turn 2 sends only the tool outputs; the calls they answer
    # live in the stored response.
    question = {"role": "user", "content": "What's the weather in Paris?"}
    first = client.responses.create(model="gpt-5", input=[question], tools=WEATHER_TOOLS)
    calls = function_calls(first)
    expect(len(calls) == 1 and calls[0].status == "completed", f"first turn output: {first.output!r}")
    outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": weather(c)} for c in calls]
    second = client.responses.create(
        model="gpt-5", previous_response_id=first.id, input=outputs, tools=WEATHER_TOOLS
    )
    expect(second.output_text == "It is sunny.", f"previous_response_id answer: {second.output_text!r}")
    expect(second.previous_response_id == first.id, f"previous_response_id {second.previous_response_id!r}")

    # Full history against a provider that numbers call ids per response, as Bedrock Mantle
    # does: the second user turn's call is `call_0` again, after the first `call_0` was answered.
    history = []
    first_call = tool_turn(bedrock, "openai.gpt-oss-120b", history, "What's the weather in Paris?")
    second_call = tool_turn(bedrock, "openai.gpt-oss-120b", history, "And what's the weather in Tokyo?")
    expect(first_call.call_id == second_call.call_id == "call_0", f"call ids {first_call.call_id!r} {second_call.call_id!r}")
    expect(json.loads(second_call.arguments) == {"city": "Tokyo"}, f"arguments {second_call.arguments!r}")

    print("openai sdk e2e: ok")


def main(base_url, sent_log):
    sent = []

    def record(response):
        request = response.request
        sent.append({"path": request.url.path, "status": response.status_code, "body": request.content.decode()})

    def client_for(url):
        http_client = openai.DefaultHttpxClient(event_hooks={"response": [record]}, timeout=20)
        return openai.OpenAI(base_url=url, api_key="sk-client-test", max_retries=0, http_client=http_client)

    try:
        run(base_url, client_for)
    finally:
        with open(sent_log, "w", encoding="utf-8") as log:
            for entry in sent:
                log.write(json.dumps(entry) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
