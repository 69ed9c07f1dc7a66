// train_ppo and train_sft send every metric they log to TensorBoard files, a W&B run and an MLflow
// run (W&B and MLflow are fakes of their routes, started here); a tracker that cannot be reached
// warns once and the run goes on with nothing lost from its own history.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { flagConfig, parseTrainPpoArgs } from '../../train/ppo/flags.ts';
import { parseTrainPpoFlags, trainPpo } from '../../train/ppo/main.ts';
import { trainSft } from '../../train/sft.ts';
import { openMlflow } from '../../train/trackers/mlflow.ts';
import { startFakeMlflow, startFakeWandb } from '../fakes/tracker-servers.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-trackers-'));
const key = 'k'.repeat(40);
let model = '';
const agent = fileURLToPath(new URL('../fixtures/agents/multi-turn-step.ts', import.meta.url));

test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

/** A run's log that keeps its lines and metric rows. */
function runLog() {
  const lines: string[] = [];
  const rows: { step: number; values: Record<string, number> }[] = [];
  return {
    lines,
    rows,
    log: {
      line: (t: string) => void lines.push(t),
      metric: (step: number, values: Record<string, number>) =>
        void rows.push({ step, values: { ...values } }),
    },
  };
}

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** The step of every event of a TensorBoard run directory (tensorboard-events.test.ts reads them whole). */
function tbSteps(dir: string): { step: number }[] {
  const [file] = readdirSync(dir);
  const buf = readFileSync(join(dir, file!));
  const out: { step: number }[] = [];
  for (let at = 0; at < buf.length; ) {
    const len = Number(buf.readBigUInt64LE(at));
    const rec = buf.subarray(at + 12, at + 12 + len);
    // Event: field 1 double (9 bytes with key), field 2 varint step, then field 5 the summary.
    let i = 9;
    let step = 0;
    if (rec[i] === 0x10) {
      i++;
      for (let shift = 0; ; shift += 7) {
        const b = rec[i++]!;
        step += (b & 0x7f) * 2 ** shift;
        if (b < 0x80) break;
      }
    }
    out.push({ step });
    at += 16 + len;
  }
  return out;
}

test('train_ppo sends every logged metric to TensorBoard, W&B and MLflow', async () => {
  const wandb = await startFakeWandb(key);
  const mlflow = await startFakeMlflow('tok');
  try {
    const { lines, rows, log } = runLog();
    const tb = join(root, 'tb');
    const env = {
      WANDB_BASE_URL: wandb.url,
      WANDB_DIR: join(root, 'wandb-a'),
      MLFLOW_TRACKING_TOKEN: 'tok',
    };
    const s = await trainPpo(
      tinyRunArgs(model, join(root, 'ppo-out'), {
        'in-process': true,
        'max-steps': 2,
        'agent-func': agent,
        'use-tensorboard': tb,
        use_wandb: key,
        'wandb-project': 'proj',
        'wandb-run-name': 'ppo-a',
        'wandb-group': 'g1',
        'use-mlflow': mlflow.url,
      }),
      env,
      { log, trackerFlushIntervalMs: 20 },
    );
    assert.is(s.steps, 2);
    assert.ok(rows.length >= 2);
    // W&B: one history line per logged row, the same step and finite values, then complete.
    const [wr] = [...wandb.runs.values()];
    assert.ok(wr, 'a W&B run was created');
    assert.is(wr!.entity, 'tester');
    assert.is(wr!.project, 'proj');
    assert.is(wr!.displayName, 'ppo-a');
    assert.is(wr!.groupName, 'g1');
    assert.is(wr!.exitcode, 0);
    // The SDK's local copy of an online run, under the same id.
    const id = [...wandb.runs.keys()][0]!.split('/')[2]!;
    assert.equal(
      readdirSync(join(root, 'wandb-a', 'wandb')).filter((n) => n.startsWith('run-')),
      [readdirSync(join(root, 'wandb-a', 'wandb')).find((n) => n.endsWith(`-${id}`))],
    );
    assert.is(wr!.config['n-samples-per-prompt']!.value, 2);
    assert.is(wr!.config['use-wandb']!.value, '(hidden)', 'the key is never sent as config');
    assert.not.ok(JSON.stringify(wr!.config).includes(key));
    assert.is(wr!.history.length, rows.length);
    rows.forEach((r, i) => {
      const h = wr!.history[i]!;
      assert.is(h._step, r.step);
      for (const [k, v] of Object.entries(r.values)) if (Number.isFinite(v)) assert.is(h[k], v, k);
    });
    assert.is(
      wr!.summary.reward_mean,
      rows.filter((r) => 'reward_mean' in r.values).at(-1)!.values.reward_mean,
    );
    // MLflow: the experiment made, the flags as params, every finite value at its step, FINISHED.
    assert.is(mlflow.experiments.has('proj'), true);
    const [mr] = [...mlflow.runs.values()];
    assert.is(mr!.runName, 'ppo-a');
    assert.is(mr!.status, 'FINISHED');
    assert.is(mr!.params['n-samples-per-prompt'], '2');
    assert.is(mr!.params['use-wandb'], '(hidden)');
    const expected = rows.flatMap((r) =>
      Object.entries(r.values)
        .filter(([, v]) => Number.isFinite(v))
        .map(([k, v]) => `${r.step}:${k}=${v}`),
    );
    assert.equal(
      mr!.metrics.map((m) => `${m.step}:${m.key}=${m.value}`),
      expected,
    );
    // TensorBoard: the version, the config text, then one event per logged row.
    const events = tbSteps(join(tb, 'ppo-a'));
    assert.equal(
      events.slice(2).map((e) => e.step),
      rows.map((r) => r.step),
    );
    assert.ok(lines.includes(`tensorboard: ${join(tb, 'ppo-a')}`));
    assert.ok(lines.some((l) => l.startsWith(`wandb: ${wandb.url}/tester/proj/runs/`)));
    assert.ok(
      lines.some((l) =>
        /^mlflow: http:\/\/127\.0\.0\.1:\d+\/#\/experiments\/\d+\/runs\/run0$/.test(l),
      ),
    );
    assert.not.ok(
      lines.some((l) => /not delivered|cannot reach/.test(l)),
      lines.join('\n'),
    );
  } finally {
    await wandb.close();
    await mlflow.close();
  }
});

