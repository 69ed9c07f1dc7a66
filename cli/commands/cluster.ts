/**
 * `rtjob start`, `rtjob stop`, `rtjob status`: the cluster on this machine (`rtjob dashboard`:
 * `dashboard.ts`).
 *
 * @module
 */
import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';

import { CliError, givenToken, headApi, requireEndpoint, type TokenOptions } from '../client.ts';
import {
  bytes,
  type ClusterFile,
  clusterFilePath,
  isLoopback,
  OpsStore,
  ownModuleNodeFlags,
  ownModulePath,
  parseBytes,
  pidAlive,
  type ProcessView,
  readClusterFile,
  readEnv,
  removeClusterFile,
  rtjobHome,
  stopOrphanDrivers,
  tailLines,
  tsxImport,
  writeClusterFile,
} from '../../ops/index.ts';
import { parsePort, table } from '../format.ts';
import { onLauncherExit } from '../launcher-exit.ts';
import { writeDaemonOptions } from '../daemon-options.ts';
import type { NodeDaemonOptions } from '../node-daemon.ts';

const daemonPath = ownModulePath('../daemon.ts', import.meta.url);
const nodeDaemonPath = ownModulePath('../node-daemon.ts', import.meta.url);

/** Options of `rtjob start`. */
export interface StartOptions extends TokenOptions {
  head?: boolean;
  address?: string;
  port: string;
  dashboardPort: string;
  host: string;
  numCpus?: string;
  numGpus?: string;
  resources?: string;
  warmWorkers?: string;
  memoryUsageThreshold?: string;
  objectStoreMemory?: string;
  sessionDir?: string;
  block?: boolean;
}

function num(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0)
    throw new CliError(`${name} must be a non-negative number, got ${v}`, 2);
  return n;
}

async function waitFor<T>(
  what: string,
  deadlineMs: number,
  check: () => T | undefined,
  failed?: () => string | undefined,
): Promise<T> {
  const end = Date.now() + deadlineMs;
  for (;;) {
    const v = check();
    if (v !== undefined) return v;
    const why = failed?.();
    if (why !== undefined) throw new CliError(why, 1);
    if (Date.now() > end) throw new CliError(`timed out waiting for ${what}`, 1);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Whether `port` on `host` can be listened on now. */
function portFree(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, host, () => srv.close(() => resolve(true)));
  });
}

/** Spawns a detached daemon and waits for its ready file. */
async function spawnDaemon(
  script: string,
  arg: unknown,
  logFile: string,
  readyFile: string,
  what: string,
): Promise<{ pid: number } & Record<string, unknown>> {
  // The ready file may be a dead head's (its ports are reused); only our child's pid counts.
  const out = openSync(logFile, 'a');
  // The options (the token among them) go by a private file, never on the command line.
  const optionsFile = writeDaemonOptions(dirname(readyFile), arg);
  const child = spawn(process.execPath, [...ownModuleNodeFlags(tsxImport), script, optionsFile], {
    detached: true,
    stdio: ['ignore', out, out],
    env: process.env,
  });
  closeSync(out);
  let exited: string | undefined;
  child.on('exit', (code, signal) => {
    // The first line says why (the log's last line that is not a stack frame); the log follows.
    const tail = tailLines(logFile, 30);
    const lines = tail.split('\n').reverse();
    const why = (
      lines.find((l) => /^\w*Error: /.test(l)) ??
      lines.find((l) => l.trim() && !/^\s+at |^Node\.js v|^\s*[\^}]+\s*$/.test(l))
    )?.trim();
    exited = `the ${what} exited during start (${signal ?? `code ${code}`})${why ? `: ${why}` : ''}\nits log (${logFile}):\n${tail}`;
  });
  const ready = await waitFor(
    `the ${what} to start`,
    60_000,
    () => {
      if (!existsSync(readyFile)) return undefined;
      try {
        const r = JSON.parse(readFileSync(readyFile, 'utf8')) as { pid: number } & Record<
          string,
          unknown
        >;
        return r.pid === child.pid ? r : undefined;
      } catch {
        return undefined;
      }
    },
    () => exited,
  );
  child.unref();
  return ready;
}

