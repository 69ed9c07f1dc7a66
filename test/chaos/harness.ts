/**
 * The chaos harness: a real cluster (a head in this process, node agents as their own processes),
 * sequence-checked calls under load, faults injected while they run, and a ledger that every
 * call appends to in the worker that ran it. After the run it counts what the issue asks for:
 * faults, calls, lost (acknowledged but never run), duplicated, hung (no answer within the
 * deadline), zombie executions (a replaced incarnation running a call after its successor ran
 * one), reordering, and the longest stall (recovery seconds).
 *
 * Every loop is bounded by a deadline; every process started here is stopped in `close`.
 *
 * @module
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeDaemonOptions } from '../../cli/daemon-options.ts';
import { type Head, startHead } from '../../runtime/head/head.ts';
import { type ActorHandle, actorInfo, defineActor, init, shutdown } from '../../runtime/index.ts';
import { setLogSink } from '../../runtime/log.ts';
import type { Ledger } from '../fixtures/runtime/ledger.ts';

const LedgerActor = defineActor<typeof Ledger>(
  new URL('../fixtures/runtime/ledger.ts', import.meta.url),
  'Ledger',
);
const root = new URL('../../', import.meta.url).pathname;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What one scenario found. */
export interface ChaosResult {
  scenario: string;
  faults: number;
  calls: number;
  failed: number;
  lost: number;
  duplicated: number;
  hung: number;
  zombie: number;
  reordered: number;
  /** Longest time an actor went without a successful call. */
  recoveryS: number;
  /** Set when the scenario could not run (a missing capability): counts as a failure. */
  error?: string;
  /** What the system under test said about its faults (its warnings), shown with a violation. */
  note?: string;
  /** RL: on-policy (sync) steps that trained tokens of older weights than the trainer's. */
  stale?: number;
}

/** A result with nothing counted yet. */
export function emptyResult(scenario: string): ChaosResult {
  return {
    scenario,
    faults: 0,
    calls: 0,
    failed: 0,
    lost: 0,
    duplicated: 0,
    hung: 0,
    zombie: 0,
    reordered: 0,
    recoveryS: 0,
  };
}

/** Whether a result breaks a guarantee (duplicates break only at-most-once actors). */
export function violations(r: ChaosResult): string[] {
  const v: string[] = [];
  if (r.error) v.push(r.error);
  if (r.lost) v.push(`${r.lost} lost`);
  if (r.hung) v.push(`${r.hung} hung`);
  if (r.zombie) v.push(`${r.zombie} zombie executions`);
  if (r.reordered) v.push(`${r.reordered} reordered`);
  if (r.duplicated) v.push(`${r.duplicated} duplicated at-most-once calls`);
  if (r.stale) v.push(`${r.stale} on-policy steps trained on stale weights`);
  return v;
}

/** A table in the bench README's style. */
export function report(results: ChaosResult[]): string {
  const head =
    '| scenario | faults | calls | failed | lost | duplicated | hung | zombie | reordered | recovery s | verdict |';
  const rows = results.map(
    (r) =>
      `| ${r.scenario} | ${r.faults} | ${r.calls} | ${r.failed} | ${r.lost} | ${r.duplicated} | ${r.hung} | ${r.zombie} | ${r.reordered} | ${r.recoveryS.toFixed(1)} | ${violations(r).join('; ') || 'ok'} |`,
  );
  const notes = results.flatMap((r) =>
    r.note && violations(r).length ? [`${r.scenario}: ${r.note}`] : [],
  );
  return [head, '|---|---|---|---|---|---|---|---|---|---|---|', ...rows, ...notes].join('\n');
}

interface Caller {
  handle: ActorHandle<Ledger>;
  file: string;
  /** true: maxTaskRetries -1 (at-least-once); false: no retries (at-most-once). */
  retries: boolean;
  acked: Set<number>;
  failed: number;
  hung: number;
  lastOkMs: number;
  maxGapMs: number;
  calls: number;
}

/** Options of a chaos cluster. */
export interface ChaosClusterOptions {
  /** Node agents started as processes (each with `cpusPerNode`). @default 2 */
  nodes?: number;
  cpusPerNode?: number;
  /** Interface the head listens on (a veth address for the link-cut scenario). */
  host?: string;
  /** Node heartbeat timeout (and head-restart recovery window). @default 2000 */
  nodeTimeoutMs?: number;
  /** Extra node agents started through a command prefix, e.g. `ip netns exec NS`. */
  extraNode?: { prefix: string[]; host: string };
}

