// End-to-end: the playground page at GET /, in a real Chromium driven by puppeteer-core.
// Two conversations stream at once over the page's one WebSocket; stopping one ends its stream
// while the other runs to max_tokens; with --api-key the page asks for the key and sends it.
// Exits 77 (ctest skips) when no Chromium is installed.
// The screenshot goes to $ACTORSERVE_E2E_OUT/playground.png (the build folder under ctest).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { dataDir, startServer } from './server.mjs';

const chromium = process.env.CHROMIUM_BIN ?? ['chromium', 'chromium-browser', 'google-chrome']
  .flatMap((name) => (process.env.PATH ?? '').split(':').map((dir) => path.join(dir, name)))
  .find((file) => fs.existsSync(file));
if (!chromium) {
  console.log('SKIP: no chromium on PATH (apt-get install chromium)');
  process.exit(77);
}
const { default: puppeteer } = await import('puppeteer-core');

// Streams long enough that the stop lands mid-stream even when the browser gets far less CPU
// than the server: llama-tiny with its position limit raised from 2048 (its weights are random,
// so any position is as good as another).
const maxTokens = 12000;
const outDir = process.env.ACTORSERVE_E2E_OUT ?? os.tmpdir();
let server;
let browser;
let modelDir;

/// A copy of llama-tiny (links to its files) whose config.json allows 16384 positions.
function longTinyModel() {
  const source = path.join(dataDir, 'models/llama-tiny');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'llama-tiny-long-'));
  for (const file of fs.readdirSync(source))
    if (file !== 'config.json') fs.symlinkSync(path.join(source, file), path.join(dir, file));
  const config = JSON.parse(fs.readFileSync(path.join(source, 'config.json'), 'utf8'));
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...config, max_position_embeddings: 16384 }));
  return dir;
}

before(async () => {
  modelDir = longTinyModel();
  server = await startServer([], { modelDir });
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ['--no-sandbox', '--headless=new', '--disable-gpu', '--disable-dev-shm-usage'],
  });
});

after(async () => {
  await browser?.close();
  const code = await server?.stop();
  fs.rmSync(modelDir, { recursive: true, force: true });
  assert.equal(code, 0, `SIGTERM should drain and exit 0; log:\n${server?.log()}`);
});

