// End-to-end: DeepSeek-V2 (multi-head latent attention with a latent KV cache, routed + shared
// experts) behind the official OpenAI client, on deepseek-v2-tiny (q_proj, greedy routing) and
// deepseek-v2-qlora-yarn-bf16 (q_a/q_b with q_lora_rank, YaRN, group-limited routing, bf16).
// On the CPU executor completions of reference prompts are transformers' greedy continuations,
// also with streams sharing a prompt prefix (prefix-cache hits on latent blocks) and with the KV
// pool capped far below demand (preemption by recompute); the CUDA executor
// (ACTORSERVE_E2E_DEVICE=cuda) refuses the model at start, naming MLA.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { chatWholeAndStreamed, dataDir, metric, startServer, waitForMetric } from './server.mjs';

const device = process.env.ACTORSERVE_E2E_DEVICE ?? 'cpu';
const greedy = { temperature: 0, ignore_eos: true };
const models = ['deepseek-v2-tiny', 'deepseek-v2-qlora-yarn-bf16'];
const steps = 10;

const servers = new Map();
const dirOf = (model) => path.join(dataDir, 'models', model);
const referenceOf = (model) => JSON.parse(fs.readFileSync(path.join(dirOf(model), 'reference.json'), 'utf8'));

before(async () => {
  if (device !== 'cpu') return;
  for (const model of models) {
    // 24 blocks of 16 tokens: four concurrent 333-token prompts (21 blocks each) cannot all fit.
    const server = await startServer(['--num-gpu-blocks-override', '24', '--max-num-seqs', '8'],
      { modelDir: dirOf(model), servedName: model });
    const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0 });
    servers.set(model, { server, client });
  }
});

after(async () => {
  for (const { server } of servers.values()) assert.equal(await server.stop(), 0, server.log());
});

/// The text of the first `n` greedy ids of a reference case, as the server detokenizes them.
async function expectedText(base, model, ids) {
  const r = await fetch(`${base}/detokenize`, { method: 'POST', body: JSON.stringify({ model, tokens: ids }) });
  assert.equal(r.status, 200);
  return (await r.json()).prompt;
}

for (const model of models) {
  test(`${model}: completions of reference prompts are transformers' greedy continuations`,
    { skip: device !== 'cpu' }, async () => {
      const { server, client } = servers.get(model);
      for (const c of referenceOf(model).cases.filter((c) => [7, 63].includes(c.prompt_ids.length))) {
        const r = await client.completions.create({ model, prompt: c.prompt_ids, max_tokens: steps, ...greedy });
        assert.equal(r.choices[0].text, await expectedText(server.base, model, c.greedy_ids.slice(0, steps)),
          `prompt of ${c.prompt_ids.length} tokens`);
        assert.equal(r.usage.completion_tokens, steps);
      }
    });

  test(`${model}: concurrent streams over a shared prefix and a pool below demand keep the greedy continuation`,
    { skip: device !== 'cpu' }, async () => {
      const { server, client } = servers.get(model);
      const c = referenceOf(model).cases.find((c) => c.prompt_ids.length === 333);
      const want = await expectedText(server.base, model, c.greedy_ids.slice(0, steps));
      const hitsBefore = await metric(server.base, 'actorserve:prefix_cache_hits_total');
      const preemptionsBefore = await metric(server.base, 'actorserve:num_preemptions_total');
      const texts = await Promise.all(Array.from({ length: 4 }, async () => {
        let text = '';
        const stream = await client.completions.create(
          { model, prompt: c.prompt_ids, max_tokens: steps, stream: true, ...greedy });
        for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
        return text;
      }));
      for (const text of texts) assert.equal(text, want);
      const hits = await metric(server.base, 'actorserve:prefix_cache_hits_total');
      const preemptions = await metric(server.base, 'actorserve:num_preemptions_total');
      assert.ok(hits > hitsBefore || preemptions > preemptionsBefore,
        `neither a prefix-cache hit nor a preemption (hits ${hitsBefore} -> ${hits}, ` +
        `preemptions ${preemptionsBefore} -> ${preemptions})`);
      // Every block is back in the pool once the streams are done.
      assert.equal(await waitForMetric(server.base, 'actorserve:num_requests_running', 0), 0);
      assert.equal(await waitForMetric(server.base, 'actorserve:kv_blocks_used', 0), 0);
    });
}

test('chat on DeepSeek-V2: streamed content equals the whole message', { skip: device !== 'cpu' }, async () => {
  const model = models[0];
  const { client } = servers.get(model);
  const body = { model, messages: [{ role: 'user', content: 'Which latent answers?' }], max_tokens: 8, ...greedy };
  const { whole, streamed } = await chatWholeAndStreamed(client, body);
  assert.equal(streamed, whole.choices[0].message.content);
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 8);
});

test('the CUDA executor refuses DeepSeek-V2 at start, naming latent attention', { skip: device === 'cpu' }, async () => {
  await assert.rejects(startServer([], { modelDir: dirOf(models[0]), servedName: models[0] }),
    /multi-head latent attention/);
});
