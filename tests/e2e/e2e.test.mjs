// End-to-end: the real server binary, driven by the official OpenAI client and by `ws`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import WebSocket from 'ws';
import { metric, startServer, waitForMetric } from './server.mjs';

let server;
let client;
const greedy = { temperature: 0, ignore_eos: true };

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  const code = await server.stop();
  assert.equal(code, 0, `SIGTERM should drain and exit 0; log:\n${server.log()}`);
});

test('models lists the served model', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['llama-tiny']);
});

test('completions: streamed text equals the whole response, include_usage ends the stream', async () => {
  const whole = await client.completions.create({ model: 'llama-tiny', prompt: 'Once upon a time', max_tokens: 10, ...greedy });
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.choices.length, 1);
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 10);
  assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + 10);

  const stream = await client.completions.create({ model: 'llama-tiny', prompt: 'Once upon a time', max_tokens: 10, ...greedy,
    stream: true, stream_options: { include_usage: true } });
  let text = '';
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  const last = chunks.pop();
  for (const c of chunks) {
    assert.equal(c.usage, null);
    text += c.choices[0].text;
  }
  assert.deepEqual(last.choices, []);
  assert.deepEqual(last.usage, whole.usage);
  assert.equal(text, whole.choices[0].text);
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
});

test('seeded sampling: streaming and non-streaming give the same text; another seed differs', async () => {
  const body = { model: 'llama-tiny', prompt: 'The weather today', max_tokens: 24, temperature: 0.9, top_p: 0.95,
    ignore_eos: true, seed: 1234 };
  const whole = await client.completions.create(body);
  const again = await client.completions.create(body);
  assert.equal(again.choices[0].text, whole.choices[0].text, 'same seed, same text');
  let text = '';
  for await (const chunk of await client.completions.create({ ...body, stream: true })) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, whole.choices[0].text);
  const texts = new Set();
  for (const seed of [1, 2, 3, 4]) texts.add((await client.completions.create({ ...body, seed })).choices[0].text);
  assert.ok(texts.size > 1, 'different seeds should not all give the same text');
});

test('chat: role chunk first, streamed content equals the whole message', async () => {
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me a story.' }];
  const whole = await client.chat.completions.create({ model: 'llama-tiny', messages, max_tokens: 8, ...greedy });
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.equal(whole.usage.completion_tokens, 8);

  const stream = await client.chat.completions.create({ model: 'llama-tiny', messages, max_tokens: 8, ...greedy, stream: true });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.equal(chunks[0].object, 'chat.completion.chunk');
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const content = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.equal(content, whole.choices[0].message.content);
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
});

test('n=2 and several prompts give indexed choices', async () => {
  const r = await client.completions.create({ model: 'llama-tiny', prompt: ['Hello', 'The sky'], n: 2, max_tokens: 4, ...greedy });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.equal(r.choices[0].text, r.choices[1].text);  // greedy: the samples agree
  assert.equal(r.choices[2].text, r.choices[3].text);
  assert.equal(r.usage.completion_tokens, 16);
});

test('stop strings cut the text before the stop string', async () => {
  const full = await client.completions.create({ model: 'llama-tiny', prompt: 'Once upon a time', max_tokens: 12, ...greedy });
  const text = full.choices[0].text;
  const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 2);
  const cut = await client.completions.create({ model: 'llama-tiny', prompt: 'Once upon a time', max_tokens: 12, ...greedy, stop: [stop] });
  assert.equal(cut.choices[0].text, text.slice(0, text.indexOf(stop)));
  assert.equal(cut.choices[0].finish_reason, 'stop');
});

test('logprobs in both endpoint shapes', async () => {
  const c = await client.completions.create({ model: 'llama-tiny', prompt: 'Hello', max_tokens: 5, ...greedy, logprobs: 2 });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.length, 5);
  assert.equal(lp.token_logprobs.length, 5);
  assert.equal(lp.top_logprobs.length, 5);
  assert.equal(lp.tokens.join(''), c.choices[0].text);
  for (const v of lp.token_logprobs) assert.ok(v <= 0);
  const chat = await client.chat.completions.create({ model: 'llama-tiny', messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 4, ...greedy, logprobs: true, top_logprobs: 3 });
  const content = chat.choices[0].logprobs.content;
  assert.equal(content.length, 4);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(Array.isArray(t.bytes));
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[2].logprob);
  }
});

test('errors are OpenAI error objects naming the field', async () => {
  await assert.rejects(client.completions.create({ model: 'llama-tiny', prompt: 'x', top_p: 2 }), (err) => {
    assert.equal(err.status, 400);
    assert.equal(err.param, 'top_p');
    assert.equal(err.type, 'invalid_request_error');
    return true;
  });
  await assert.rejects(client.completions.create({ model: 'nope', prompt: 'x' }), (err) => err.status === 404);
  await assert.rejects(client.chat.completions.create({ model: 'llama-tiny', messages: [] }),
    (err) => err.status === 400 && err.param === 'messages');
});

