// The official OpenAI Node SDK, pointed at replaygate.
//
// Run by tests/sdk_e2e.rs as `node openai_sdk.mjs BASE_URL SENT_LOG`: drives the SDK through the
// proxy and writes every request it sent (path, body as sent, status answered) to SENT_LOG, one
// JSON object a line, so the test can compare them with what the provider received. Exits non-zero
// with a message on the first expectation that fails.

import OpenAI from 'openai';

import { expect, main, show, WEATHER_TOOLS } from './harness.mjs';

/** Runs a get_weather call the way an application would: parse the arguments, answer. */
function weather(call) {
  expect(call.name === 'get_weather', `called tool ${show(call.name)}`);
  const { city } = JSON.parse(call.arguments);
  return JSON.stringify({ city, temperature_c: 21, conditions: 'sunny' });
}

const functionCalls = (response) => response.output.filter((item) => item.type === 'function_call');

async function run(client) {
  // Plain: the provider's response comes back as the SDK's Response object.
  const plain = await client.responses.create({ model: 'gpt-5', input: 'Say hello.' });
  expect(plain.id.startsWith('resp_'), `plain response id: ${show(plain.id)}`);
  expect(plain.output_text === 'Hello', `plain output_text: ${show(plain.output_text)}`);

  // Streaming: events arrive one by one and the SDK parses each.
  const stream = await client.responses.create({ model: 'gpt-5', input: 'Say hello.', stream: true });
  const kinds = [];
  let text = '';
  for await (const event of stream) {
    kinds.push(event.type);
    if (event.type === 'response.output_text.delta') text += event.delta;
  }
  expect(kinds[0] === 'response.created', `first event: ${show(kinds)}`);
  expect(kinds.at(-1) === 'response.completed', `last event: ${show(kinds)}`);
  expect(text === 'Hello', `streamed text: ${show(text)}`);

  // A replayed call whose arguments break its tool's schema: the SDK throws an
  // UnprocessableEntityError whose `error` is the envelope's error object.
  const broken = [
    { role: 'user', content: "What's the weather in Paris?" },
    {
      type: 'function_call',
      id: 'fc_009',
      call_id: 'call_129',
      name: 'get_weather',
      arguments: '{"city":42}',
      status: 'completed',
    },
    { type: 'function_call_output', call_id: 'call_129', output: 'sunny' },
  ];
  let refused = null;
  try {
    await client.responses.create({ model: 'gpt-5', input: broken, tools: WEATHER_TOOLS });
  } catch (err) {
    refused = err;
  }
  expect(refused instanceof OpenAI.UnprocessableEntityError, `not refused with 422: ${refused}`);
  expect(refused.status === 422, `status ${refused.status}`);
  expect(refused.code === 'arguments_schema', `code ${show(refused.code)}`);
  expect(refused.param === 'input[1].arguments', `param ${show(refused.param)}`);
  expect(refused.type === 'invalid_request_error', `type ${show(refused.type)}`);
  const violations = refused.error?.violations;
  expect(Array.isArray(violations) && violations.length === 1, `violations ${show(violations)}`);
  expect(
    violations[0].index === 1 && violations[0].call_id === 'call_129' && violations[0].pointer === '/city',
    `violation ${show(violations[0])}`,
  );

  // The documented full-history loop: input = [...input, ...response.output, outputs], two turns.
  let input = [{ role: 'user', content: "What's the weather in Paris?" }];
  const asked = await client.responses.create({ model: 'gpt-5', input, tools: WEATHER_TOOLS });
  const calls = functionCalls(asked);
  expect(calls.length === 1 && calls[0].status === 'completed', `first turn output: ${show(asked.output)}`);
  expect(JSON.parse(calls[0].arguments).city === 'Paris', `arguments ${show(calls[0].arguments)}`);
  input = [
    ...input,
    ...asked.output,
    ...calls.map((call) => ({ type: 'function_call_output', call_id: call.call_id, output: weather(call) })),
  ];
  const answered = await client.responses.create({ model: 'gpt-5', input, tools: WEATHER_TOOLS });
  expect(answered.output_text === 'It is sunny.', `full-history answer: ${show(answered.output_text)}`);

  // The agent drops the tool in its next turn: the replayed call names a tool the request no
  // longer declares, which is only monitored; the answer names it in a header.
  input = [...input, ...answered.output, { role: 'user', content: 'Thanks!' }];
  const { data: thanked, response: raw } = await client.responses
    .create({ model: 'gpt-5', input })
    .withResponse();
  expect(thanked.output_text === 'Hello', `turn without tools: ${show(thanked.output_text)}`);
  const monitored = raw.headers.get('x-replaygate-monitored');
  expect(monitored === 'unknown_tool@input[1]', `x-replaygate-monitored: ${show(monitored)}`);

  // The previous_response_id loop: turn 2 sends only the outputs; their calls live in the
  // stored response.
  const first = await client.responses.create({
    model: 'gpt-5',
    input: [{ role: 'user', content: "What's the weather in Berlin?" }],
    tools: WEATHER_TOOLS,
  });
  const pending = functionCalls(first);
  expect(pending.length === 1, `first turn output: ${show(first.output)}`);
  const second = await client.responses.create({
    model: 'gpt-5',
    previous_response_id: first.id,
    input: pending.map((call) => ({ type: 'function_call_output', call_id: call.call_id, output: weather(call) })),
    tools: WEATHER_TOOLS,
  });
  expect(second.output_text === 'It is sunny.', `previous_response_id answer: ${show(second.output_text)}`);
  expect(second.previous_response_id === first.id, `previous_response_id ${show(second.previous_response_id)}`);

  console.log('openai node sdk e2e: ok');
}

await main(process.argv.slice(2), run);
