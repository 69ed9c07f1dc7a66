/**
 * RL role kills under a real `train_ppo` run: a tiny model on a local cluster (every role an actor
 * in its own worker process), faults injected at random moments while it trains, and the
 * trained-prompt ledger (`RunSummary.trainedPrompts`, what the checkpoints carry) checked against
 * the prompts the sampler handed out. Counts as the runtime scenarios do: faults, calls (prompts
 * to train), lost (handed out, never trained), duplicated (trained more often than handed out),
 * hung (the run did not end by its deadline), reordered (trained out of the sampler's order),
 * recovery seconds (longest time from a fault to the next trained step).
 *
 * Faults are timed by a seeded random generator (`CHAOS_SEED`), printed with each scenario, so a
 * failing run can be replayed.
 *
 * @module
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type AddressInfo, type Server, type Socket, connect, createServer } from 'node:net';
import { createInterface } from 'node:readline';
import { setTimeout as delay } from 'node:timers/promises';
import { trainPpo, type RunSummary } from '../../train/ppo/main.ts';
import { PromptSampler } from '../../train/ppo/data.ts';
import { seededRandom } from '../../model/prng.ts';
import { listActors, shutdown } from '../../runtime/api.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { type ChaosResult, emptyResult } from './harness.ts';

const root = new URL('../../', import.meta.url).pathname;
const prompts = 16;
const batch = 4;
/** The prompt data of every scenario: small sums the tiny model answers with its 4 tokens. */
const records = () =>
  Array.from({ length: prompts }, (_, i) => ({
    prompt: `What is ${i}+1?`,
    solution: `#### ${i + 1}`,
  }));

/** A run's workspace: the tiny model, the prompts, a private RTJOB_HOME (no cluster of anyone else is joined). */
class RlBench {
  readonly dir = mkdtempSync(join(tmpdir(), 'rtjob-rl-chaos-'));
  model = '';
  data = '';
  /** The variables a run reads, as they were before: restored by `close`. */
  private readonly saved = new Map(
    ['RTJOB_HOME', 'RTJOB_ADDRESS', 'RTJOB_QUIET_BACKEND'].map((k) => [k, process.env[k]]),
  );

  async start(): Promise<void> {
    const home = join(this.dir, 'home');
    mkdirSync(home, { recursive: true });
    process.env.RTJOB_HOME = home;
    process.env.RTJOB_QUIET_BACKEND = '1';
    delete process.env.RTJOB_ADDRESS;
    this.model = await writeTinyModel(this.dir);
    this.data = join(this.dir, 'prompts.jsonl');
    writeFileSync(
      this.data,
      records()
        .map((r) => JSON.stringify(r))
        .join('\n'),
    );
  }

  flags(steps: number, extra: string[]): string[] {
    return [
      '--pretrain',
      this.model,
      '--prompt-data',
      this.data,
      '--rollout-batch-size',
      String(batch),
      '--n-samples-per-prompt',
      '2',
      '--train-batch-size',
      String(batch * 2),
      '--micro-train-batch-size',
      String(batch * 2),
      '--generate-max-len',
      '4',
      '--eval-dataset',
      '',
      '--max-steps',
      String(steps),
      '--overwrite',
      '--save-path',
      join(this.dir, 'out'),
      ...extra,
    ];
  }

  /** The prompts the sampler hands out over `steps` steps, in order: what must be trained. */
  expected(steps: number): number[] {
    const s = new PromptSampler(records(), { input: 'prompt', label: 'solution' }, 42);
    return Array.from({ length: steps }, () => s.next(batch).map((x) => x.index)).flat();
  }