/** What `rtjob start` tells a node agent about itself. */
type NodeResourceOptions = Pick<
  NodeDaemonOptions,
  | 'numCpus'
  | 'numGpus'
  | 'resources'
  | 'warmWorkers'
  | 'memoryUsageThreshold'
  | 'objectStoreMemoryBytes'
>;

function nodeResources(o: StartOptions): NodeResourceOptions {
  let resources: Record<string, number> | undefined;
  if (o.resources) {
    try {
      resources = JSON.parse(o.resources) as Record<string, number>;
    } catch {
      throw new CliError(`--resources must be JSON like '{"TPU": 4}', got ${o.resources}`, 2);
    }
    if (
      typeof resources !== 'object' ||
      resources === null ||
      Object.values(resources).some((v) => typeof v !== 'number' || !(v >= 0))
    ) {
      throw new CliError(
        `--resources must map names to non-negative numbers, got ${o.resources}`,
        2,
      );
    }
  }
  const warm = num('--warm-workers', o.warmWorkers);
  if (warm !== undefined && !Number.isInteger(warm))
    throw new CliError(`--warm-workers must be a whole number, got ${o.warmWorkers}`, 2);
  const threshold = num('--memory-usage-threshold', o.memoryUsageThreshold);
  if (threshold !== undefined && !(threshold > 0 && threshold <= 1))
    throw new CliError(
      `--memory-usage-threshold must be a share of memory in (0, 1], got ${o.memoryUsageThreshold}`,
      2,
    );
  const objectStoreMemoryBytes =
    o.objectStoreMemory === undefined ? undefined : parseBytes(o.objectStoreMemory);
  if (o.objectStoreMemory !== undefined && objectStoreMemoryBytes === undefined)
    throw new CliError(
      `--object-store-memory must be a size like 2GiB or 500MB, got ${o.objectStoreMemory}`,
      2,
    );
  return {
    numCpus: num('--num-cpus', o.numCpus),
    numGpus: num('--num-gpus', o.numGpus),
    resources,
    warmWorkers: warm,
    memoryUsageThreshold: threshold,
    objectStoreMemoryBytes,
  };
}

/** `rtjob start --head` / `rtjob start --address`. */
export async function startCommand(o: StartOptions): Promise<void> {
  await startDaemons(o);
  if (o.block) await blockUntilStopped();
}

/**
 * `--block`: stays in the foreground while the processes started here live (a batch system's job
 * step, e.g. `srun rtjob start --address … --block`, ends when its process does); SIGTERM or
 * SIGINT stops them as `rtjob stop` does, and so does the end of `npx` when it started this.
 */
async function blockUntilStopped(): Promise<void> {
  const pids = readClusterFile()?.pids ?? [];
  console.log(`blocking while pids ${pids.join(', ')} run (SIGTERM or Ctrl-C stops them)`);
  let stopping: Promise<void> | undefined;
  const stop = () => (stopping ??= stopCommand());
  process.once('SIGTERM', () => void stop());
  process.once('SIGINT', () => void stop());
  const cancel = onLauncherExit(() => void stop());
  while (pids.some(pidAlive) && !stopping) await new Promise((r) => setTimeout(r, 1000));
  cancel();
  // Gone by `rtjob stop` (nothing left to do) or by themselves (clean up after them).
  await (stopping ?? (readClusterFile() ? stop() : undefined));
}

