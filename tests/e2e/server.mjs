// Starts the actorserve binary (ACTORSERVE_BIN) on llama-tiny or `modelDir` (CPU executor unless
// ACTORSERVE_E2E_DEVICE says otherwise) and port 0,
// and finds the bound port in its "listening on http://HOST:PORT" log line.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const dataDir = process.env.ACTORSERVE_TEST_DATA ?? path.resolve(here, '../data');

/// `options`: `chatTemplate` (under the test data), `modelDir` (default llama-tiny), `servedName`.
export async function startServer(extraArgs = [], {
  chatTemplate = 'chat_templates/templates/meta-llama-3-8b-instruct.jinja',
  modelDir = path.join(dataDir, 'models/llama-tiny'),
  servedName = 'llama-tiny',
} = {}) {
  const bin = process.env.ACTORSERVE_BIN;
  if (!bin) throw new Error('set ACTORSERVE_BIN to the actorserve binary');
  // ACTORSERVE_E2E_DEVICE=cuda runs the same tests against the CUDA executor (the GPU suite does).
  const device = process.env.ACTORSERVE_E2E_DEVICE ?? 'cpu';
  // On a GPU a fixed, small KV pool: a test file may run two servers at once, and each would
  // otherwise size its pool from the memory the other one already holds.
  // A test's own --num-gpu-blocks-override replaces that pool (the flag may be given once).
  const ownPool = extraArgs.includes('--num-gpu-blocks-override');
  const deviceArgs = device === 'cpu' ? ['--device', 'cpu', '--cpu-threads', '1']
    : ['--device', device, ...(ownPool ? [] : ['--num-gpu-blocks-override', '512'])];
  const args = ['serve', '--model', modelDir, ...deviceArgs, '--port', '0',
    '--served-model-name', servedName,
    '--chat-template', path.join(dataDir, chatTemplate), ...extraArgs];
  const proc = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 60000);
    const onData = (chunk) => {
      log += chunk.toString();
      const m = log.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    };
    proc.stderr.on('data', onData);
    proc.stdout.on('data', onData);
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited with ${code}:\n${log}`)); });
  });
  proc.stderr.on('data', (c) => { log += c.toString(); });
  const stop = () => new Promise((resolve) => {
    if (proc.exitCode !== null) { resolve(proc.exitCode); return; }
    proc.once('exit', (code, signal) => resolve(code ?? signal));
    proc.kill('SIGTERM');
  });
  return { proc, port, base: `http://127.0.0.1:${port}`, stop, log: () => log };
}

/// Polls /metrics until `metric` has `value` (or the timeout passes); returns the last value.
export async function waitForMetric(base, name, value, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await metric(base, name);
    if (last === value || Date.now() > deadline) return last;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/// The current value of one metric (its first series); undefined when absent.
export async function metric(base, name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const m = text.match(new RegExp(`^${name.replace(/[:]/g, '\\:')}(?:\\{[^}]*\\})? (\\S+)$`, 'm'));
  return m ? Number(m[1]) : undefined;
}

/// A chat request answered whole and streamed: `{ whole, streamed }` (the streamed deltas'
/// content joined), for tests that the two agree.
export async function chatWholeAndStreamed(client, body) {
  const whole = await client.chat.completions.create(body);
  let streamed = '';
  for await (const chunk of await client.chat.completions.create({ ...body, stream: true }))
    streamed += chunk.choices[0]?.delta?.content ?? '';
  return { whole, streamed };
}
