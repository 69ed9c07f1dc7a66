/**
 * `train_sft --packing-samples --gradient-checkpointing`: the same run as padded rows with kept
 * activations. Three optimizer steps of the built-in tiny model on `arith` (each step's loss
 * depends on the earlier updates): the final loss within 1e-5 relative, and the saved weights
 * within 1e-5 absolute (learning rate 1e-3: a hundredth of AdamW's move per step).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readWeights } from '../../model/checkpoint.ts';
import { trainSft } from '../../train/sft.ts';
import { maxAbsDiff } from '../fixtures/model/tiny.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const dir = mkdtempSync(join(tmpdir(), 'rtjob-sft-packing-'));
test.after(() => rmSync(dir, { recursive: true, force: true }));

test('packed and checkpointed SFT steps equal the padded ones', async () => {
  const common = {
    initBuiltin: true,
    datasetSize: 64,
    batchSize: 16,
    microBatchSize: 8,
    maxSteps: 3,
    warmupSteps: 0,
    lr: 1e-3,
    evalSteps: 0,
    verbose: false,
  };
  const padded = await trainSft({ ...common, savePath: join(dir, 'padded') });
  const packed = await trainSft({
    ...common,
    savePath: join(dir, 'packed'),
    packingSamples: true,
    gradientCheckpointing: true,
  });
  const rel = Math.abs(packed.finalLoss - padded.finalLoss) / padded.finalLoss;
  assert.ok(rel < 1e-5, `final loss ${packed.finalLoss} vs ${padded.finalLoss}`);
  const [a, b] = [readWeights(join(dir, 'padded')), readWeights(join(dir, 'packed'))];
  for (const [name, t] of Object.entries(a)) {
    const d = maxAbsDiff(b[name]!.data, t.data);
    assert.ok(d < 1e-5, `${name}: ${d}`);
  }
});

test.run();