async function startDaemons(o: StartOptions): Promise<void> {
  if (!o.head && !o.address)
    throw new CliError(
      'say --head to start a cluster, or --address HOST:PORT --token T to join one',
      2,
    );
  const existing = readClusterFile();
  const headPid = existing?.headPid ?? (existing?.role === 'head' ? existing.pids[0] : undefined);
  // A head that died (kill -9, OOM) while its node agent lives on: start only the head, on the
  // same session, and the node agent, its workers and the drivers reconnect to it.
  const recovering = Boolean(
    o.head &&
      existing?.role === 'head' &&
      headPid !== undefined &&
      !pidAlive(headPid) &&
      existing.pids.some(pidAlive),
  );
  // The head lives but its node agent died (kill -9, OOM): start a node agent in its place; the
  // actors waiting RESTARTING for a node are placed on it.
  const nodeOnly = Boolean(
    o.head &&
      existing?.role === 'head' &&
      headPid !== undefined &&
      pidAlive(headPid) &&
      !existing.pids.some((p) => p !== headPid && pidAlive(p)),
  );
  if (nodeOnly) return replaceNodeAgent(existing!, headPid!, nodeResources(o), o.host);
  if (existing && existing.pids.some(pidAlive) && !recovering) {
    throw new CliError(
      `a cluster is already running here (${existing.dashboardUrl ?? existing.address}); run \`rtjob stop\` first`,
      1,
    );
  }
  const res = nodeResources(o);
  if (o.address) return joinCommand(o, res);
  const port = (flag: string, v: string): number => {
    try {
      return parsePort(flag, v);
    } catch (err) {
      throw new CliError((err as Error).message, 2);
    }
  };

  const sessionDir = recovering
    ? existing!.sessionDir
    : (o.sessionDir ?? join(rtjobHome(), 'session'));
  mkdirSync(join(sessionDir, 'logs'), { recursive: true, mode: 0o700 });
  const opts = {
    sessionDir,
    // From a file or the environment too, so a batch script need not put it on a command line.
    token: givenToken(o) ?? readEnv('RTJOB_TOKEN'),
    host: o.host,
    port: port('--port', o.port),
    dashboardPort: port('--dashboard-port', o.dashboardPort),
  };
  // A taken port is named here in one line, before a daemon starts and fails with its stack.
  for (const [flag, port] of [
    ['--port', opts.port],
    ['--dashboard-port', opts.dashboardPort],
  ] as const) {
    if (port && !(await portFree(o.host, port))) {
      throw new CliError(
        `port ${port} is in use (another rtjob head, or another program): pass ${flag} N (0 picks a free one)`,
        2,
      );
    }
  }
  const ready = (await spawnDaemon(
    daemonPath,
    opts,
    join(sessionDir, 'logs', 'head.log'),
    join(sessionDir, 'head.json'),
    'head',
  )) as {
    pid: number;
    address: string;
    dashboardUrl: string;
  };
  const token = readFileSync(join(sessionDir, 'token'), 'utf8').trim();
  let nodePids = recovering ? existing!.pids.filter((p) => p !== headPid && pidAlive(p)) : [];
  if (nodePids.length === 0) {
    try {
      const node = await spawnDaemon(
        nodeDaemonPath,
        {
          headAddress: ready.address,
          token,
          sessionDir,
          host: o.host,
          ...res,
        } satisfies NodeDaemonOptions,
        join(sessionDir, 'logs', 'node.log'),
        join(sessionDir, 'node.json'),
        'node agent',
      );
      nodePids = [node.pid];
    } catch (err) {
      process.kill(ready.pid, 'SIGTERM');
      throw err;
    }
  }
  const info: ClusterFile = {
    address: ready.address,
    dashboardUrl: ready.dashboardUrl,
    token,
    sessionDir,
    pids: [ready.pid, ...nodePids],
    headPid: ready.pid,
    role: 'head',
    startedAt: Date.now(),
  };
  writeClusterFile(info);
  // A token given by file stays out of the output (a batch job's log may be readable by others).
  const login = o.tokenFile
    ? `${ready.dashboardUrl} (log in with the token in ${o.tokenFile})`
    : `${ready.dashboardUrl}/login?token=${encodeURIComponent(token)}`;
  if (!isLoopback(o.host)) {
    process.stderr.write(
      `warning: the head listens on ${o.host}, reachable from other machines: anyone with the token can run code here; ` +
        'keep the token secret and the ports firewalled\n',
    );
  }
  console.log(
    `rtjob head ${recovering ? 'restarted' : 'started'} (pid ${ready.pid}, node agent pid ${nodePids.join(', ')}); session ${sessionDir}`,
  );
  console.log(`  runtime address  ${ready.address}`);
  console.log(`  dashboard        ${login}`);
  console.log(`  connection info  ${clusterFilePath()} (mode 0600)`);
  console.log('');
  console.log(
    'Submit a job:        rtjob submit -- train_ppo   (--agent-func FILE.ts for your own agent)',
  );
  console.log(
    isLoopback(o.host)
      ? `Join another machine: this head listens on ${o.host} only; start it with --host <this machine's address> so that others can join`
      : `Join another machine: rtjob start --address ${ready.address} --token <the "token" in ${clusterFilePath()}>`,
  );
  console.log('Stop everything:     rtjob stop');
}

