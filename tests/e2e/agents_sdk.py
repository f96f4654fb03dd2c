"""The OpenAI Agents SDK's tool loop with `store=False`, pointed at replaygate: an agent on a
reasoning model (`gpt-5`) asks for the weather, runs its tool, answers; the next run replays
`result.to_input_list()` with a new question. That history holds each answer's reasoning item
by `id` alone (the SDK keeps no `encrypted_content` unless asked for it), which a provider that
stored nothing answers with 404.

Run by tests/it/agents_sdk.rs as `agents_sdk.py BASE_URL`. Prints `agents sdk e2e: ok` when
every turn of both runs was answered; exits non-zero with the provider's error otherwise.
"""

import asyncio
import json
import sys

from agents import (
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI, APIStatusError


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return json.dumps({"city": city, "temperature_c": 21, "conditions": "sunny"})


async def main(base_url):
    # Nothing leaves for the SDK's own trace exporter.
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="sk-client", max_retries=0)
    agent = Agent(
        name="weather",
        instructions="Answer questions about the weather with the get_weather tool.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model="gpt-5", openai_client=client),
        model_settings=ModelSettings(store=False),
    )
    history = [{"role": "user", "content": "What is the weather in Paris?"}]
    for turn, question in enumerate(["Paris", "Lyon"]):
        if turn:
            history = result.to_input_list() + [
                {"role": "user", "content": f"And what is the weather in {question}?"}
            ]
        try:
            result = await Runner.run(agent, history)
        except APIStatusError as error:
            print(f"FAILED: run {turn}: {error.status_code} {error.message}", file=sys.stderr)
            sys.exit(1)
        if result.final_output != "It is sunny.":
            print(f"FAILED: run {turn}: final output {result.final_output!r}", file=sys.stderr)
            sys.exit(1)
    replayed = [item.get("type") for item in result.to_input_list()]
    print(f"replayed item types: {replayed}")
    print("agents sdk e2e: ok")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
