// The two planes are generic: the runtime (runtime/) and the operator plane (ops/: jobs, HTTP,
// logs, dashboard, metrics) serve any job, so their code names no RL concept. A job's samples
// carry a `score` and its report says what the job calls it (train_ppo: `samples: { score:
// 'reward' }`); summary cards and charts are whatever the report declares. Doc comments and
// quoted texts (help, examples, a migration's old column name) may still say what train_ppo does.
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { code, sourceFiles, type SourceFile } from './source-files.ts';

/** Words of RL training that only a job (train_ppo, the roles) may use in code. */
const rlWord = /reward|advantage|policy|critic|rollout/i;

function rlWords(files: SourceFile[]): string[] {
  const hits: string[] = [];
  for (const f of files)
    code(f.text)
      .split('\n')
      .forEach((line, i) => {
        // A template's prose is text too (its `${…}` parts are code, and hold no such word here).
        const bare = line.replace(/`(?:[^`\\]|\\.)*`/g, '``');
        if (rlWord.test(bare)) hits.push(`${f.path}:${i + 1}: ${line.trim()}`);
      });
  return hits;
}

/**
 * Files of a plane that are about RL runs on purpose, each with why. The list can only shrink.
 */
const exempt: Record<string, string> = {
  'ops/diagnose.ts':
    "`rtjob diagnose` reads train_ppo's phase timings (rollout, trainer, weight sync) to name the limiting side",
};

const planes = (): SourceFile[] =>
  sourceFiles().filter(
    (f) => (f.path.startsWith('runtime/') || f.path.startsWith('ops/')) && !(f.path in exempt),
  );

test('runtime/ and ops/ code names no RL concept (samples have a score, not a reward)', () => {
  assert.ok(planes().length > 50, 'the planes are found');
  const hits = rlWords(planes());
  assert.equal(hits, [], `a plane names an RL concept:\n${hits.join('\n')}`);
});

test('the check sees identifiers and fields, and not comments or quoted texts', () => {
  const probe = (text: string) => rlWords([{ path: 'ops/x.ts', text }]).length;
  assert.is(probe('const minReward = q.minReward;'), 1);
  assert.is(probe('s.groupRewardMean'), 1);
  assert.is(probe("db.exec('ALTER TABLE t RENAME COLUMN reward TO score');"), 0);
  assert.is(probe('const help = `the reward model ${url}`;'), 0);
  assert.is(probe('/** the reward of an episode */ const score = 1;'), 0);
});

test.run();
