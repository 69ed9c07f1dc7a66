// `sbatch examples/slurm/rtjob.sbatch train_ppo …` on a real Slurm (Debian's slurm-wlm: munged,
// slurmctld, and two slurmd hosts, the second in a network namespace with its own address): the
// head starts on the allocation's first node, a node agent joins from the other, train_ppo's two
// data-parallel trainer ranks land one on each host and all-reduce over the link, and the token
// never shows on a command line (nor in the environment of the processes that got it by file).
import { once } from 'node:events';
import { readFileSync, readlinkSync, readdirSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { binPath, until } from '../cli/helpers.ts';
import { type CommandResult, freePort, SlurmCluster } from './slurm-cluster.ts';

const root = fileURLToPath(new URL('../../', import.meta.url));

/** A process seen while the job ran. */
interface Seen {
  pid: number;
  /** Its parent's pid. */
  ppid: number;
  cmdline: string;
  environ: string;
  /** Its network namespace, `net:[inode]`. */
  net: string;
}

function read(pid: number): Seen | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return {
      pid,
      ppid: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]),
      cmdline: readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' '),
      environ: readFileSync(`/proc/${pid}/environ`, 'utf8'),
      net: readlinkSync(`/proc/${pid}/ns/net`),
    };
  } catch {
    return undefined;
  }
}

// One Slurm cluster for the file's tests; each test fails (none skips) when it cannot start.
let started: Promise<SlurmCluster> | undefined;
const cluster = (): Promise<SlurmCluster> => (started ??= SlurmCluster.start());
test.after(async () => {
  await (await started?.catch(() => undefined))?.close();
});

/** `sbatch --wait examples/slurm/rtjob.sbatch <args>` on two nodes, bounded. */
function sbatch(slurm: SlurmCluster, args: string[]): Promise<CommandResult> {
  return slurm.run(
    'sbatch',
    [
      '--wait',
      '--parsable',
      '--nodes=2',
      `--output=${join(slurm.dir, 'job-%j.out')}`,
      `--chdir=${root}`,
      join(root, 'examples/slurm/rtjob.sbatch'),
      '--rtjob',
      `${process.execPath} ${binPath}`,
      ...args,
    ],
    { env: { TMPDIR: join(slurm.dir, 'tmp') }, timeoutMs: 150_000 },
  );
}

/** The output file of the job sbatch --parsable named. */
function jobOutput(slurm: SlurmCluster, r: CommandResult): { jobId: string; out: string } {
  const jobId = r.stdout.trim();
  return { jobId, out: readFileSync(join(slurm.dir, `job-${jobId}.out`), 'utf8') };
}

/** Resolves once no rtjob process the cluster started is left (the Slurm daemons remain). */
function rtjobGone(slurm: SlurmCluster): Promise<true> {
  return until(
    'the rtjob processes to exit',
    () =>
      slurm.ownProcesses().filter((p) => read(p)?.cmdline.includes('cli/')).length === 0
        ? true
        : undefined,
    20_000,
  );
}

