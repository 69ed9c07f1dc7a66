/**
 * `npm run bench -- driver`: what one train_ppo step costs the driver process (CPU time and the
 * bytes it receives and sends) as episodes grow 16× longer, for the driver that passes
 * references (this tree: `train/ppo/step.ts`, `episodes.ts`) against its peer in the same run,
 * the driver that carried every token (the data work it did before: trajectories by value from
 * the rollouts, episode metrics and samples decoded from tokens, experience made in the driver,
 * token rows sent to reference, critic and trainer, and logprob and value rows back).
 *
 * The roles are stand-ins at the wire: what the driver would send an actor is packed with the
 * runtime's codec (`runtime/protocol.ts pack`), what an actor would answer is packed outside the
 * timing and unpacked inside it, so each side pays what its process pays and no model runs. The
 * rollout's own work (its report, its decoding) is outside the timing too. Setting: GAE with a KL
 * reference (every token path of the old driver), `BENCH_DRIVER_GROUPS` groups (default 8) of 4
 * episodes, episode lengths `BENCH_DRIVER_LENGTHS` (default 256,4096), `BENCH_DRIVER_STEPS` steps
 * each (default 5), the two drivers alternating; medians. Writes bench/results/driver.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { GroupResult } from '../agents/episode-runner.ts';
import { computeReturns, makeExperience } from '../algorithms/experience.ts';
import { createKlController } from '../algorithms/kl.ts';
import type { Trajectory } from '../algorithms/trajectory.ts';
import { tinyMathModelDir } from '../model/index.ts';
import { loadTokenizer } from '../model/tokenizer.ts';
import { groupReport, type GroupReport } from '../roles/episode-report.ts';
import type { StepStats } from '../roles/trainer.ts';
import { pack, unpack } from '../runtime/protocol.ts';
import { recordEpisodes } from '../train/ppo/episodes.ts';
import { parseTrainPpoFlags } from '../train/ppo/flags.ts';
import { resolveOptions } from '../train/ppo/main.ts';
import type { Roles } from '../train/ppo/roles.ts';
import type { RunContext } from '../train/ppo/run-state.ts';
import { filterGroups, trainOn } from '../train/ppo/step.ts';
import { compileRunConfig } from '../train/ppo/run-config.ts';

const groups = Number(process.env.BENCH_DRIVER_GROUPS ?? 8);
const perGroup = 4;
const lengths = (process.env.BENCH_DRIVER_LENGTHS ?? '256,4096').split(',').map(Number);
const steps = Number(process.env.BENCH_DRIVER_STEPS ?? 5);
const promptLen = 64;
const tok = loadTokenizer(tinyMathModelDir);
const decode = (ids: number[]): string => tok.decode(ids, { skipSpecialTokens: true });
const o = resolveOptions(
  parseTrainPpoFlags(['--advantage-estimator', 'gae', '--init-kl-coef', '0.05']),
  {},
);

/** Bytes the driver received and sent in one step. */
const wire = { in: 0, out: 0 };
const send = (v: unknown): void => void (wire.out += pack(v).length);
const receive = <T>(bytes: Buffer): T => {
  wire.in += bytes.length;
  return unpack(bytes) as T;
};

/** A group of `perGroup` episodes of `len` tokens (prompt, then generated tokens). */
function group(index: number, len: number): GroupResult {
  const trajectories: Trajectory[] = Array.from({ length: perGroup }, (_, e) => ({
    inputIds: Array.from({ length: len }, (_, i) => 100 + ((i * 7 + e) % 500)),
    lossMask: Array.from({ length: len }, (_, i) => (i < promptLen ? 0 : 1)),
    logprobs: Array.from({ length: len }, (_, i) => (i < promptLen ? 0 : -1 - ((i + e) % 5) / 10)),
    versions: Array.from({ length: len }, (_, i) => (i < promptLen ? -1 : 0)),
    reward: (index + e) % 2,
    groupId: `g${index}`,
    promptIndex: index,
    truncated: false,
  }));
  return {
    index,
    groupId: `g${index}`,
    status: 'ok',
    errors: [],
    episodes: perGroup,
    trajectories,
  };
}

/** What a step's rows from a role look like on the wire (sequences × (len − 1) numbers). */
const rowsBytes = (len: number): Buffer =>
  pack(Array.from({ length: groups * perGroup }, () => new Array<number>(len - 1).fill(-0.5)));

const stats: StepStats = {
  version: 1,
  policyLoss: 0,
  clipFraction: 0,
  approxKl: 0,
  entropy: 0,
  gradNorm: 0,
  optimizerSteps: 1,
  tokens: 0,
  lr: 0,
  timing: { computeMs: 0, imbalanceMs: 0, allreduceMs: 0, optimizerMs: 0 },
  paddingFraction: 0,
  rewardMean: 0.5,
  kl: 0,
  responseLength: 0,
  staleMean: 0,
  staleMax: 0,
  samples: groups * perGroup,
  experienceMs: 0,
};

