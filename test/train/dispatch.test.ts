// Dispatch declared at the role: `replicated` runs the methods a role's class lists in its
// `static everyRank` on every data-parallel rank (answering with rank 0's result) and every other
// method on rank 0 alone; the driver holds no table of its own.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Critic } from '../../roles/critic.ts';
import { Trainer } from '../../roles/trainer.ts';
import { local, replicated } from '../../train/ppo/roles.ts';

/** A role whose calls are recorded per rank. */
class Counter {
  static readonly everyRank = ['step'] as const satisfies readonly (keyof Counter)[];
  readonly calls: string[] = [];
  constructor(readonly rank: number) {}
  step(n: number): number {
    this.calls.push(`step ${n}`);
    return this.rank * 100 + n;
  }
  save(): number {
    this.calls.push('save');
    return this.rank;
  }
}

test("a role's everyRank methods run on every rank, the others on rank 0", async () => {
  const ranks = [new Counter(0), new Counter(1), new Counter(2)];
  const role = replicated(ranks.map(local), Counter);
  assert.is(await role.step(7), 7, "rank 0's answer");
  assert.is(await role.save(), 0);
  assert.equal(
    ranks.map((r) => r.calls),
    [['step 7', 'save'], ['step 7'], ['step 7']],
  );
});

test('one rank is the role itself', async () => {
  const only = local(new Counter(0));
  assert.is(replicated([only], Counter), only);
});

test('the trainer and the critic declare their collective methods', () => {
  // train meets the other ranks in the gradient all-reduce; a rank left out would hang the step.
  for (const role of [Trainer, Critic]) {
    assert.ok(role.everyRank.includes('train'), role.name);
    assert.ok(role.everyRank.includes('loadCheckpoint'), role.name);
    // Every rank gathers its ZeRO shards of the optimizer state into the checkpoint.
    assert.ok(role.everyRank.includes('saveCheckpoint'), role.name);
  }
});

test.run();