  close(): void {
    for (const [k, v] of this.saved) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Counts of a ledger against what was handed out. */
export function ledgerCounts(
  trained: number[],
  expected: number[],
): Pick<ChaosResult, 'calls' | 'lost' | 'duplicated' | 'reordered'> {
  const count = (xs: number[]) => xs.reduce((m, x) => m.set(x, (m.get(x) ?? 0) + 1), new Map());
  const want = count(expected);
  const got = count(trained);
  let lost = 0;
  let duplicated = 0;
  for (const [k, n] of want) lost += Math.max(0, n - (got.get(k) ?? 0));
  for (const [k, n] of got) duplicated += Math.max(0, n - (want.get(k) ?? 0));
  const reordered =
    lost === 0 && duplicated === 0 ? trained.filter((p, i) => p !== expected[i]).length : 0;
  return { calls: expected.length, lost, duplicated, reordered };
}

/** Times of faults and of trained steps; the longest wait from a fault to the next step. */
class Clock {
  readonly faults: number[] = [];
  readonly steps: number[] = [];
  /** Steps whose trained tokens lagged the trainer (`staleness_max` > 0). */
  stale = 0;
  recoveryS(end = Date.now()): number {
    let worst = 0;
    for (const f of this.faults) {
      const next = this.steps.find((s) => s > f) ?? end;
      worst = Math.max(worst, next - f);
    }
    return worst / 1000;
  }
}

/** `p`'s summary, its error, or 'hung' once `ms` pass (the cluster is then shut down). */
async function bounded(p: Promise<RunSummary>, ms: number): Promise<RunSummary | Error | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  const out = await Promise.race([
    p.catch((e: unknown) => e as Error),
    new Promise<'hung'>((r) => (timer = setTimeout(() => r('hung'), ms))),
  ]);
  clearTimeout(timer);
  if (out === 'hung') await shutdown().catch(() => undefined);
  return out;
}

/** A seed for this scenario: `CHAOS_SEED`, else one drawn now (printed with the result). */
function seed(): number {
  return Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 1e6));
}

/** Live actors of a role (by class name) with their pids. */
async function live(exportName: string): Promise<{ actorId: string; pid: number }[]> {
  // Before the run's init() or after its shutdown there is nothing to list.
  const all = await Promise.resolve()
    .then(listActors)
    .catch(() => []);
  return all.flatMap((a) =>
    a.spec.exportName === exportName && a.state === 'ALIVE' && a.pid
      ? [{ actorId: a.actorId, pid: a.pid }]
      : [],
  );
}

/** The log a scenario gives the run: trained steps timed, lines kept for the failure message. */
function runLog(clock: Clock, onStep?: (step: number) => void) {
  const lines: string[] = [];
  return {
    lines,
    log: {
      line: (t: string) => {
        lines.push(t);
        if (process.env.CHAOS_VERBOSE) process.stderr.write(`[train_ppo] ${t}\n`);
      },
      metric: (step: number, v: Record<string, number>) => {
        if (v.reward_mean === undefined) return;
        clock.steps.push(Date.now());
        if ((v.staleness_max ?? 0) > 0) clock.stale++;
        onStep?.(step);
      },
    },
  };
}

/** The verdict of a finished (or failed, or hung) run. */
function verdict(
  scenario: string,
  clock: Clock,
  out: RunSummary | Error | 'hung',
  expected: number[],
  lines: string[],
  onPolicy = false,
): ChaosResult {
  const r = { ...emptyResult(scenario), faults: clock.faults.length };
  if (out === 'hung') return { ...r, hung: 1, recoveryS: clock.recoveryS() };
  if (out instanceof Error) {
    const tail = lines.slice(-3).join(' | ');
    return { ...r, error: `the run failed: ${out.message.slice(0, 200)} (${tail.slice(0, 200)})` };
  }
  const counts = ledgerCounts(out.trainedPrompts, expected);
  // What the run said about its faults, for a verdict that is not ok.
  const warns = lines.filter((l) => l.startsWith('warn')).slice(0, 3);
  return {
    ...r,
    ...counts,
    failed: out.episodesFailed,
    recoveryS: clock.recoveryS(),
    ...(onPolicy ? { stale: clock.stale } : {}),
    ...(counts.lost + counts.duplicated + counts.reordered > 0 && warns.length
      ? { note: warns.join(' | ').slice(0, 400) }
      : {}),
  };
}

