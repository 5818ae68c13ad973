// End-to-end: the chat API's field handling, tools, structured outputs and logit_bias with the
// official OpenAI client against the real server binary (docs/chat-api.md). The tiny random model
// writes noise, so tool-call parsing of free output is covered by the C++ suites (test_openai's
// parser cases, test_server's scripted engine); here: the request path, the response shape, that
// every field is honoured or refused by name, and that grammar-constrained outputs (zod schemas
// through the SDK's parse helper, forced tool calls also inside the SDK's tool-running loop,
// json_object, guided_*) hold whatever the model.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { startServer } from './server.mjs';

const model = 'llama-tiny';
const device = process.env.ACTORSERVE_E2E_DEVICE ?? 'cpu';
const greedy = { temperature: 0, ignore_eos: true };
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
// Tools whose arguments have a finite language, so that a random model's forced calls finish.
const finiteTools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
  parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Oslo'] },
    days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city', 'days'], additionalProperties: false } } }];
const user = [{ role: 'user', content: 'Weather in Paris?' }];

let withTools;   // --enable-auto-tool-choice --tool-call-parser hermes, Qwen2.5's template
let plain;       // no tool flags
let client;
let plainClient;

before(async () => {
  withTools = await startServer(['--enable-auto-tool-choice', '--tool-call-parser', 'hermes'],
    { chatTemplate: 'chat_templates/tools/qwen2.5-instruct.jinja' });
  plain = await startServer();
  client = new OpenAI({ baseURL: `${withTools.base}/v1`, apiKey: 'unused', maxRetries: 0 });
  plainClient = new OpenAI({ baseURL: `${plain.base}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  assert.equal(await withTools.stop(), 0, withTools.log());
  assert.equal(await plain.stop(), 0, plain.log());
});

async function refused(promise, param, pattern) {
  await assert.rejects(promise, (err) => {
    assert.equal(err.status, 400, `${param}: ${err.message}`);
    assert.equal(err.param, param, err.message);
    if (pattern) assert.match(err.message, pattern);
    return true;
  });
}

async function tokenize(base, body) {
  const r = await fetch(`${base}/tokenize`, { method: 'POST', body: JSON.stringify({ model, ...body }) });
  assert.equal(r.status, 200);
  return (await r.json()).tokens;
}

test('tools reach the template: the rendered prompt lists them', async () => {
  const without = await tokenize(withTools.base, { messages: user });
  const withDefs = await tokenize(withTools.base, { messages: user, tools });
  assert.ok(withDefs.length > without.length + 20, `${withDefs.length} vs ${without.length}`);
});

test('tool calls non-streamed: the response is well formed whatever the model writes', async () => {
  const r = await client.chat.completions.create({ model, messages: user, tools, max_tokens: 8, ...greedy });
  const c = r.choices[0];
  assert.ok(['stop', 'length', 'tool_calls'].includes(c.finish_reason));
  assert.equal(c.message.role, 'assistant');
  if (c.finish_reason === 'tool_calls') assert.ok(c.message.tool_calls.length > 0);
  else assert.equal(typeof c.message.content, 'string');
});

test('tool calls streamed: chunks assemble into the same message as the whole response', async () => {
  const body = { model, messages: user, tools, max_tokens: 8, ...greedy };
  const whole = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let content = '';
  let finish;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    content += c.delta.content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.equal(content, whole.choices[0].message.content ?? '');
});

test('a tool round trip renders: assistant tool_calls and the tool answer', async () => {
  const messages = [...user,
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '21 C and sunny' }];
  const before = await tokenize(withTools.base, { messages: user, tools });
  const after = await tokenize(withTools.base, { messages, tools });
  assert.ok(after.length > before.length + 10, 'the call and the answer are in the prompt');
  const r = await client.chat.completions.create({ model, messages, tools, max_tokens: 4, ...greedy });
  assert.equal(r.choices[0].message.role, 'assistant');
  await refused(client.chat.completions.create({ model, tools, max_tokens: 4, messages: [...user,
    { role: 'assistant', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{oops' } }] }] }),
  'messages[1].tool_calls[0].function.arguments');
});

test('tool_choice none and parallel_tool_calls are accepted', async () => {
  const r = await client.chat.completions.create({ model, messages: user, tools, tool_choice: 'none',
    parallel_tool_calls: false, max_tokens: 4, ...greedy });
  assert.notEqual(r.choices[0].finish_reason, 'tool_calls');
});

test('tool_choice required and a named function give tool calls whose arguments match the schema', async () => {
  // Grammar-constrained: needs no tool-call parser, so the plain server answers too.
  for (const [c, seed] of [[plainClient, 1], [client, 2]]) {
    const r = await c.chat.completions.create({ model, messages: user, tools: finiteTools, tool_choice: 'required',
      parallel_tool_calls: false, seed, max_tokens: 100 });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.tool_calls.length, 1);
    const call = choice.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, 'get_weather');
    const args = JSON.parse(call.function.arguments);
    assert.ok(['Paris', 'Oslo'].includes(args.city), call.function.arguments);
    assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7, call.function.arguments);
  }
  const named = await plainClient.chat.completions.create({ model, messages: user, tools: finiteTools, seed: 3,
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 100 });
  assert.equal(named.choices[0].finish_reason, 'stop');
  const args = JSON.parse(named.choices[0].message.tool_calls[0].function.arguments);
  assert.deepEqual(Object.keys(args), ['city', 'days']);
  // Streamed: the call's first piece carries id and name, the arguments follow in pieces.
  const stream = await plainClient.chat.completions.create({ model, messages: user, tools: finiteTools, seed: 3,
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 100, stream: true });
  let streamed = '';
  let name;
  for await (const chunk of stream) {
    for (const piece of chunk.choices[0]?.delta?.tool_calls ?? []) {
      name ??= piece.function?.name;
      streamed += piece.function?.arguments ?? '';
    }
  }
  assert.equal(name, 'get_weather');
  assert.equal(streamed, named.choices[0].message.tool_calls[0].function.arguments);
  await refused(plainClient.chat.completions.create({ model, messages: user, tools: finiteTools,
    tool_choice: { type: 'function', function: { name: 'nope' } } }), 'tool_choice', /no tool named/);
});

test('the SDK\'s tool-running loop: forced calls run the tool and its answers go back as tool messages', async () => {
  const calls = [];
  const runnable = [{ type: 'function', function: { ...finiteTools[0].function, parse: JSON.parse,
    function: (args) => { calls.push(args); return { city: args.city, forecast: 'sunny' }; } } }];
  // A named function: one round, then the runner stops.
  const once = plainClient.beta.chat.completions.runTools({ model, messages: user, tools: runnable, seed: 5,
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 100 });
  await once.done();
  assert.deepEqual(once.messages.map((m) => m.role), ['user', 'assistant', 'tool']);
  // 'required' for two rounds: the second request carries the first round's assistant tool_calls
  // and the tool's answer, which the server renders into the prompt.
  const twice = plainClient.beta.chat.completions.runTools({ model, messages: user, tools: runnable, seed: 6,
    tool_choice: 'required', parallel_tool_calls: false, max_tokens: 100 }, { maxChatCompletions: 2 });
  await twice.done();
  assert.deepEqual(twice.messages.map((m) => m.role), ['user', 'assistant', 'tool', 'assistant', 'tool']);
  assert.equal(calls.length, 3);
  for (const args of calls) {
    assert.ok(['Paris', 'Oslo'].includes(args.city), JSON.stringify(args));
    assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7, JSON.stringify(args));
  }
  const answer = JSON.parse(twice.messages[2].content);
  assert.equal(answer.forecast, 'sunny');
  assert.equal(twice.messages[2].tool_call_id, twice.messages[1].tool_calls[0].id);
});

test('tools without --enable-auto-tool-choice are a 400 naming tools', async () => {
  await refused(plainClient.chat.completions.create({ model, messages: user, tools }), 'tools',
    /--enable-auto-tool-choice/);
});

test('structured outputs: parse with zodResponseFormat gives a value the zod schema accepts', async () => {
  const Person = z.object({
    name: z.string().max(6),
    age: z.number().int().min(0).max(120),
    color: z.enum(['red', 'green', 'blue']),
    member: z.boolean(),
    tags: z.array(z.string().max(3)).max(2),
    nickname: z.string().max(4).nullable(),
  });
  for (const seed of [1, 2, 3]) {
    const r = await plainClient.beta.chat.completions.parse({ model, messages: user, seed, max_tokens: 300,
      response_format: zodResponseFormat(Person, 'person') });
    const message = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'stop', message.content);
    assert.ok(message.parsed, message.content);
    assert.deepEqual(Person.parse(message.parsed), message.parsed);
  }
});

test('structured outputs: json_object, guided_choice and guided_regex on both endpoints', async () => {
  for (const seed of [1, 2, 3]) {
    const r = await plainClient.chat.completions.create({ model, messages: user, seed, max_tokens: 80,
      response_format: { type: 'json_object' } });
    const { content } = r.choices[0].message;
    assert.equal(content[0], '{', content);
    if (r.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(content), 'object');
  }
  const choice = await plainClient.chat.completions.create({ model, messages: user, seed: 4,
    guided_choice: ['sunny', 'rainy', 'snow'] });
  assert.ok(['sunny', 'rainy', 'snow'].includes(choice.choices[0].message.content));
  const regex = await plainClient.completions.create({ model, prompt: 'Flight:', seed: 5, max_tokens: 20,
    guided_regex: '[A-Z]{2}[0-9]{3,4}' });
  assert.match(regex.choices[0].text, /^[A-Z]{2}[0-9]{3,4}$/);
  const vllm = await plainClient.completions.create({ model, prompt: 'x', seed: 6, max_tokens: 40,
    structured_outputs: { json: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } } });
  assert.equal(typeof JSON.parse(vllm.choices[0].text).ok, 'boolean');
});

test('structured outputs: what the grammar engine cannot honour is refused by name', async () => {
  const schema = { type: 'json_schema', json_schema: { name: 'w', schema: { type: 'object',
    properties: { a: { type: 'string', format: 'uri' } } } } };
  await refused(plainClient.chat.completions.create({ model, messages: user, response_format: schema }),
    'response_format.json_schema.schema', /'format'/);
  await refused(plainClient.chat.completions.create({ model, messages: user, guided_regex: '(a)\\1' }),
    'guided_regex', /backreference/);
  await refused(plainClient.chat.completions.create({ model, messages: user, guided_grammar: 'root ::= "a"' }),
    'guided_grammar');
  await refused(plainClient.completions.create({ model, prompt: 'x', guided_json: { type: 'object' },
    guided_choice: ['a'] }), 'guided_choice', /already/);
  const text = await client.chat.completions.create({ model, messages: user, response_format: { type: 'text' },
    max_tokens: 2, ...greedy });
  assert.equal(text.choices[0].message.role, 'assistant');
});

test('every other unsupported or unknown field is refused by name', async () => {
  const chatFields = { audio: { voice: 'alloy', format: 'mp3' }, modalities: ['text', 'audio'], prediction: { type: 'content', content: 'x' },
    store: true, metadata: { k: 'v' }, reasoning_effort: 'low', verbosity: 'low', web_search_options: {},
    functions: [{ name: 'f' }], function_call: 'auto', service_tier: 'flex', use_beam_search: true, best_of: 3,
    not_a_field: 1 };
  for (const [field, value] of Object.entries(chatFields))
    await refused(client.chat.completions.create({ model, messages: user, [field]: value }), field);
  for (const [field, value] of Object.entries({ suffix: 'end', echo: true, best_of: 2, not_a_field: 1 }))
    await refused(client.completions.create({ model, prompt: 'x', [field]: value }), field);
});

test('accepted identifiers and neutral values do not change the output', async () => {
  const body = { model, messages: user, max_tokens: 6, ...greedy };
  const base = await client.chat.completions.create(body);
  const same = await client.chat.completions.create({ ...body, user: 'u1', safety_identifier: 's', prompt_cache_key: 'k',
    store: false, service_tier: 'auto', modalities: ['text'], n: 1, best_of: 1, parallel_tool_calls: true });
  assert.equal(same.choices[0].message.content, base.choices[0].message.content);
});

test('logit_bias steers greedy decoding (or is refused by an executor without it)', async () => {
  const body = { model, prompt: 'Once upon a time', max_tokens: 6, ...greedy, return_token_ids: true };
  const base = await client.completions.create(body);
  const firstId = base.choices[0].token_ids[0];
  const forcedId = firstId === 42 ? 43 : 42;
  if (device !== 'cpu') {
    await refused(client.completions.create({ ...body, logit_bias: { [forcedId]: 100 } }), 'logit_bias');
    return;
  }
  const forced = await client.completions.create({ ...body, logit_bias: { [forcedId]: 100 } });
  assert.deepEqual(forced.choices[0].token_ids, Array(6).fill(forcedId));
  const banned = await client.completions.create({ ...body, logit_bias: { [firstId]: -100 } });
  assert.ok(!banned.choices[0].token_ids.includes(firstId));
  const clamped = await client.completions.create({ ...body, logit_bias: { [forcedId]: 1e6 } });
  assert.deepEqual(clamped.choices[0].token_ids, forced.choices[0].token_ids, 'values clamp to 100');
  await refused(client.completions.create({ ...body, logit_bias: { abc: 1 } }), 'logit_bias');
  await refused(client.completions.create({ ...body, logit_bias: { 999999: 1 } }), 'logit_bias');
});

test('n with streaming keeps each choice on its own index', async () => {
  const stream = await client.chat.completions.create({ model, messages: user, n: 3, max_tokens: 5, stream: true,
    temperature: 0.8, seed: 7, ignore_eos: true });
  const text = new Map();
  const finish = new Map();
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text.set(c.index, (text.get(c.index) ?? '') + (c.delta.content ?? ''));
      if (c.finish_reason) finish.set(c.index, c.finish_reason);
    }
  }
  assert.deepEqual([...text.keys()].sort(), [0, 1, 2]);
  assert.deepEqual([...finish.values()], ['length', 'length', 'length']);
});

test('chat_template_kwargs: an object is accepted, anything else is refused by name', async () => {
  const r = await fetch(`${withTools.base}/tokenize`, { method: 'POST',
    body: JSON.stringify({ model, messages: user, chat_template_kwargs: 7 }) });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.param, 'chat_template_kwargs');
  const ok = await client.chat.completions.create({ model, messages: user, max_tokens: 2, ...greedy,
    chat_template_kwargs: { enable_thinking: false } });
  assert.equal(ok.choices[0].message.role, 'assistant');
});