/** A driver context with stand-in roles that pack what they are sent. */
function context(): RunContext {
  const handoff = (id: string) => ({ ref: { id, owner: 'ws://rollout:1' } });
  const roles = {
    reference: { logprobsOf: async (b: unknown) => (send(b), handoff('ref')) },
    critic: {
      valuesOf: async (b: unknown) => (send(b), handoff('values')),
      trainStep: async (s: unknown) => (send(s), { valueLoss: 0, optimizerSteps: 1, lr: 0 }),
    },
    trainer: { trainStep: async (s: unknown) => (send(s), stats) },
  } as unknown as Roles;
  return {
    o,
    config: compileRunConfig(o, 1),
    roles,
    kl: createKlController({ initKlCoef: 0.05 }),
    log: { line: () => {}, metric: () => {}, samples: (_s: number, x: unknown) => send(x) },
    state: { step: 0, episodes: 0, failed: 0 },
  } as unknown as RunContext;
}

/** The reference-passing driver: reports in, references out. */
async function byReference(ctx: RunContext, replies: Buffer[]): Promise<void> {
  const reports = replies.map((b) => receive<GroupReport>(b));
  const { kept } = filterGroups(reports, o);
  ctx.state.step++;
  recordEpisodes(ctx, reports);
  await trainOn(kept, ctx.roles, ctx.config.experience, ctx);
}

/** The token-carrying driver's data work, as it was: trajectories in, token rows out and back. */
function byValue(replies: Buffer[], len: number): void {
  const results = replies.map((b) => receive<GroupResult>(b));
  const ts = results.flatMap((g) => g.trajectories);
  // Episode metrics from the masks and versions; up to 16 samples decoded again.
  let tokens = 0;
  for (const t of ts)
    for (let i = 0; i < t.lossMask.length; i++) tokens += t.versions[i]! >= 0 ? t.lossMask[i]! : 0;
  const samples = ts.slice(0, 16).map((t) => decode(t.inputIds.slice(t.lossMask.indexOf(1))));
  send(samples);
  const xs = makeExperience(ts, {});
  const seqs = xs.map((s) => Array.from(s.inputIds));
  send(seqs); // reference
  send(seqs); // critic values
  const ref = receive<number[][]>(rowsBytes(len));
  const values = receive<number[][]>(rowsBytes(len));
  const batch = computeReturns(
    xs,
    { refLogprobs: ref, values },
    { klCoef: 0.05, advantage: { estimator: 'gae' } },
  );
  send(
    xs.map((s, i) => ({
      inputIds: s.inputIds,
      actionMask: s.actionMask,
      advantages: batch.advantages[i],
      oldLogprobs: s.behaviourLogprobs,
      refLogprobs: ref[i],
    })),
  );
  send(
    xs.map((s, i) => ({
      inputIds: s.inputIds,
      actionMask: s.actionMask,
      oldValues: values[i],
      returns: batch.returns[i],
    })),
  );
  if (tokens < 0) throw new Error('unreachable');
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const rows: Record<string, number | string>[] = [];
for (const len of lengths) {
  const results = Array.from({ length: groups }, (_, k) => group(k, len));
  // The rollouts' replies, made where they run (outside the timing).
  const valueReplies = results.map((g) => pack(g));
  const refReplies = results.map((g) =>
    pack({
      ...groupReport(g, { decode, prompt: 'p', samples: 2 }),
      batch: { ref: { id: `b${g.index}`, owner: 'ws://rollout:1' } },
    }),
  );
  const runs: Record<'reference' | 'value', { cpuMs: number[]; inB: number; outB: number }> = {
    reference: { cpuMs: [], inB: 0, outB: 0 },
    value: { cpuMs: [], inB: 0, outB: 0 },
  };
  for (let s = 0; s < steps + 1; s++) {
    for (const path of ['reference', 'value'] as const) {
      wire.in = wire.out = 0;
      const c0 = process.cpuUsage();
      if (path === 'reference') await byReference(context(), refReplies);
      else byValue(valueReplies, len);
      const c = process.cpuUsage(c0);
      if (s === 0) continue; // warm-up
      runs[path].cpuMs.push((c.user + c.system) / 1000);
      runs[path].inB = wire.in;
      runs[path].outB = wire.out;
    }
  }
  for (const path of ['value', 'reference'] as const) {
    const r = runs[path];
    rows.push({
      driver: path === 'value' ? 'tokens by value (before)' : 'references (now)',
      episodeTokens: len,
      cpuMsPerStep: median(r.cpuMs),
      kbIn: Math.round(r.inB / 1024),
      kbOut: Math.round(r.outB / 1024),
    });
  }
}
console.log(
  `${groups} groups × ${perGroup} episodes a step, GAE + KL reference; medians of ${steps} steps`,
);
console.table(rows);
const out = fileURLToPath(new URL('./results/', import.meta.url));
mkdirSync(out, { recursive: true });
writeFileSync(`${out}driver.json`, JSON.stringify({ groups, perGroup, steps, rows }, null, 2));