function openSocket() {
  const ws = new WebSocket(`${server.base.replace('http', 'ws')}/v1/stream`);
  const frames = [];
  const waiters = [];
  ws.on('message', (data) => {
    const f = JSON.parse(data.toString());
    frames.push(f);
    for (const w of [...waiters]) if (w.pred(f)) { waiters.splice(waiters.indexOf(w), 1); w.resolve(f); }
  });
  const waitFor = (pred) => {
    const found = frames.find(pred);
    if (found) return Promise.resolve(found);
    return new Promise((resolve) => waiters.push({ pred, resolve }));
  };
  return new Promise((resolve, reject) => {
    ws.on('open', () => resolve({ ws, frames, waitFor }));
    ws.on('error', reject);
  });
}

test('websocket multiplexes requests and matches HTTP output', async () => {
  const prompts = ['Once upon a time', 'Hello', 'The sky', 'In a hole', 'Rain'];
  const expected = await Promise.all(prompts.map((p) =>
    client.completions.create({ model: 'llama-tiny', prompt: p, max_tokens: 6, ...greedy })));
  const { ws, frames, waitFor } = await openSocket();
  prompts.forEach((p, i) => ws.send(JSON.stringify({ type: 'completions', id: `r${i}`, body: { prompt: p, max_tokens: 6, ...greedy } })));
  ws.send(JSON.stringify({ type: 'chat', id: 'c1', body: { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3, ...greedy } }));
  ws.send(JSON.stringify({ type: 'completions', id: 'bad', body: { prompt: 'x', top_p: 5 } }));
  const dones = await Promise.all([...prompts.map((_, i) => `r${i}`), 'c1'].map((id) => waitFor((f) => f.type === 'done' && f.id === id)));
  const err = await waitFor((f) => f.type === 'error' && f.id === 'bad');
  assert.equal(err.error.param, 'top_p');
  prompts.forEach((_, i) => {
    const text = frames.filter((f) => f.type === 'delta' && f.id === `r${i}`).map((f) => f.text).join('');
    assert.equal(text, expected[i].choices[0].text);
    assert.equal(dones[i].usage.completion_tokens, 6);
  });
  assert.equal(dones[5].usage.completion_tokens, 3);
  ws.close();
});

test('websocket cancel frame ends the request at once', async () => {
  const { ws, frames, waitFor } = await openSocket();
  ws.send(JSON.stringify({ type: 'completions', id: 'long', body: { prompt: 'Once', max_tokens: 1500, ...greedy } }));
  await waitFor((f) => f.type === 'delta' && f.id === 'long');
  ws.send(JSON.stringify({ type: 'cancel', id: 'long' }));
  const done = await waitFor((f) => f.type === 'done' && f.id === 'long');
  assert.ok(done.usage.completion_tokens < 1500);
  const count = frames.length;
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(frames.length, count, 'no frames after the done frame');
  assert.equal(await waitForMetric(server.base, 'actorserve:num_requests_running', 0), 0);
  ws.close();
});

test('websocket disconnect mid-stream cancels every request on it', async () => {
  const cancelledBefore = await metric(server.base, 'actorserve:requests_cancelled_total');
  const { ws, waitFor } = await openSocket();
  for (let i = 0; i < 4; i++)
    ws.send(JSON.stringify({ type: 'completions', id: `d${i}`, body: { prompt: 'Once', max_tokens: 1500, ...greedy } }));
  await Promise.all([0, 1, 2, 3].map((i) => waitFor((f) => f.type === 'delta' && f.id === `d${i}`)));
  assert.ok(await waitForMetric(server.base, 'actorserve:num_requests_running', 4, 2000) >= 1);
  ws.terminate();
  assert.equal(await waitForMetric(server.base, 'actorserve:num_requests_running', 0), 0);
  assert.equal(await waitForMetric(server.base, 'actorserve:num_requests_waiting', 0), 0);
  assert.equal(await metric(server.base, 'actorserve:requests_cancelled_total'), cancelledBefore + 4);
});

test('SSE client that disconnects mid-stream is cancelled', async () => {
  const cancelledBefore = await metric(server.base, 'actorserve:requests_cancelled_total');
  const controller = new AbortController();
  const stream = await client.completions.create({ model: 'llama-tiny', prompt: 'Once', max_tokens: 1500, ...greedy, stream: true },
    { signal: controller.signal });
  let n = 0;
  try {
    for await (const _ of stream) if (++n === 3) { controller.abort(); break; }
  } catch (err) {
    assert.equal(err.name, 'AbortError');  // the client ends the iteration or throws, by version
  }
  assert.equal(n, 3);
  assert.equal(await waitForMetric(server.base, 'actorserve:num_requests_running', 0), 0);
  assert.equal(await metric(server.base, 'actorserve:requests_cancelled_total'), cancelledBefore + 1);
});
