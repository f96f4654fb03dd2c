// The OpenAI Node SDK's `responses.stream` helper in the documented tool loop
// (`input.push(...response.output)`), pointed at replaygate.
//
// Run by tests/sdk_e2e.rs as `node stream_helper_loop.mjs BASE_URL SENT_LOG`. The helper adds
// `parsed_arguments` to the function calls it returns (and `parsed` to output_text parts), so
// the loop replays them; OpenAI refuses such a history with 400 Unknown parameter. Through a
// provider with the `openai` item profile, replaygate cuts them out and the loop finishes.
// Writes every request sent (path, body as sent, status answered, the x-replaygate-repaired
// header) to SENT_LOG, one JSON object a line. Exits non-zero on the first expectation that fails.

import { expect, main, show, WEATHER_TOOLS } from './harness.mjs';

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

await main(process.argv.slice(2), run, (response) => ({ repaired: response.headers.get('x-replaygate-repaired') }));