/** One node agent process of a {@link ChaosCluster}. */
export interface NodeProcessOptions {
  /** Command prefix the agent starts through, e.g. `ip netns exec NS`. */
  prefix?: string[];
  /** Interface its workers serve on. @default '127.0.0.1' */
  host?: string;
  /** GPUs it reports (none need exist: a resource that places roles on this node). */
  numGpus?: number;
  /** Extra env of the agent and so of its workers, e.g. `RTJOB_OBJECT_SHM: '0'`. */
  env?: Record<string, string>;
}

/** A cluster for chaos: head here, node agents as processes, a driver runtime here. */
export class ChaosCluster {
  readonly dir = mkdtempSync(join(tmpdir(), 'rtjob-chaos-'));
  head!: Head;
  readonly nodes: ChildProcess[] = [];
  readonly token = 'chaos-token-0123456789abcdef';
  private port = 0;
  private readonly callers: Caller[] = [];

  constructor(readonly opts: ChaosClusterOptions = {}) {}

  async start(): Promise<void> {
    setLogSink(() => {});
    this.head = await this.startOurHead(0);
    this.port = this.head.port;
    for (let i = 0; i < (this.opts.nodes ?? 2); i++) await this.addNode();
    if (this.opts.extraNode) await this.addNode(this.opts.extraNode);
    await init({ address: this.head.address, token: this.token });
  }

  private startOurHead(port: number): Promise<Head> {
    return startHead({
      port,
      host: this.opts.host ?? '127.0.0.1',
      token: this.token,
      sessionDir: join(this.dir, 'head'),
      nodeHeartbeatTimeoutMs: this.opts.nodeTimeoutMs ?? 2000,
      heartbeatIntervalMs: 250,
    });
  }

  /** Starts a node agent process (through `prefix`, e.g. a network namespace). */
  async addNode(node: NodeProcessOptions = {}): Promise<ChildProcess> {
    const { prefix = [], host = '127.0.0.1' } = node;
    const sessionDir = join(this.dir, `node-${this.nodes.length}`);
    mkdirSync(sessionDir, { recursive: true });
    const opts = {
      headAddress: this.head.address,
      token: this.token,
      sessionDir,
      host,
      numCpus: this.opts.cpusPerNode ?? 2,
      ...(node.numGpus !== undefined ? { numGpus: node.numGpus } : {}),
      warmWorkers: 0,
    };
    const argv = [
      process.execPath,
      '--import',
      'tsx',
      join(root, 'cli/node-daemon.ts'),
      writeDaemonOptions(sessionDir, opts),
    ];
    const cmd = [...prefix, ...argv];
    const log = openSync(join(sessionDir, 'agent.log'), 'a');
    const child = spawn(cmd[0]!, cmd.slice(1), {
      cwd: root,
      stdio: ['ignore', log, log],
      env: { ...process.env, ...node.env },
    });
    closeSync(log);
    this.nodes.push(child);
    const end = Date.now() + 30_000;
    while (!existsSync(join(sessionDir, 'node.json'))) {
      if (Date.now() > end || child.exitCode !== null) {
        const tail = readFileSync(join(sessionDir, 'agent.log'), 'utf8')
          .trim()
          .split('\n')
          .slice(-5)
          .join(' | ');
        throw new Error(`node agent ${this.nodes.length} did not start: ${tail}`);
      }
      await sleep(50);
    }
    return child;
  }

  /** Restarts the head (closed like a crash would look to its peers) on the same port and session. */
  async restartHead(): Promise<void> {
    await this.head.close();
    this.head = await this.startOurHead(this.port);
  }

  /** `n` ledger actors, spread over the nodes; half with retries, half without. */
  async actors(n: number, opts: { nodeId?: string } = {}): Promise<void> {
    for (let i = 0; i < n; i++) {
      const file = join(this.dir, `ledger-${this.callers.length}.txt`);
      const retries = i % 2 === 0;
      const handle = LedgerActor.options({
        maxRestarts: -1,
        maxTaskRetries: retries ? -1 : 0,
        schedulingStrategy: opts.nodeId ? { nodeId: opts.nodeId, soft: true } : 'SPREAD',
      }).remote(file);
      await handle.pid.remote();
      this.callers.push({
        handle,
        file,
        retries,
        acked: new Set(),
        failed: 0,
        hung: 0,
        lastOkMs: Date.now(),
        maxGapMs: 0,
        calls: 0,
      });
    }
  }

  /** Worker pids of the live actors. */
  async workerPids(): Promise<number[]> {
    const out: number[] = [];
    for (const c of this.callers) {
      const info = await actorInfo(c.handle);
      if (info.pid) out.push(info.pid);
    }
    return out;
  }

  /** Node id the `i`th node agent registered as. */
  nodeId(i: number): string {
    return (
      JSON.parse(readFileSync(join(this.dir, `node-${i}`, 'node.json'), 'utf8')) as {
        nodeId: string;
      }
    ).nodeId;
  }