test('an sbatch job starts a cluster over two Slurm hosts and runs train_ppo across them', async () => {
  const slurm = await cluster();
  const [n1, n2] = slurm.hosts;
  const tmp = join(slurm.dir, 'tmp');
  const model = await writeTinyModel(slurm.dir);
  const job = sbatch(slurm, [
    ...['--port', String(await freePort(n1.ip))],
    ...['--dashboard-port', String(await freePort(n1.ip))],
    // The two hosts are one machine: each says it has one (accounting-only) GPU, so the two
    // trainer ranks of one GPU each must go to different hosts.
    ...['--start-opts', '--num-gpus 1'],
    ...['--wait-s', '60'],
    'train_ppo',
    ...tinyRunArgs(model, join(slurm.dir, 'out'), {
      'actor-num-nodes': 2,
      'actor-num-gpus-per-node': 1,
    }),
  ]);
  let done = false;
  void job.finally(() => (done = true));

  // While it runs: every process it started, and the token once the script has made it.
  // By pid and command line: a step's `bash -c` becomes `rtjob start` by exec, on one pid.
  const seen = new Map<string, Seen>();
  let token: string | undefined;
  while (!done) {
    for (const pid of slurm.ownProcesses()) {
      const s = read(pid);
      if (s) seen.set(`${pid} ${s.cmdline}`, s);
    }
    const file = readdirSync(tmp).find((f) => /^rtjob-\d+\.token$/.test(f));
    if (file && !token) token = readFileSync(join(tmp, file), 'utf8').trim();
    await new Promise((r) => setTimeout(r, 200));
  }
  const r = await job;
  const { jobId, out } = jobOutput(slurm, r);
  assert.is(r.code, 0, `sbatch: ${r.stderr}\n${out}\n${slurm.logs()}`);
  assert.match(out, /job \S+ SUCCEEDED/);

  // The token: made by the script, on no command line; the daemons and the `rtjob start`
  // steps read it from the file, so it is not in their environment either.
  assert.ok(token && token.length >= 32, 'the script made a token file');
  assert.not.ok(out.includes(token), "the job's output shows the token");
  const all = [...seen.values()];
  for (const p of all)
    assert.not.ok(p.cmdline.includes(token), `pid ${p.pid}'s command line holds the token`);
  const daemons = all.filter((p) => /cli\/bin\.js start |cli\/(node-)?daemon\.ts /.test(p.cmdline));
  for (const p of daemons)
    assert.not.ok(p.environ.includes(token), `pid ${p.pid} (${p.cmdline}) has it in its env`);

  // One head and two node agents, the second in the other host's network namespace.
  const nsNet = `net:[${statSync(`/run/netns/${slurm.net.name}`).ino}]`;
  // A worker read between its fork and its exec still shows its daemon's command line: it is
  // told apart by its parent, that daemon.
  const daemonOf = (file: string): Seen[] => {
    const found = all.filter((p) => p.cmdline.includes(file));
    const pids = new Set(found.map((p) => p.pid));
    return found.filter((p) => !pids.has(p.ppid));
  };
  const heads = daemonOf('cli/daemon.ts');
  const agents = daemonOf('cli/node-daemon.ts');
  assert.is(heads.length, 1, 'one head daemon');
  assert.is.not(heads[0]!.net, nsNet, 'the head runs on the first host');
  assert.is(agents.length, 2, 'a node agent per host');
  assert.equal(agents.map((a) => a.net === nsNet).sort(), [false, true]);

  // The head's state: both hosts joined at their own address, and the trainer's two ranks
  // ran one on each.
  const session = join(tmp, `rtjob-${jobId}-${n1.name}`, 'session');
  const db = new Database(join(session, 'head.sqlite'), { readonly: true });
  try {
    const nodes = db.prepare('SELECT node_id, info FROM nodes').all() as {
      node_id: string;
      info: string;
    }[];
    const hostOf = new Map(
      nodes.map((n) => [n.node_id, (JSON.parse(n.info) as { host: string }).host]),
    );
    assert.equal([...hostOf.values()].sort(), [n1.ip, n2.ip].sort());
    const trainers = (
      db.prepare('SELECT node_id, info FROM actors').all() as { node_id: string; info: string }[]
    ).filter(
      (a) => (JSON.parse(a.info) as { spec: { exportName: string } }).spec.exportName === 'Trainer',
    );
    assert.equal(trainers.map((t) => hostOf.get(t.node_id)).sort(), [n1.ip, n2.ip].sort());
    const jobs = db.prepare('SELECT status FROM ops_jobs').all() as { status: string }[];
    assert.equal(jobs, [{ status: 'SUCCEEDED' }]);
    const steps = db
      .prepare("SELECT COUNT(DISTINCT step) AS n FROM ops_job_metrics WHERE name = 'reward_mean'")
      .get() as { n: number };
    assert.ok(steps.n >= 1, 'train_ppo logged its steps');
  } finally {
    db.close();
  }

  // The script stopped every rtjob process it started.
  await rtjobGone(slurm);
});

test('a head that cannot start ends the job at once, with its reason', async () => {
  const slurm = await cluster();
  const port = await freePort(slurm.hosts[0].ip);
  const taken = createServer().listen(port, slurm.hosts[0].ip);
  await once(taken, 'listening');
  try {
    const r = await sbatch(slurm, [
      ...['--port', String(port), '--dashboard-port', String(await freePort(slurm.hosts[0].ip))],
      ...['--wait-s', '120', 'train_ppo'],
    ]);
    const { out } = jobOutput(slurm, r);
    assert.is(r.code, 1, `sbatch: ${r.stderr}\n${out}`);
    assert.match(out, new RegExp(`rtjob: port ${port} is in use`));
    // It noticed the step's end instead of waiting out --wait-s.
    assert.match(out, /a start step ended/);
    assert.not.match(out, /waited at most/);
    await rtjobGone(slurm);
  } finally {
    taken.close();
  }
});

test.run();
