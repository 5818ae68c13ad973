// End-to-end: a mixture-of-experts model (qwen3-moe-tiny: Qwen3-MoE, 8 experts top 2, q/k norm)
// behind the official OpenAI client, on the CPU executor or (ACTORSERVE_E2E_DEVICE=cuda) the
// CUDA one. On the CPU executor the completion of a reference prompt is transformers' greedy
// continuation (fp32); on either, a completion runs its max_tokens and chat streams what it
// returns whole.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { chatWholeAndStreamed, dataDir, startServer } from './server.mjs';

const model = 'qwen3-moe-tiny';
const modelDir = path.join(dataDir, 'models', model);
const device = process.env.ACTORSERVE_E2E_DEVICE ?? 'cpu';
const greedy = { temperature: 0, ignore_eos: true };

let server;
let client;

before(async () => {
  server = await startServer([], { modelDir, servedName: model });
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  if (server) assert.equal(await server.stop(), 0, server.log());
});

test('the completion of a reference prompt is transformers\' greedy continuation', { skip: device !== 'cpu' }, async () => {
  const reference = JSON.parse(fs.readFileSync(path.join(modelDir, 'reference.json'), 'utf8'));
  for (const c of reference.cases.filter((c) => [7, 63].includes(c.prompt_ids.length))) {
    const steps = 12;
    const r = await client.completions.create({ model, prompt: c.prompt_ids, max_tokens: steps, ...greedy });
    const detok = await fetch(`${server.base}/detokenize`, {
      method: 'POST', body: JSON.stringify({ model, tokens: c.greedy_ids.slice(0, steps) }) });
    assert.equal(detok.status, 200);
    assert.equal(r.choices[0].text, (await detok.json()).prompt, `prompt of ${c.prompt_ids.length} tokens`);
    assert.equal(r.usage.completion_tokens, steps);
  }
});

test('chat: streamed content equals the whole message', async () => {
  const body = { model, messages: [{ role: 'user', content: 'Which expert answers?' }], max_tokens: 10, ...greedy };
  const { whole, streamed } = await chatWholeAndStreamed(client, body);
  assert.equal(streamed, whole.choices[0].message.content);
  assert.equal(whole.choices[0].finish_reason, 'length');
});

test('a completion of a reference prompt runs its max_tokens', async () => {
  const reference = JSON.parse(fs.readFileSync(path.join(modelDir, 'reference.json'), 'utf8'));
  const c = reference.cases.find((c) => c.prompt_ids.length === 63);
  const r = await client.completions.create({ model, prompt: c.prompt_ids, max_tokens: 12, ...greedy });
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.choices[0].finish_reason, 'length');
});