test('trackers that cannot be reached warn once each and the run keeps all its metrics', async () => {
  const port = await closedPort();
  const { lines, rows, log } = runLog();
  const s = await trainPpo(
    tinyRunArgs(model, join(root, 'ppo-down'), {
      'in-process': true,
      'max-steps': 2,
      'agent-func': agent,
      'use-wandb': true,
      'use-mlflow': `http://127.0.0.1:${port}`,
    }),
    {
      WANDB_API_KEY: key,
      WANDB_BASE_URL: `http://127.0.0.1:${port}`,
      WANDB_DIR: join(root, 'wandb-down'),
    },
    { log, trackerFlushIntervalMs: 20 },
  );
  assert.is(s.steps, 2);
  assert.equal(
    rows.filter((r) => 'reward_mean' in r.values).map((r) => r.step),
    [1, 2],
  );
  for (const kind of ['wandb', 'mlflow']) {
    const warned = lines.filter((l) => l.startsWith(`${kind}: cannot reach`));
    assert.is(warned.length, 1, `${kind} warned once:\n${lines.join('\n')}`);
    assert.match(
      warned[0]!,
      /ECONNREFUSED\); the run goes on \(rtjob's own metrics keep every row\)/,
    );
    assert.ok(
      lines.some((l) => new RegExp(`^${kind}: \\d+ step row\\(s\\) not delivered`).test(l)),
      `${kind} says what it could not deliver`,
    );
  }
  // W&B's local copy (as the SDK keeps one) has every row, for `wandb sync` to upload later.
  const [copy] = readdirSync(join(root, 'wandb-down', 'wandb')).filter((n) => n.startsWith('run-'));
  const dir = join(root, 'wandb-down', 'wandb', copy!);
  assert.ok(
    lines.some((l) => l.endsWith(`its local copy has every row: wandb sync ${dir} uploads them`)),
    lines.join('\n'),
  );
  assert.ok(readdirSync(dir).some((n) => /^run-[a-z0-9]{8}\.wandb$/.test(n)));
});

test('a tracker that comes back gets every queued row once, in order', async () => {
  const mlflow = await startFakeMlflow();
  const warned: string[] = [];
  mlflow.down = true;
  try {
    const t = openMlflow(
      { uri: mlflow.url, experiment: 'back', env: {}, flushIntervalMs: 10 },
      {
        name: 'r',
        program: 'train_ppo',
        settings: [{ name: 'lr', value: '0.1' }],
        warn: (l) => warned.push(l),
      },
    );
    // 30 steps of 60 metrics: more than one log-batch request may carry (1000 metrics).
    for (let step = 1; step <= 30; step++)
      t.log(
        step,
        Object.fromEntries(Array.from({ length: 60 }, (_, k) => [`m${k}`, step + k / 100])),
      );
    while (warned.length === 0) await new Promise((r) => setTimeout(r, 10));
    assert.match(
      warned[0]!,
      /^mlflow: GET \/api\/2\.0\/mlflow\/experiments\/get-by-name answered 503/,
    );
    mlflow.down = false;
    await t.close('finished');
    const [run] = [...mlflow.runs.values()];
    assert.is(run!.status, 'FINISHED');
    assert.is(run!.params.lr, '0.1');
    assert.is(run!.metrics.length, 30 * 60);
    assert.ok(mlflow.largestBatch <= 1000, `batch of ${mlflow.largestBatch}`);
    assert.equal(
      run!.metrics.filter((m) => m.key === 'm0').map((m) => m.step),
      Array.from({ length: 30 }, (_, i) => i + 1),
    );
    assert.is(warned.filter((l) => /answered 503/.test(l)).length, 1, warned.join('\n'));
    assert.ok(warned.includes('mlflow: reached again; the queued rows were delivered'));
  } finally {
    await mlflow.close();
  }
});

