// The official OpenAI Node SDK against replaygate serving HTTPS, its CA added with
// NODE_EXTRA_CA_CERTS.
//
// Run by tests/it/tls_serve.rs as `node openai_sdk_tls.mjs BASE_URL SENT_LOG`: a plain response,
// a streamed one and a gated request (422) over TLS. Exits non-zero with a message on the first
// expectation that fails.

import OpenAI from 'openai';

import { expect, main, show } from './harness.mjs';

async function run(client) {
  const plain = await client.responses.create({ model: 'gpt-5', input: 'Say hello.' });
  expect(plain.output_text === 'Hello', `plain output_text: ${show(plain.output_text)}`);

  const stream = await client.responses.create({ model: 'gpt-5', input: 'Say hello.', stream: true });
  const kinds = [];
  let text = '';
  for await (const event of stream) {
    kinds.push(event.type);
    if (event.type === 'response.output_text.delta') text += event.delta;
  }
  expect(kinds[0] === 'response.created' && kinds.at(-1) === 'response.completed', `events: ${show(kinds)}`);
  expect(text === 'Hello', `streamed text: ${show(text)}`);

  try {
    await client.responses.create({
      model: 'gpt-5',
      input: [{ type: 'function_call_output', call_id: 'call_nowhere', output: 'x' }],
    });
    expect(false, 'the gated request was not refused');
  } catch (err) {
    expect(err instanceof OpenAI.UnprocessableEntityError, `error: ${err}`);
  }
  console.log('openai node sdk tls: ok');
}

await main(process.argv.slice(2), run);