/**
 * The steps after which faults are injected: `n` distinct steps in [2, steps − 2], so that every
 * fault lands while at least two steps remain: its delay is drawn from the time of the step just
 * logged, and the first step's time holds the run's start (seconds, where a step of the tiny
 * model takes tens of milliseconds: a fault after step 1 could land after the run had ended).
 */
function faultSteps(rand: () => number, steps: number, n: number): Set<number> {
  const pool = Array.from({ length: Math.max(0, steps - 3) }, (_, i) => i + 2);
  const out = new Set<number>();
  while (out.size < Math.min(n, pool.length)) out.add(pool[Math.floor(rand() * pool.length)]!);
  return out;
}

/**
 * Runs `train_ppo` with `flags` and injects `fault` `n` times: each after a random one of the
 * steps (see {@link faultSteps}), delayed by a random part of the last step's time (at most
 * `maxDelayMs`) so it lands at any moment of the next step (generation, experience, training,
 * weight publish).
 */
async function runWithFaults(
  scenario: string,
  b: RlBench,
  steps: number,
  flags: string[],
  n: number,
  maxDelayMs: number,
  fault: (rand: () => number) => Promise<boolean>,
  rand: () => number,
): Promise<ChaosResult> {
  const clock = new Clock();
  const at = faultSteps(rand, steps, n);
  const pending: Promise<void>[] = [];
  let done = false;
  let last = Date.now();
  const { lines, log } = runLog(clock, (step) => {
    // Within the time a step takes, so the fault lands in one of the steps that remain.
    const stepMs = Date.now() - last;
    last = Date.now();
    if (!at.delete(step)) return;
    pending.push(
      delay(rand() * Math.min(stepMs, maxDelayMs))
        .then(() => (done ? false : fault(rand)))
        .then((hit) => void (hit && clock.faults.push(Date.now()))),
    );
  });
  const out = await bounded(
    trainPpo(b.flags(steps, flags), {}, { log }).finally(() => (done = true)),
    60_000 + steps * 20_000,
  );
  done = true;
  await Promise.all(pending);
  // Sync training is on-policy: a token of older weights means a rollout was not re-initialised.
  const onPolicy = !flags.includes('--async-train');
  return verdict(scenario, clock, out, b.expected(steps), lines, onPolicy);
}

/**
 * kill -9 of a random rollout worker at random moments while `train_ppo` trains `steps` steps on
 * 2 rollouts; each rollout is killed at most twice (the run tolerates 3 restarts of each).
 */
export async function rolloutKills(
  steps: number,
  kills: number,
  opts: { async?: boolean } = {},
): Promise<ChaosResult> {
  const s = seed();
  const b = new RlBench();
  try {
    await b.start();
    const killed = new Map<string, number>();
    return await runWithFaults(
      `rollout kill -9 (${opts.async ? 'async' : 'sync'}, seed ${s})`,
      b,
      steps,
      ['--rollout-num-engines', '2', ...(opts.async ? ['--async-train'] : [])],
      kills,
      1500,
      async (rand) => {
        // Both may be restarting from an earlier kill: the fault waits (bounded) for one that runs.
        let v: { actorId: string; pid: number } | undefined;
        for (const end = Date.now() + 15_000; !v && Date.now() < end; ) {
          const victims = (await live('Rollout')).filter((a) => (killed.get(a.actorId) ?? 0) < 2);
          v = victims[Math.floor(rand() * victims.length)];
          if (!v) await delay(100);
        }
        if (!v) return false;
        try {
          process.kill(v.pid, 'SIGKILL');
        } catch {
          return false; // exited meanwhile
        }
        killed.set(v.actorId, (killed.get(v.actorId) ?? 0) + 1);
        return true;
      },
      seededRandom(s),
    );
  } finally {
    b.close();
  }
}

/**
 * kill -9 of the trainer at a random step: the documented outcome is a failed job naming the
 * trainer's death and the checkpoint, and `--load-checkpoint` resuming with no prompt lost or
 * repeated (`train/ppo/README.md`, Faults). The ledger is the resumed run's.
 */
