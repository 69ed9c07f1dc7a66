/**
 * Why `train_rm` barely learns on the built-in arith pairs: a linear probe of what the starting
 * model's final hidden states carry. For each readout (the last token's hidden state, the one
 * before it, the mean and the max over the sequence) it fits a Bradley–Terry logistic regression
 * on the chosen-minus-rejected features of the training pairs, the frozen backbone's best case
 * for a value head, and reports pairwise accuracy on the held-out pairs beside the LM's own
 * likelihood preference (`train_rm` prints the same number).
 *
 *   node --conditions=rtjob-source --import tsx scripts/rm-probe.ts [MODEL_DIR] [TRAIN_PAIRS]
 */
import { initBackend, tf } from '../model/backend.ts';
import { padBatch } from '../model/batches.ts';
import { loadModel } from '../model/checkpoint.ts';
import { arithPreferencePairs, encodeAnswer } from '../train/rm.ts';

type Readouts = Record<'last' | 'prev' | 'mean' | 'max', Float32Array>;

await initBackend();
const dir = process.argv[2] ?? 'model/pretrained/rtjob-tiny-math';
const { model, tokenizer } = await loadModel(dir);
if (!tokenizer) throw new Error(`${dir} has no tokenizer.json`);
const H = model.config.hidden_size;
const encode = (ps: ReturnType<typeof arithPreferencePairs>): number[][] =>
  ps.flatMap((p) => [
    encodeAnswer(tokenizer, p.prompt, p.chosen),
    encodeAnswer(tokenizer, p.prompt, p.rejected),
  ]);
// The same pairs as train_rm's defaults (seed 42).
const train = encode(arithPreferencePairs('arith', Number(process.argv[3] ?? 2000), 42));
const held = encode(arithPreferencePairs('arith:test', 200, 43));

async function readouts(seqs: number[][]): Promise<Readouts[]> {
  const out: Readouts[] = [];
  for (let i = 0; i < seqs.length; i += 64) {
    const mb = seqs.slice(i, i + 64);
    const { ids, lengths, T } = padBatch(mb, model.config.pad_token_id ?? 0);
    const hidden = tf.tidy(() => model.forward(ids, { grad: false }).hidden);
    const h = (await hidden.data()) as Float32Array;
    hidden.dispose();
    ids.dispose();
    lengths.forEach((L, b) => {
      const at = (t: number): Float32Array => h.subarray((b * T + t) * H, (b * T + t + 1) * H);
      const mean = new Float32Array(H);
      const max = new Float32Array(H).fill(-Infinity);
      for (let t = 0; t < L; t++)
        at(t).forEach((v, k) => {
          mean[k]! += v / L;
          max[k] = Math.max(max[k]!, v);
        });
      out.push({ last: at(L - 1).slice(), prev: at(L - 2).slice(), mean, max });
    });
  }
  return out;
}

/** chosen − rejected features of each pair. */
const diffs = (r: Readouts[], key: keyof Readouts): Float32Array[] =>
  Array.from({ length: r.length / 2 }, (_, k) =>
    r[2 * k]![key].map((v, j) => v - r[2 * k + 1]![key][j]!),
  );

const rTrain = await readouts(train);
const rHeld = await readouts(held);
for (const key of ['last', 'prev', 'mean', 'max'] as const) {
  const X = diffs(rTrain, key);
  const w = new Float64Array(H);
  // Full-batch gradient descent on the Bradley–Terry loss −log σ(w·(h_c − h_r)).
  for (let it = 0; it < 2000; it++) {
    const g = new Float64Array(H);
    for (const x of X) {
      const s = 1 / (1 + Math.exp(x.reduce((a, v, j) => a + v * w[j]!, 0)));
      for (let j = 0; j < H; j++) g[j]! -= (s * x[j]!) / X.length;
    }
    for (let j = 0; j < H; j++) w[j]! -= 0.5 * g[j]!;
  }
  const acc = (XX: Float32Array[]): string =>
    (
      (100 * XX.filter((x) => x.reduce((a, v, j) => a + v * w[j]!, 0) > 0).length) /
      XX.length
    ).toFixed(1);
  console.log(`${key}: train ${acc(X)}%, held-out ${acc(diffs(rHeld, key))}%`);
}
model.dispose();