/** `rtjob start --head` with the head alive and its node agent dead: a new node agent only. */
async function replaceNodeAgent(
  existing: ClusterFile,
  headPid: number,
  res: NodeResourceOptions,
  host: string | undefined,
): Promise<void> {
  const { sessionDir, token, address } = existing;
  const node = await spawnDaemon(
    nodeDaemonPath,
    { headAddress: address, token, sessionDir, host, ...res } satisfies NodeDaemonOptions,
    join(sessionDir, 'logs', 'node.log'),
    join(sessionDir, 'node.json'),
    'node agent',
  );
  writeClusterFile({ ...existing, pids: [headPid, node.pid], startedAt: existing.startedAt });
  console.log(
    `rtjob node agent replaced (pid ${node.pid}, node ${String(node.nodeId)}); the head (pid ${headPid}) kept running`,
  );
}

/** `rtjob start --address HOST:PORT --token T`: a node agent on this machine joins that head. */
async function joinCommand(o: StartOptions, res: NodeResourceOptions): Promise<void> {
  const token = givenToken(o) ?? readEnv('RTJOB_TOKEN');
  if (!token)
    throw new CliError(
      'joining needs the cluster token: --token-file PATH, --token T or RTJOB_TOKEN',
      2,
    );
  const address = o.address!.replace(/^wss?:\/\//, '');
  if (!/^[^\s/]+:\d+$/.test(address))
    throw new CliError(`--address must be HOST:PORT, got ${o.address}`, 2);
  const sessionDir = o.sessionDir ?? join(rtjobHome(), 'node-session');
  mkdirSync(join(sessionDir, 'logs'), { recursive: true, mode: 0o700 });
  const node = await spawnDaemon(
    nodeDaemonPath,
    {
      headAddress: address,
      token,
      sessionDir,
      host: o.host,
      shipLogs: true,
      ...res,
    } satisfies NodeDaemonOptions,
    join(sessionDir, 'logs', 'node.log'),
    join(sessionDir, 'node.json'),
    'node agent',
  );
  writeClusterFile({
    address,
    token,
    sessionDir,
    pids: [node.pid],
    role: 'node',
    startedAt: Date.now(),
  });
  console.log(
    `rtjob node agent started (pid ${node.pid}) and joined ${address} as ${String(node.nodeId)}`,
  );
  console.log('Stop it with:        rtjob stop');
}

/** `rtjob stop`: stops what `rtjob start` started here, then waits until every process is gone. */
export async function stopCommand(o: { graceMs?: number } = {}): Promise<void> {
  const info = readClusterFile();
  if (!info) {
    console.log('no cluster was started on this machine');
    return;
  }
  const alive = info.pids.filter(pidAlive);
  const headPid = info.headPid ?? (info.role === 'head' ? info.pids[0] : undefined);
  const headWasDead = headPid !== undefined && !pidAlive(headPid);
  // Node agents that joined from elsewhere are not this machine's to stop: ask the head which
  // run, before it goes, to name them afterwards.
  const joined =
    info.role === 'head' && !headWasDead && info.dashboardUrl
      ? await joinedNodes(info.dashboardUrl, info.token)
      : [];
  for (const pid of alive) {
    try {
      process.kill(pid, 'SIGTERM');
    } catch {
      // gone
    }
  }
  const deadline = Date.now() + (o.graceMs ?? 20_000);
  while (info.pids.some(pidAlive) && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 50));
  for (const pid of info.pids.filter(pidAlive)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  // A dead head cannot stop its jobs' drivers; do it from its state on disk.
  if (headWasDead && existsSync(join(info.sessionDir, 'head.sqlite'))) {
    const store = new OpsStore(join(info.sessionDir, 'head.sqlite'));
    try {
      const n = await stopOrphanDrivers(store, info.sessionDir);
      if (n > 0) console.log(`stopped ${n} job driver${n > 1 ? 's' : ''} left by the dead head`);
    } finally {
      store.close();
    }
  }
  removeClusterFile();
  const what =
    info.role === 'node' ? `this machine's node agent (joined to ${info.address})` : 'the cluster';
  console.log(
    alive.length
      ? `stopped ${what} (${alive.length} process${alive.length > 1 ? 'es' : ''})`
      : `${what} was not running; cleaned up`,
  );
  if (joined.length)
    console.log(
      `${joined.length} joined node agent${joined.length > 1 ? 's keep' : ' keeps'} running, waiting for a head at ${info.address}: ${joined.join(', ')}; \`rtjob stop\` on ${joined.length > 1 ? 'their machines' : 'its machine'} stops ${joined.length > 1 ? 'them' : 'it'}`,
    );
}

/**
 * The live node agents that joined the head at `url` from elsewhere (not the head's own), as
 * `node_… (host)`; none when the head does not answer within 3 s.
 */
async function joinedNodes(url: string, token: string): Promise<string[]> {
  try {
    let timer: NodeJS.Timeout | undefined;
    const { nodes } = await Promise.race([
      headApi({ url, token }).call('GET /api/nodes'),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('timeout')), 3000);
      }),
    ]).finally(() => clearTimeout(timer));
    return nodes
      .filter((n) => !n.isHead && n.state === 'ALIVE')
      .map((n) => `${n.nodeId} (${n.hostname})`);
  } catch {
    return [];
  }
}