export async function trainerKill(
  steps: number,
  opts: { async?: boolean } = {},
): Promise<ChaosResult> {
  const s = seed();
  const scenario = `trainer kill -9 + resume (${opts.async ? 'async' : 'sync'}, seed ${s})`;
  const b = new RlBench();
  try {
    await b.start();
    const rand = seededRandom(s);
    const at = 2 + Math.floor(rand() * (steps - 2));
    const clock = new Clock();
    const ckpt = join(b.dir, 'ckpt');
    const flags = b.flags(steps, [
      '--save-steps',
      '1',
      '--ckpt-path',
      ckpt,
      ...(opts.async ? ['--async-train', '--async-queue-size', '2'] : []),
    ]);
    const first = runLog(clock, (step) => {
      if (step !== at || clock.faults.length > 0) return;
      clock.faults.push(Date.now());
      void live('Trainer').then((t) => t.forEach((a) => process.kill(a.pid, 'SIGKILL')));
    });
    const failed = await bounded(trainPpo(flags, {}, { log: first.log }), 120_000);
    const documented =
      /the trainer died: its process ended \(signal SIGKILL\).*the last checkpoint is at step \d+.*: run the same command with --ckpt-path \S+ --load-checkpoint to resume from it/;
    if (failed === 'hung') return verdict(scenario, clock, 'hung', [], first.lines);
    if (!(failed instanceof Error) || !documented.test(failed.message)) {
      return {
        ...emptyResult(scenario),
        faults: clock.faults.length,
        error: `killed at step ${at}, the run ${failed instanceof Error ? `failed with: ${failed.message.slice(0, 200)}` : 'succeeded'}, not with the documented message`,
      };
    }
    const second = runLog(clock);
    const resumed = await bounded(
      trainPpo([...flags, '--load-checkpoint'], {}, { log: second.log }),
      120_000,
    );
    return verdict(scenario, clock, resumed, b.expected(steps), second.lines);
  } finally {
    b.close();
  }
}

/** A fake SGLang server as its own process (`test/fakes/sglang-server.ts`). */
class ServerProcess {
  child!: ChildProcess;
  url = '';

  static async start(model: string, port = 0): Promise<ServerProcess> {
    const s = new ServerProcess();
    s.child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(root, 'test/fakes/sglang-server.ts'),
        '--port',
        String(port),
        '--model-path',
        model,
        '--token-delay-ms',
        '2',
      ],
      // Pipes of their own: a server that outlives this process must not hold its stdout open.
      { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let err = '';
    s.child.stderr!.on('data', (c: Buffer) => (err = (err + c.toString()).slice(-2000)));
    const lines = createInterface({ input: s.child.stdout! });
    s.url = await new Promise<string>((resolve, reject) => {
      lines.on('line', (l) => {
        const m = /^listening on (\S+)/.exec(l);
        if (m) resolve(m[1]!);
      });
      s.child.once('exit', (code) => {
        const last = err.match(/\b\w*Error\b[^\n]*/)?.[0] ?? err.trim().split('\n').at(-1);
        reject(new Error(`fake server exited (${code}) before listening: ${last}`));
      });
    });
    return s;
  }

  get port(): number {
    return Number(new URL(this.url).port);
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  async stop(): Promise<void> {
    if (!this.alive) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.kill('SIGKILL');
    await exited;
  }
}

/**
 * One engine server as the rollout sees it: a fixed address in this process that forwards each
 * connection to the server process of the moment. A crashed server is started again on a port of
 * its own and the address forwards there, as a supervisor keeping a server at its address would.
 * (Restarting it on its old port is not reliable on one machine: a client retrying the dead port
 * can be given that very port as its local one, a TCP self-connect, and hold it.) While no
 * server runs, connections are closed at once, as a refused one would be.
 */
class ServerSlot {
  private proxy!: Server;
  private readonly sockets = new Set<Socket>();
  url = '';

  private constructor(
    readonly model: string,
    public server: ServerProcess | undefined,
  ) {}

