"""Agent frameworks on the Responses API, pointed at replaygate: LangChain (`langchain-openai`,
`use_responses_api=True`) and pydantic-ai (its OpenAI Responses model), each in a tool loop that
asks for the weather, runs the tool and replays the whole history on the next turn.

Run by tests/it/frameworks.rs as `frameworks.py BASE_URL`. Prints `frameworks e2e: ok` when every
turn of every loop was answered; exits non-zero with a message on the first one that was not.
"""

import json
import sys


def expect(condition, message):
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return json.dumps({"city": city, "temperature_c": 21, "conditions": "sunny"})


def langchain_loop(base_url):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    weather = tool(get_weather)
    model = ChatOpenAI(
        model="gpt-5", base_url=base_url, api_key="sk-client", use_responses_api=True, max_retries=0
    ).bind_tools([weather])
    history = [HumanMessage("What is the weather in Paris?")]
    for turn in range(2):
        answer = model.invoke(history)
        history.append(answer)
        expect(answer.tool_calls, f"langchain turn {turn}: no tool call in {answer!r}")
        for call in answer.tool_calls:
            history.append(ToolMessage(weather.invoke(call["args"]), tool_call_id=call["id"]))
        answer = model.invoke(history)
        history.append(answer)
        expect(not answer.tool_calls, f"langchain turn {turn}: another call in {answer!r}")
        expect(answer.content, f"langchain turn {turn}: empty answer")
        history.append(HumanMessage("And what is the weather in Berlin?"))


def pydantic_ai_loop(base_url):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIResponsesModel("gpt-5", provider=OpenAIProvider(base_url=base_url, api_key="sk-client"))
    agent = Agent(model, tools=[get_weather])
    first = agent.run_sync("What is the weather in Paris?")
    expect(first.output, "pydantic-ai: no answer to the first run")
    calls = [part for message in first.all_messages() for part in message.parts
             if getattr(part, "part_kind", "") == "tool-call"]
    expect(calls, "pydantic-ai: the first run made no tool call")
    second = agent.run_sync("And what is the weather in Berlin?", message_history=first.all_messages())
    expect(second.output, "pydantic-ai: no answer to the second run")


def main():
    base_url = sys.argv[1]
    langchain_loop(base_url)
    pydantic_ai_loop(base_url)
    print("frameworks e2e: ok")


if __name__ == "__main__":
    main()