/** `rtjob status [--json]`. */
export async function statusCommand(
  o: { address?: string; json?: boolean } & TokenOptions,
): Promise<void> {
  const ep = requireEndpoint(o);
  const s = await headApi(ep).call('GET /api/cluster');
  if (o.json) {
    console.log(JSON.stringify(s, null, 2));
    return;
  }
  console.log(`cluster ${s.headAddress ?? ''} dashboard ${s.dashboardUrl}`.replace(/\s+/g, ' '));
  console.log('');
  console.log(
    table(
      // What the machine really uses (sampled by its agent) and what actors reserved are
      // different things, so both are shown.
      [
        'NODE',
        'HOST',
        'STATE',
        'CPU IN USE',
        'MEMORY IN USE',
        'CPU RESERVED',
        'GPU RESERVED',
        'WORKERS',
      ],
      s.nodes.map((n) => {
        const used = (k: string) =>
          `${+((n.resourcesTotal[k] ?? 0) - (n.resourcesAvailable[k] ?? 0)).toFixed(2)}/${n.resourcesTotal[k] ?? 0}`;
        const cpu =
          n.cpuPercent === null
            ? '-'
            : `${Math.round(n.cpuPercent)}%` + (n.cpuCount ? ` of ${n.cpuCount} cores` : '');
        const mem = n.memoryTotalBytes
          ? `${bytes(n.memoryUsedBytes)} of ${bytes(n.memoryTotalBytes)} (${Math.round((100 * n.memoryUsedBytes) / n.memoryTotalBytes)}%)`
          : '-';
        return [
          n.nodeId + (n.isHead ? ' (head)' : ''),
          n.hostname,
          n.state,
          cpu,
          mem,
          used('CPU'),
          used('GPU'),
          n.workers,
        ];
      }),
    ),
  );
  console.log('');
  const res = Object.keys(s.resources.total).map((k) =>
    k === 'memory'
      ? `memory ${bytes(s.resources.used[k] ?? 0)}/${bytes(s.resources.total[k] ?? 0)}`
      : `${k} ${+(s.resources.used[k] ?? 0).toFixed(2)}/${s.resources.total[k]}`,
  );
  console.log(`reserved:  ${res.join(', ') || '-'}`);
  const fmt = (m: Record<string, number>) =>
    Object.entries(m)
      .map(([k, v]) => `${v} ${k}`)
      .join(', ') || 'none';
  console.log(`actors:    ${fmt(s.actorsByState)}`);
  console.log(`jobs:      ${fmt(s.jobsByStatus)}`);
  // The head and each job's driver as the head samples them; workers are on the dashboard.
  const use = (p: ProcessView) =>
    `${p.cpuPercent === null ? '-' : `${p.cpuPercent.toFixed(1)}%`} CPU, ` +
    `${p.rssBytes === null ? '-' : bytes(p.rssBytes)} (pid ${p.pid})`;
  for (const p of s.nodes.flatMap((n) => n.processes)) {
    if (p.kind === 'head') console.log(`head:      ${use(p)}`);
    if (p.kind === 'driver') console.log(`driver:    ${p.jobId} ${use(p)}`);
  }
}
