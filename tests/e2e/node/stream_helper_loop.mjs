// The OpenAI Node SDK's `responses.stream` helper in the documented tool loop
// (`input.push(...response.output)`), pointed at replaygate.
//
// Run by tests/sdk_e2e.rs as `node stream_helper_loop.mjs BASE_URL SENT_LOG`. The helper adds
// `parsed_arguments` to the function calls it returns (and `parsed` to output_text parts), so
// the loop replays them; OpenAI refuses such a history with 400 Unknown parameter. Through a
// provider with the `openai` item profile, replaygate cuts them out and the loop finishes.
// Writes every request sent (path, body as sent, status answered, the x-replaygate-repaired
// header) to SENT_LOG, one JSON object a line. Exits non-zero on the first expectation that fails.

import { writeFileSync } from 'node:fs';
import OpenAI from 'openai';

const WEATHER_TOOLS = [
  {
    type: 'function',
    name: 'get_weather',
    description: 'Get the current weather in a city.',
    parameters: {
      type: 'object',
      additionalProperties: false,
      required: ['city'],
      properties: { city: { type: 'string', description: 'City name' } },
    },
    strict: true,
  },
];

class Failed extends Error {}

function expect(condition, message) {
  if (!condition) throw new Failed(message);
}

const show = (value) => JSON.stringify(value);

async function run(client) {
  const input = [{ role: 'user', content: "What's the weather in Paris?" }];
  let parsedSeen = 0;
  let answer = null;
  for (let turn = 1; turn <= 4 && answer === null; turn += 1) {
    const stream = client.responses.stream({ model: 'gpt-4.1', input, tools: WEATHER_TOOLS });
    const response = await stream.finalResponse();
    // The documented loop: the response's output goes back into the history as returned.
    input.push(...response.output);
    const calls = response.output.filter((item) => item.type === 'function_call');
    if (calls.length === 0) {
      answer = response.output_text;
      break;
    }
    for (const call of calls) {
      if ('parsed_arguments' in call) parsedSeen += 1;
      const { city } = JSON.parse(call.arguments);
      input.push({
        type: 'function_call_output',
        call_id: call.call_id,
        output: JSON.stringify({ city, temperature_c: 21, conditions: 'sunny' }),
      });
    }
  }
  expect(parsedSeen > 0, 'the stream helper added no parsed_arguments: nothing to show');
  expect(answer === 'It is sunny.', `the loop's answer: ${show(answer)}`);
  console.log(`node stream helper loop: ok (${parsedSeen} parsed_arguments replayed)`);
}

async function main([baseURL, sentLog]) {
  const sent = [];
  const recordingFetch = async (url, init) => {
    const response = await fetch(url, init);
    expect(typeof init?.body === 'string', `request body is not text: ${typeof init?.body}`);
    sent.push({
      path: new URL(url).pathname,
      status: response.status,
      body: init.body,
      repaired: response.headers.get('x-replaygate-repaired'),
    });
    return response;
  };
  const client = new OpenAI({
    baseURL,
    apiKey: 'sk-client-test',
    maxRetries: 0,
    timeout: 20_000,
    fetch: recordingFetch,
  });
  try {
    await run(client);
  } catch (err) {
    console.error(`FAILED: ${err instanceof Failed ? err.message : err?.stack ?? err}`);
    process.exitCode = 1;
  } finally {
    writeFileSync(sentLog, sent.map((entry) => `${JSON.stringify(entry)}\n`).join(''));
  }
}

await main(process.argv.slice(2));
