// End-to-end: a mixture-of-experts model (qwen3-moe-tiny: Qwen3-MoE, 8 experts top 2, q/k norm)
// behind the official OpenAI client. On the CPU executor the completion of a reference prompt
// is transformers' greedy continuation and chat streams what it returns whole; the CUDA
// executor (ACTORSERVE_E2E_DEVICE=cuda) refuses the model at start, naming --device cpu.
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
  if (device !== 'cpu') return;
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

test('chat: streamed content equals the whole message', { skip: device !== 'cpu' }, async () => {
  const body = { model, messages: [{ role: 'user', content: 'Which expert answers?' }], max_tokens: 10, ...greedy };
  const { whole, streamed } = await chatWholeAndStreamed(client, body);
  assert.equal(streamed, whole.choices[0].message.content);
  assert.equal(whole.choices[0].finish_reason, 'length');
});

test('the CUDA executor refuses the model at start, naming --device cpu', { skip: device === 'cpu' }, async () => {
  await assert.rejects(startServer([], { modelDir, servedName: model }), /mixture-of-experts.*--device cpu/s);
});