test('tracker flags: OpenRLHF spellings, a bare --use-wandb, the key hidden, bad values refused', () => {
  const parse = (argv: string[], env = {}) => parseTrainPpoFlags(argv, env);
  assert.is(parse(['--use_wandb', key]).useWandb, key);
  assert.is(parse(['--use-wandb']).useWandb, 'true');
  assert.is(parse(['--use-wandb', '--wandb_project', 'p']).wandbProject, 'p');
  const { options: o, given } = parseTrainPpoArgs([
    '--use-wandb',
    key,
    '--use_tensorboard',
    '/tmp/tb',
  ]);
  const rows = flagConfig(o, given);
  assert.is(rows.find((r) => r.name === '--use-wandb')!.value, '(hidden)');
  assert.is(rows.find((r) => r.name === '--use-tensorboard')!.value, '/tmp/tb');
  assert.is(rows.find((r) => r.name === '--use-tensorboard')!.section, 'trackers');
});

test('train_ppo refuses a tracker it cannot use before anything starts', async () => {
  const run = (flags: Record<string, string | boolean>, env: Record<string, string> = {}) =>
    trainPpo(
      tinyRunArgs(model, join(root, 'ppo-bad'), { 'in-process': true, ...flags }),
      { HOME: root, ...env },
      runLog(),
    );
  for (const [flags, env, message] of [
    [
      { 'use-mlflow': 'file:///tmp/mlruns' },
      {},
      /^--use-mlflow: 'file:\/\/\/tmp\/mlruns' is not an http\(s\) tracking server/,
    ],
    [{ 'use-mlflow': true }, {}, /^--use-mlflow: give the tracking server/],
    [
      // Without WANDB_MODE a missing key writes the run offline (wandb-offline.test.ts).
      { 'use-wandb': true },
      { WANDB_MODE: 'online' },
      /^--use-wandb: no API key \(give --use-wandb KEY, set WANDB_API_KEY, or run `wandb login` for api\.wandb\.ai\)/,
    ],
  ] as const) {
    try {
      await run(flags, env);
      assert.unreachable('should have failed');
    } catch (err) {
      assert.is((err as { code?: string }).code, 'BAD_FLAG');
      assert.match((err as Error).message, message);
    }
  }
});

test('train_sft logs every step to its metrics and the trackers', async () => {
  const mlflow = await startFakeMlflow();
  try {
    const rows: { step: number; values: Record<string, number> }[] = [];
    const tb = join(root, 'sft-tb');
    await trainSft({
      initBuiltin: true,
      datasetSize: 40,
      batchSize: 4,
      microBatchSize: 4,
      maxSteps: 3,
      evalSteps: 0,
      savePath: join(root, 'sft-out'),
      verbose: false,
      useTensorboard: tb,
      useMlflow: mlflow.url,
      wandbRunName: 'sft-a',
      env: {},
      metric: (step, values) => void rows.push({ step, values: { ...values } }),
    });
    assert.equal(
      rows.map((r) => r.step),
      [1, 2, 3],
    );
    for (const r of rows) assert.ok(Number.isFinite(r.values.loss) && r.values.tokens! > 0);
    const [run] = [...mlflow.runs.values()];
    assert.is(run!.status, 'FINISHED');
    assert.is(run!.params['batch-size'], '4');
    assert.equal(
      run!.metrics.filter((m) => m.key === 'loss').map((m) => [m.step, m.value]),
      rows.map((r) => [r.step, r.values.loss]),
    );
    assert.equal(
      tbSteps(join(tb, 'sft-a'))
        .slice(2)
        .map((e) => e.step),
      [1, 2, 3],
    );
    const summary = readFileSync(join(root, 'sft-out', 'training_summary.json'), 'utf8');
    assert.not.match(summary, /MLFLOW|"env"/);
  } finally {
    await mlflow.close();
  }
});

test.run();
