/**
 * `npm run bench -- collective`: one all-reduce of 256 MiB of float32 between 2 ranks (two
 * processes on loopback), three ways in the same run: rtjob's `gloo` (a c10d group in the torch
 * addon, the array reduced where it lies), rtjob's `ring` (runtime/collective/ring.ts), and
 * Python's torch.distributed Gloo (python3-torch, the same libtorch). The rtjob ranks are
 * actors of one local cluster; the Python ranks are two `/usr/bin/python3` processes. Each row
 * is the median of the rounds' seconds (every round starts after a barrier), as algorithm
 * bandwidth (bytes / seconds; with 2 ranks the bus bandwidth is the same).
 *
 * `BENCH_COLLECTIVE_MIB` (256), `BENCH_COLLECTIVE_ROUNDS` (5). Writes bench/results/collective.json.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { defineActor, get, init, kill, shutdown } from '../runtime/index.ts';
import type { CollectiveBackend } from '../runtime/index.ts';
import { cpuModel } from './machine.ts';

type MemberT = typeof import('../test/fixtures/runtime/collective-member.ts').Member;
const Member = defineActor<MemberT>(
  new URL('../test/fixtures/runtime/collective-member.ts', import.meta.url),
  'Member',
);
const peer = fileURLToPath(new URL('../test/fixtures/runtime/torch_dist_peer.py', import.meta.url));

const mib = Number(process.env.BENCH_COLLECTIVE_MIB ?? 256);
const rounds = Number(process.env.BENCH_COLLECTIVE_ROUNDS ?? 5);
const elements = (mib << 20) / 4;

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

async function rtjob(backend: CollectiveBackend): Promise<number[]> {
  const members = [0, 1].map((r) => Member.remote(`bench-${backend}`, r, 2));
  try {
    await get(members.map((m) => m.joinOn.remote(backend)));
    const times = await get(members.map((m) => m.timeRounds.remote(elements, rounds)));
    // A round ends when its slower rank ends.
    return times[0]!.map((t, i) => Math.max(t, times[1]![i]!));
  } finally {
    await get(members.map((m) => m.destroy.remote())).catch(() => {});
    await Promise.all(members.map((m) => kill(m)));
  }
}

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as { port: number };
  await new Promise((r) => srv.close(r));
  return port;
}

async function python(): Promise<number[]> {
  const port = await freePort();
  const runs = [0, 1].map(
    (rank) =>
      new Promise<number[]>((resolve, reject) => {
        const p = spawn(
          '/usr/bin/python3',
          [peer, String(port), String(rank), '2', 'bench', String(elements), String(rounds)],
          { env: { ...process.env, GLOO_SOCKET_IFNAME: 'lo' }, stdio: ['ignore', 'pipe', 'pipe'] },
        );
        let out = '';
        let err = '';
        p.stdout.on('data', (d: Buffer) => (out += d.toString()));
        p.stderr.on('data', (d: Buffer) => (err += d.toString()));
        p.on('exit', (code) =>
          code === 0
            ? resolve(JSON.parse(out.trim()) as number[])
            : reject(new Error(`python rank ${rank} exited ${code}: ${err.slice(-400)}`)),
        );
      }),
  );
  const [a, b] = await Promise.all(runs);
  return a!.map((t, i) => Math.max(t, b![i]!));
}

await init({ address: 'local', local: { node: { numCpus: 4 } } });
const rows: { name: string; medianS: number; gbPerS: number; rounds: number[] }[] = [];
try {
  for (const [name, run] of [
    ['gloo (rtjob, c10d in the torch addon)', () => rtjob('gloo')],
    ['ring (rtjob)', () => rtjob('ring')],
    ['torch.distributed gloo (Python)', python],
  ] as const) {
    console.log(`${name}...`);
    const times = await run();
    const m = median(times);
    rows.push({ name, medianS: m, gbPerS: (elements * 4) / m / 1e9, rounds: times });
  }
} finally {
  await shutdown();
}

const machine = cpuModel();
console.log(
  `\nall-reduce of ${mib} MiB float32, 2 ranks on loopback (${machine}), median of ${rounds}\n`,
);
console.log('| collective | median s | GB/s | vs torch.distributed |');
console.log('|---|---:|---:|---:|');
const ref = rows.find((r) => r.name.startsWith('torch'))!.medianS;
for (const r of rows)
  console.log(
    `| ${r.name} | ${r.medianS.toFixed(3)} | ${r.gbPerS.toFixed(2)} | ${(ref / r.medianS).toFixed(2)}× |`,
  );
mkdirSync(fileURLToPath(new URL('./results', import.meta.url)), { recursive: true });
writeFileSync(
  fileURLToPath(new URL('./results/collective.json', import.meta.url)),
  `${JSON.stringify({ mib, rounds, machine, rows }, null, 2)}\n`,
);
