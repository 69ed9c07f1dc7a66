import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  arithDataset,
  arithReward,
  builtinDataset,
  extractAnswer,
} from '../../train/data/arith.ts';

test('arith: seeded and reproducible; different seeds differ', () => {
  assert.equal(arithDataset({ size: 50 }), arithDataset({ size: 50 }));
  assert.not.equal(arithDataset({ size: 50, seed: 1 }), arithDataset({ size: 50, seed: 2 }));
});

test('arith: held-out prompts never occur in train; every gold answer is right and ends #### N', () => {
  const train = arithDataset({ size: 5000 });
  const heldOut = arithDataset({ split: 'test', size: 300 });
  const trainPrompts = new Set(train.map((r) => r.prompt));
  assert.ok(heldOut.every((r) => !trainPrompts.has(r.prompt)));
  for (const r of [...train.slice(0, 500), ...heldOut]) {
    assert.match(r.solution, new RegExp(`#### ${r.answer}$`));
    // each solution line "a op b=c" is correct arithmetic
    for (const line of r.solution.split('\n').slice(0, -1)) {
      const m = /^(\d+)([+\-*])(\d+)=(-?\d+)$/.exec(line);
      assert.ok(m, line);
      const [a, b, c] = [Number(m![1]), Number(m![3]), Number(m![4])];
      assert.is(m![2] === '+' ? a + b : m![2] === '-' ? a - b : a * b, c, line);
    }
    assert.ok(r.prompt.length <= 80, r.prompt);
    assert.is(arithReward(r.response, r.solution), 1);
  }
  assert.ok(new Set(train.map((r) => r.kind)).size >= 6, 'a mix of problem families');
});

test('named built-in datasets and answer extraction', () => {
  assert.is(builtinDataset('arith:test', { size: 10 })!.length, 10);
  assert.is(builtinDataset('nope'), undefined);
  assert.is(extractAnswer('3+4=7. The answer is 7.'), '7');
  assert.is(extractAnswer('so \\boxed{1,024} and The answer is 3'), '1024');
  assert.is(extractAnswer('7'), undefined);
  assert.is(arithReward('The answer is 12.', '#### 12'), 1);
  assert.is(arithReward('The answer is 13.', '#### 12'), 0);
});

test.run();