  /**
   * Calls every actor in sequence (`record(seq)`) until `untilMs`, each call with `deadlineMs`;
   * returns when every loop has stopped.
   */
  async load(untilMs: number, deadlineMs = 45_000): Promise<void> {
    await Promise.all(
      this.callers.map(async (c) => {
        for (let seq = 0; Date.now() < untilMs; seq++) {
          c.calls++;
          let timer: NodeJS.Timeout | undefined;
          const outcome = await Promise.race([
            c.handle.record.remote(String(seq)).then(
              () => 'ok' as const,
              () => 'failed' as const,
            ),
            new Promise<'hung'>((r) => (timer = setTimeout(() => r('hung'), deadlineMs))),
          ]);
          clearTimeout(timer);
          const now = Date.now();
          if (outcome === 'ok') {
            c.acked.add(seq);
            c.maxGapMs = Math.max(c.maxGapMs, now - c.lastOkMs);
            c.lastOkMs = now;
          } else if (outcome === 'failed') {
            c.failed++;
            await sleep(50); // the actor is restarting: do not spin
          } else {
            c.hung++;
            return; // a hung loop stops; it is counted
          }
        }
      }),
    );
  }

  /** Reads the ledgers and counts (see `ChaosResult`). */
  verdict(scenario: string, faults: number): ChaosResult {
    const r: ChaosResult = {
      scenario,
      faults,
      calls: 0,
      failed: 0,
      lost: 0,
      duplicated: 0,
      hung: 0,
      zombie: 0,
      reordered: 0,
      recoveryS: 0,
    };
    for (const c of this.callers) {
      r.calls += c.calls;
      r.failed += c.failed;
      r.hung += c.hung;
      r.recoveryS = Math.max(r.recoveryS, c.maxGapMs / 1000);
      const lines = existsSync(c.file)
        ? readFileSync(c.file, 'utf8').trim().split('\n').filter(Boolean)
        : [];
      const runs = new Map<number, number>();
      const retired = new Set<string>();
      let pid = '';
      let lastSeq = -1;
      for (const line of lines) {
        const [p, tag] = line.split(' ') as [string, string];
        const seq = Number(tag);
        if (p !== pid) {
          // A new incarnation took over: the previous one must never run anything again.
          if (pid) retired.add(pid);
          if (retired.has(p)) r.zombie++;
          pid = p;
        }
        runs.set(seq, (runs.get(seq) ?? 0) + 1);
        if (runs.get(seq) === 1) {
          if (seq < lastSeq) r.reordered++;
          lastSeq = Math.max(lastSeq, seq);
        }
      }
      for (const seq of c.acked) if (!runs.has(seq)) r.lost++;
      // Under at-least-once (retries) a re-run is the documented price; under at-most-once it is a bug.
      if (!c.retries) for (const n of runs.values()) if (n > 1) r.duplicated += n - 1;
    }
    return r;
  }

