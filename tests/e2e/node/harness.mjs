// What the Node SDK scripts share: the weather tool, expectations, and a main that drives the
// SDK through a fetch that logs every request it sent.

import { writeFileSync } from 'node:fs';
import OpenAI from 'openai';

export const WEATHER_TOOLS = [
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

export class Failed extends Error {}

export function expect(condition, message) {
  if (!condition) throw new Failed(message);
}

export const show = (value) => JSON.stringify(value);

// Runs `run(client)` with an SDK client for BASE_URL, writing each request's exact body as the
// SDK handed it to fetch, its path and the status answered (plus `extra(response)`'s members)
// to SENT_LOG, one JSON object a line. A failed expectation exits non-zero with its message.
export async function main([baseURL, sentLog], run, extra = () => ({})) {
  const sent = [];
  const recordingFetch = async (url, init) => {
    const response = await fetch(url, init);
    expect(typeof init?.body === 'string', `request body is not text: ${typeof init?.body}`);
    sent.push({ path: new URL(url).pathname, status: response.status, body: init.body, ...extra(response) });
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
