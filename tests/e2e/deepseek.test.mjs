// End-to-end: DeepSeek-V2 (multi-head latent attention with a latent KV cache, routed + shared
// experts) behind the official OpenAI client, on deepseek-v2-tiny (q_proj, greedy routing) and
// deepseek-v2-qlora-yarn-bf16 (q_a/q_b with q_lora_rank, YaRN, group-limited routing, bf16).
// On either executor (ACTORSERVE_E2E_DEVICE=cuda for the CUDA one) completions of reference
// prompts are transformers' greedy continuations, also with streams sharing a prompt prefix
// (prefix-cache hits on latent blocks) and with the KV pool capped far below demand (preemption
// by recompute).
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

// 24 blocks of 16 tokens: four concurrent 333-token prompts (22 blocks each) cannot all fit. The
// CUDA executor takes 16-token blocks when asked, and a pool must hold one sequence of
// --max-model-len there.
const poolArgs = ['--num-gpu-blocks-override', '24', '--max-num-seqs', '8',
  ...(device === 'cpu' ? [] : ['--block-size', '16', '--max-model-len', '384'])];

before(async () => {
  for (const model of models) {
    const server = await startServer(poolArgs, { modelDir: dirOf(model), servedName: model });
    const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0 });
    servers.set(model, { server, client });
  }
});

after(async () => {
  for (const { server } of servers.values()) assert.equal(await server.stop(), 0, server.log());
});

/// Reference steps an executor must reproduce: all of them on the CPU (fp32, as transformers
/// computed them); on the GPU (bf16/fp16) those before the first step whose reference top-2 margin
/// is under 5e-2, where rounding may pick the other token (as test_cuda's reference test does).
function matchedSteps(c) {
  if (device === 'cpu') return steps;
  const small = c.greedy_top2_margins.slice(0, steps).findIndex((m) => m < 5e-2);
  return small < 0 ? steps : small;
}

/// The output continues the reference: equals it on the CPU, starts with its matched steps on the GPU.
function assertContinues(text, want, what) {
  if (device === 'cpu') assert.equal(text, want, what);
  else assert.ok(text.startsWith(want), `${what}: ${JSON.stringify(text)} does not start with ${JSON.stringify(want)}`);
}

/// The text of the first `n` greedy ids of a reference case, as the server detokenizes them.
async function expectedText(base, model, ids) {
  const r = await fetch(`${base}/detokenize`, { method: 'POST', body: JSON.stringify({ model, tokens: ids }) });
  assert.equal(r.status, 200);
  return (await r.json()).prompt;
}

for (const model of models) {
  test(`${model}: completions of reference prompts are transformers' greedy continuations`, async () => {
      const { server, client } = servers.get(model);
      for (const c of referenceOf(model).cases.filter((c) => [7, 63].includes(c.prompt_ids.length))) {
        const r = await client.completions.create({ model, prompt: c.prompt_ids, max_tokens: steps, ...greedy });
        assertContinues(r.choices[0].text, await expectedText(server.base, model, c.greedy_ids.slice(0, matchedSteps(c))),
          `prompt of ${c.prompt_ids.length} tokens`);
        assert.equal(r.usage.completion_tokens, steps);
      }
    });

  test(`${model}: concurrent streams over a shared prefix and a pool below demand keep the greedy continuation`,
    async () => {
      const { server, client } = servers.get(model);
      const c = referenceOf(model).cases.find((c) => c.prompt_ids.length === 333);
      const want = await expectedText(server.base, model, c.greedy_ids.slice(0, matchedSteps(c)));
      const hitsBefore = await metric(server.base, 'actorserve:prefix_cache_hits_total');
      const preemptionsBefore = await metric(server.base, 'actorserve:num_preemptions_total');
      const texts = await Promise.all(Array.from({ length: 4 }, async () => {
        let text = '';
        const stream = await client.completions.create(
          { model, prompt: c.prompt_ids, max_tokens: steps, stream: true, ...greedy });
        for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
        return text;
      }));
      for (const text of texts) assertContinues(text, want, 'a stream');
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

test('chat on DeepSeek-V2: streamed content equals the whole message', async () => {
  const model = models[0];
  const { client } = servers.get(model);
  const body = { model, messages: [{ role: 'user', content: 'Which latent answers?' }], max_tokens: 8, ...greedy };
  const { whole, streamed } = await chatWholeAndStreamed(client, body);
  assert.equal(streamed, whole.choices[0].message.content);
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 8);
});