/// A page on `base` that records requests leaving the server's origin and script errors.
async function openPage(base) {
  const page = await browser.newPage();
  page.setDefaultTimeout(60000);
  await page.setViewport({ width: 1280, height: 800 });
  const outside = [];
  const errors = [];
  page.on('request', (r) => { if (!r.url().startsWith(base) && !r.url().startsWith('data:')) outside.push(r.url()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  const response = await page.goto(`${base}/`, { waitUntil: 'load' });
  assert.equal(response.status(), 200);
  assert.equal(response.headers()['content-type'], 'text/html; charset=utf-8');
  return { page, outside, errors };
}

/// The state, token count, text and stats of conversation `n` (1-based).
function conversation(page, n) {
  return page.$eval(`.conv[data-conv="${n}"]`, (el) => ({
    state: el.dataset.state,
    tokens: Number(el.dataset.tokens ?? 0),
    text: el.querySelector('.msg.assistant')?.textContent ?? '',
    label: el.querySelector('.state').textContent,
    ttft: el.querySelector('.ttft').textContent,
    rate: el.querySelector('.rate').textContent,
  }));
}

test('two conversations stream side by side on one socket; stop ends one, the other finishes', async () => {
  const { page, outside, errors } = await openPage(server.base);
  await page.waitForSelector('#socket[data-socket="open"]');
  await page.waitForFunction(() => document.querySelector('#model').textContent === 'llama-tiny');

  await page.$eval('#max-tokens', (el, v) => { el.value = String(v); }, maxTokens);
  await page.click('#ignore-eos');
  await page.type('#system', 'You are terse.');
  await page.type('.conv[data-conv="1"] .input', 'Tell me a story');
  await page.type('.conv[data-conv="2"] .input', 'And another one');
  await page.click('#send-all');  // both requests leave in one task, on the page's one socket

  // Stop conversation 1 in the same tick that sees both streaming, so the stop lands mid-stream
  // however fast or slow the machine generates.
  const atStop = await page.waitForFunction(() => {
    const [a, b] = [1, 2].map((n) => document.querySelector(`.conv[data-conv="${n}"]`));
    const streaming = (c) => c.dataset.state === 'running' && Number(c.dataset.tokens) > 0 &&
      c.querySelector('.msg.assistant').textContent.length > 0;
    if (!streaming(a) || !streaming(b)) return false;
    a.querySelector('.stop').click();
    return { a: Number(a.dataset.tokens), b: Number(b.dataset.tokens) };
  }, { polling: 'mutation', timeout: 60000 }).then((h) => h.jsonValue());
  assert.ok(atStop.a > 0 && atStop.b > 0, 'tokens arrived in both conversations');

  await page.waitForSelector('.conv[data-conv="1"][data-state="stopped"]', { timeout: 30000 });
  const stopped = await conversation(page, 1);
  assert.ok(stopped.tokens < maxTokens, `the stopped stream ended early (${stopped.tokens} tokens)`);
  assert.match(stopped.ttft, /^\d+ ms$/);

  await page.waitForSelector('.conv[data-conv="2"][data-state="done"]', { timeout: 120000 });
  const finished = await conversation(page, 2);
  assert.equal(finished.tokens, maxTokens, 'the other conversation ran to max_tokens');
  assert.equal(finished.label, 'done (length)');
  assert.ok(finished.tokens > atStop.b || atStop.b === maxTokens, 'the other conversation streamed on');
  assert.match(finished.ttft, /^\d+ ms$/);
  assert.match(finished.rate, /^\d+(\.\d)?$/);
  const later = await conversation(page, 1);
  assert.equal(later.text, stopped.text, 'nothing arrived for the stopped conversation');
  assert.equal(later.tokens, stopped.tokens);

  await page.waitForFunction(() => /^\d+\.\d %$/.test(document.querySelector('#kv').textContent), { timeout: 10000 });
  fs.mkdirSync(outDir, { recursive: true });
  await page.screenshot({ path: path.join(outDir, 'playground.png'), fullPage: true });
  assert.deepEqual(outside, [], 'the page loads nothing from outside the server');
  assert.deepEqual(errors, [], 'no script errors');
  await page.close();
});

test('completion mode sends the raw prompt and shows the finish reason', async () => {
  const { page, errors } = await openPage(server.base);
  await page.waitForSelector('#socket[data-socket="open"]');
  await page.click('input[name=mode][value=completions]');
  assert.equal(await page.$eval('#system', (el) => el.disabled), true, 'no system prompt without the chat template');
  await page.$eval('#max-tokens', (el) => { el.value = '8'; });
  await page.click('#ignore-eos');
  await page.type('.conv[data-conv="1"] .input', 'Once upon a time');
  await page.click('.conv[data-conv="1"] .send');
  await page.waitForSelector('.conv[data-conv="1"][data-state="done"]', { timeout: 60000 });
  const c = await conversation(page, 1);
  assert.equal(c.tokens, 8);
  assert.equal(c.label, 'done (length)');
  assert.equal(await page.$eval('.conv[data-conv="1"] .msg.prompt', (el) => el.textContent), 'Once upon a time');
  assert.deepEqual(errors, []);
  await page.close();
});

test('with --api-key the page loads, asks for the key, and sends it on fetches and the WebSocket URL', async () => {
  const key = 'sk-playground';
  const guarded = await startServer(['--api-key', key], { modelDir });
  try {
    const { page, errors } = await openPage(guarded.base);
    await page.waitForSelector('#key-dialog[open]');
    const sockets = [];
    const cdp = await page.createCDPSession();
    await cdp.send('Network.enable');
    cdp.on('Network.webSocketCreated', (e) => sockets.push(new URL(e.url)));
    await page.type('#key-input', key);
    await page.click('#key-form button[type=submit]');
    await page.waitForFunction(() => document.querySelector('#model').textContent === 'llama-tiny');
    assert.equal(await page.evaluate(() => sessionStorage.getItem('actorserve.api_key')), key);
    await page.waitForSelector('#socket[data-socket="open"]');  // the upgrade took the key from the URL
    await page.waitForFunction(() => /^\d+\.\d %$/.test(document.querySelector('#kv').textContent), { timeout: 10000 });
    assert.ok(sockets.some((u) => u.pathname === '/v1/stream' && u.searchParams.get('api_key') === key),
      `a WebSocket carries the key: ${sockets.join(' ')}`);
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    await guarded.stop();
  }
});
