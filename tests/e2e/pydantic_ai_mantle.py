"""pydantic-ai's Amazon Bedrock Mantle provider, pointed at replaygate.

Run by tests/it/pydantic_ai_e2e.rs as `pydantic_ai_mantle.py ORIGIN SENT_LOG`. The provider is
given only the proxy's origin, as it would be given Mantle's: it builds Mantle's own paths itself,
`/openai/v1/responses` for the GPT-5 models and `/v1/responses` for gpt-oss. For each model an
agent runs two user turns of a tool loop (the second replays the first's history). Every request
sent (path, body as sent, status answered) goes to SENT_LOG, one JSON object a line, so the test
can compare them with what the provider received. Exits non-zero with a message on the first
expectation that fails.
"""

import asyncio
import json
import sys

import openai
from pydantic_ai import Agent
from pydantic_ai.models.bedrock_mantle import BedrockMantleResponsesModel
from pydantic_ai.providers.bedrock_mantle import BedrockMantleProvider


def expect(condition, message):
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


async def tool_loop(provider, model_name):
    """Two user turns, each a call to `get_weather` and the answer after it."""
    asked = []
    agent = Agent(BedrockMantleResponsesModel(model_name, provider=provider))

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        asked.append(city)
        return json.dumps({"city": city, "temperature_c": 21, "conditions": "sunny"})

    first = await agent.run("What is the weather in Paris?")
    expect(first.output == "It is sunny.", f"{model_name} turn 1 answered {first.output!r}")
    second = await agent.run("And what is the weather in Lisbon?", message_history=first.all_messages())
    expect(second.output == "It is sunny.", f"{model_name} turn 2 answered {second.output!r}")
    expect(asked == ["Paris", "Lisbon"], f"{model_name} called get_weather for {asked!r}")


async def main(origin, sent_log):
    sent = []

    async def record(response):
        request = response.request
        sent.append({"path": request.url.path, "status": response.status_code, "body": request.content.decode()})

    http_client = openai.DefaultAsyncHttpxClient(event_hooks={"response": [record]}, timeout=20)
    # A Bedrock API key sent as a bearer token; replaygate holds the provider's own credential.
    provider = BedrockMantleProvider(base_url=origin, api_key="bedrock-client-key", http_client=http_client)
    try:
        await tool_loop(provider, "openai.gpt-5.4")
        await tool_loop(provider, "openai.gpt-oss-120b")
    finally:
        with open(sent_log, "w", encoding="utf-8") as log:
            for entry in sent:
                log.write(json.dumps(entry) + "\n")
    print("pydantic-ai mantle e2e: ok")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