  static async start(model: string): Promise<ServerSlot> {
    const slot = new ServerSlot(model, await ServerProcess.start(model));
    slot.proxy = createServer((client) => {
      const backend = slot.server;
      if (!backend?.alive) return void client.destroy();
      const upstream = connect(backend.port, '127.0.0.1');
      for (const sock of [client, upstream]) {
        slot.sockets.add(sock);
        sock.on('close', () => slot.sockets.delete(sock));
        // Either side going away ends both, as one connection to a crashed server would end.
        sock.on('error', () => undefined);
      }
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((r) => slot.proxy.listen(0, '127.0.0.1', r));
    slot.url = `http://127.0.0.1:${(slot.proxy.address() as AddressInfo).port}`;
    return slot;
  }

  /** kill -9 of the server process (its connections end with it). */
  async kill(): Promise<void> {
    await this.server?.stop();
  }

  /** A new server process behind the same address. */
  async restart(): Promise<void> {
    this.server = await ServerProcess.start(this.model);
  }

  async close(): Promise<void> {
    await this.server?.stop();
    for (const sock of this.sockets) sock.destroy();
    await new Promise<void>((r) => this.proxy.close(() => r()));
  }
}

/** train_ppo's flags for the SGLang fakes at `servers`. */
function sglangFlags(b: RlBench, servers: readonly { url: string }[]): string[] {
  return [
    '--engine',
    'sglang',
    '--engine-url',
    servers.map((x) => x.url).join(','),
    '--engine-weights-path',
    join(b.dir, 'weights'),
  ];
}

/**
 * kill -9 of a random engine server process (a fake SGLang server the rollout reaches over HTTP)
 * at random moments while `train_ppo --engine sglang` trains on 2 servers; each killed server is
 * started again on its port, as a supervisor would, and rejoins with the current weights.
 */
export async function engineServerKills(steps: number, kills: number): Promise<ChaosResult> {
  const s = seed();
  const b = new RlBench();
  const servers: ServerSlot[] = [];
  try {
    await b.start();
    servers.push(await ServerSlot.start(b.model), await ServerSlot.start(b.model));
    const flags = sglangFlags(b, servers);
    return await runWithFaults(
      `engine server kill -9 (sglang fake, seed ${s})`,
      b,
      steps,
      flags,
      kills,
      400,
      async (rand) => {
        const victim = servers[Math.floor(rand() * servers.length)]!;
        await victim.kill();
        await victim.restart();
        return true;
      },
      seededRandom(s),
    );
  } finally {
    await Promise.all(servers.map((x) => x.close()));
    b.close();
  }
}

/**
 * SIGSTOP of a random engine server for `holdS` seconds at random moments while `train_ppo
 * --engine sglang` trains on 2 servers: the server stops answering (its health route too), so
 * the engine's probes take it out of routing, its requests and its part of any weight update are
 * cancelled and go to the other server; after SIGCONT it rejoins with the current weights.
 */
export async function engineServerHangs(
  steps: number,
  hangs: number,
  holdS: number,
): Promise<ChaosResult> {
  const s = seed();
  const b = new RlBench();
  const servers: ServerProcess[] = [];
  const resumes: Promise<void>[] = [];
  try {
    await b.start();
    servers.push(await ServerProcess.start(b.model), await ServerProcess.start(b.model));
    const flags = sglangFlags(b, servers);
    const stopped = new Set<ServerProcess>();
    return await runWithFaults(
      `engine server SIGSTOP ${holdS}s (sglang fake, seed ${s})`,
      b,
      steps,
      flags,
      hangs,
      400,
      async (rand) => {
        const up = servers.filter((x) => !stopped.has(x));
        // One server always answers: with both stopped there is nothing to fail over to.
        if (up.length < 2) return false;
        const victim = up[Math.floor(rand() * up.length)]!;
        stopped.add(victim);
        victim.child.kill('SIGSTOP');
        resumes.push(
          delay(holdS * 1000).then(() => {
            victim.child.kill('SIGCONT');
            stopped.delete(victim);
          }),
        );
        return true;
      },
      seededRandom(s),
    );
  } finally {
    for (const x of servers) x.child.kill('SIGCONT');
    await Promise.all(resumes);
    await Promise.all(servers.map((x) => x.stop()));
    b.close();
  }
}
