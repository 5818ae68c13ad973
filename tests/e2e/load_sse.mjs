// Load test: N concurrent streaming completions against the real server (CPU executor,
// llama-tiny). Every stream must end with [DONE] and carry exactly the greedy text of a
// non-streaming reference request. Reports throughput and the server's memory per open stream
// (peak RSS above the idle baseline / peak number of streams open at once).
//   ACTORSERVE_BIN=... node load_sse.mjs [--streams 1000] [--max-tokens 16]
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { startServer } from './server.mjs';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const streams = arg('streams', 1000);
const maxTokens = arg('max-tokens', 16);
const rssKiB = (pid) => Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);

const server = await startServer(['--max-num-seqs', '256']);
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
const body = (stream) => JSON.stringify({ model: 'llama-tiny', prompt: 'Once upon a time', max_tokens: maxTokens,
  temperature: 0, ignore_eos: true, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) });

function post(payload) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: server.port, path: '/v1/completions', method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { data += c; });
      res.on('end', () => resolve({ status: res.statusCode, data }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(payload);
  });
}

const reference = JSON.parse((await post(body(false))).data);
const expected = reference.choices[0].text;
await new Promise((r) => setTimeout(r, 500));
const baseline = rssKiB(server.proc.pid);

let open = 0, peakOpen = 0, peakRss = baseline;
const sampler = setInterval(() => { peakRss = Math.max(peakRss, rssKiB(server.proc.pid)); }, 20);
const started = Date.now();
const results = await Promise.all(Array.from({ length: streams }, async () => {
  open++;
  peakOpen = Math.max(peakOpen, open);
  try {
    const r = await post(body(true));
    const events = r.data.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
    if (r.status !== 200 || events.at(-1) !== '[DONE]') return `status ${r.status}, last event ${events.at(-1)}`;
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    const usage = chunks.pop();
    const text = chunks.map((c) => c.choices[0].text).join('');
    if (text !== expected) return `text ${JSON.stringify(text)} != ${JSON.stringify(expected)}`;
    if (usage.usage?.completion_tokens !== maxTokens) return `usage ${JSON.stringify(usage.usage)}`;
    return null;
  } catch (err) {
    return `error ${err.message}`;
  } finally {
    open--;
  }
}));
const seconds = (Date.now() - started) / 1000;
clearInterval(sampler);
const failures = results.filter((r) => r !== null);
const exitCode = await server.stop();

const perStream = (peakRss - baseline) / peakOpen;
console.log(JSON.stringify({
  streams, max_tokens: maxTokens, ok: streams - failures.length, failed: failures.length,
  first_failures: failures.slice(0, 3), seconds, completion_tokens_per_s: Math.round((streams * maxTokens) / seconds),
  peak_open_streams: peakOpen, server_rss_baseline_mib: +(baseline / 1024).toFixed(1),
  server_rss_peak_mib: +(peakRss / 1024).toFixed(1), server_kib_per_open_stream: +perStream.toFixed(1),
  server_exit_code: exitCode,
}, null, 1));
process.exit(failures.length === 0 && exitCode === 0 ? 0 : 1);