  async close(): Promise<void> {
    await shutdown().catch(() => {});
    for (const n of this.nodes) {
      if (n.exitCode === null && n.signalCode === null) {
        n.kill('SIGCONT');
        n.kill('SIGTERM');
      }
    }
    const end = Date.now() + 15_000;
    while (this.nodes.some((n) => n.exitCode === null && n.signalCode === null) && Date.now() < end)
      await sleep(100);
    for (const n of this.nodes) if (n.exitCode === null && n.signalCode === null) n.kill('SIGKILL');
    await this.head.close();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

// ---- scenarios -------------------------------------------------------------------------------

/**
 * Runs `fault` every `everyMs` on a fresh 2-node cluster with `actors` actors while calls run for
 * `seconds`; `fault` says whether it did one (false: nothing to do this time; 'stop': no more).
 */
async function periodicFaults(
  scenario: string,
  seconds: number,
  everyMs: number,
  actors: number,
  fault: (c: ChaosCluster) => Promise<boolean | 'stop'>,
): Promise<ChaosResult> {
  const c = new ChaosCluster({ nodes: 2 });
  try {
    await c.start();
    await c.actors(actors);
    const until = Date.now() + seconds * 1000;
    let faults = 0;
    const load = c.load(until);
    while (Date.now() < until - everyMs) {
      await sleep(everyMs);
      const did = await fault(c);
      if (did === 'stop') break;
      if (did) faults++;
    }
    await load;
    return c.verdict(scenario, faults);
  } finally {
    await c.close();
  }
}

/** kill -9 of a random actor's worker every `everyMs` while calls run for `seconds`. */
export function workerKills(seconds: number, everyMs = 1500, actors = 4): Promise<ChaosResult> {
  return periodicFaults('worker kill -9', seconds, everyMs, actors, async (c) => {
    const pids = await c.workerPids();
    const pid = pids[Math.floor(Math.random() * pids.length)];
    if (pid === undefined) return false;
    try {
      process.kill(pid, 'SIGKILL');
      return true;
    } catch {
      return false; // already gone
    }
  });
}

/** kill -9 of a node agent (its workers go with it) and a fresh one in its place. */
export function nodeKills(seconds: number, everyMs = 4000): Promise<ChaosResult> {
  return periodicFaults('node agent kill -9', seconds, everyMs, 4, async (c) => {
    const victim = c.nodes.filter((n) => n.exitCode === null && n.signalCode === null)[0];
    if (!victim) return 'stop';
    victim.kill('SIGKILL');
    await c.addNode();
    return true;
  });
}

/** The head restarts (on its session and port) while calls run. */
export function headRestarts(seconds: number, everyMs = 4000): Promise<ChaosResult> {
  return periodicFaults('head restart', seconds, everyMs, 4, async (c) => {
    await c.restartHead();
    return true;
  });
}

/** A network namespace joined to this one by a veth pair: a node agent in it is another host. */
export interface Netns {
  /** The namespace's name (`/run/netns/<name>`). */
  name: string;
  /** Command prefix that runs a process in the namespace (for {@link NodeProcessOptions}). */
  prefix: string[];
  /** This side's address (the head and the nodes outside listen on it). */
  hostIp: string;
  /** The namespace's address (its node's workers serve on it). */
  nsIp: string;
  /** Takes this side of the link down (`false`) or up again. */
  link(up: boolean): void;
  /** Removes the link and the namespace. */
  remove(): void;
}

/**
 * Builds a network namespace and its veth pair. Needs root and `ip`: without them it throws
 * `cannot build a network namespace here: <why>`.
 */
export function netns(): Netns {
  const id = `${process.pid % 10000}`;
  const ns = `rtjc${id}`;
  const hostIf = `rtjc${id}a`;
  const nsIf = `rtjc${id}b`;
  const subnet = 1 + (process.pid % 250);
  const hostIp = `10.213.${subnet}.1`;
  const nsIp = `10.213.${subnet}.2`;
  const ip = (...args: string[]) => execFileSync('ip', args, { stdio: 'pipe' });
  const remove = () => {
    for (const args of [
      ['link', 'del', hostIf],
      ['netns', 'del', ns],
    ]) {
      try {
        ip(...args);
      } catch {
        // not created
      }
    }
  };
  try {
    if (process.getuid?.() !== 0) throw new Error('needs root');
    ip('netns', 'add', ns);
    ip('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf);
    ip('link', 'set', nsIf, 'netns', ns);
    ip('addr', 'add', `${hostIp}/30`, 'dev', hostIf);
    ip('link', 'set', hostIf, 'up');
    ip('netns', 'exec', ns, 'ip', 'addr', 'add', `${nsIp}/30`, 'dev', nsIf);
    ip('netns', 'exec', ns, 'ip', 'link', 'set', nsIf, 'up');
    ip('netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up');
  } catch (e) {
    remove();
    const why = (e as { stderr?: Buffer }).stderr?.toString().trim() || (e as Error).message;
    throw new Error(`cannot build a network namespace here: ${why}`, { cause: e });
  }
  return {
    name: ns,
    prefix: ['ip', 'netns', 'exec', ns],
    hostIp,
    nsIp,
    link: (up) => void ip('link', 'set', hostIf, up ? 'up' : 'down'),
    remove,
  };
}

/**
 * A node in its own network namespace ({@link netns}); its link is cut for `cutS` seconds under
 * load, twice. Without root and `ip` the result says so (and counts as failed).
 */
export async function linkCut(seconds: number, cutS: number): Promise<ChaosResult> {
  const scenario = `link cut ${cutS}s (netns)`;
  let net: Netns;
  try {
    net = netns();
  } catch (e) {
    return { ...emptyResult(scenario), error: (e as Error).message };
  }
  const c = new ChaosCluster({
    nodes: 1,
    host: net.hostIp,
    extraNode: { prefix: net.prefix, host: net.nsIp },
  });
  try {
    await c.start();
    await c.actors(4, { nodeId: c.nodeId(1) });
    const until = Date.now() + seconds * 1000;
    let faults = 0;
    const load = c.load(until, Math.max(45_000, cutS * 3000));
    for (let i = 0; i < 2 && Date.now() < until - (cutS + 2) * 1000; i++) {
      await sleep(1000);
      net.link(false);
      faults++;
      await sleep(cutS * 1000);
      net.link(true);
    }
    await load;
    return c.verdict(scenario, faults);
  } finally {
    await c.close();
    net.remove();
  }
}
