/**
 * `examples/rule-judge.ts`, the stand-in judge the README trains `examples/judged-agent.ts`
 * against: started as its own process, it is reached by the real `Judge` client over OpenAI's
 * wire and grades the example's rubric from the prompt `judge()` writes (a GSM8K-style reference
 * with `#### N`), refusing a wrong key.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Judge, JudgeError } from '../../rewards/index.ts';

const script = fileURLToPath(new URL('../../examples/rule-judge.ts', import.meta.url));

test('the rule judge grades over the wire: 10 right, 1 another number, 0 none', async () => {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', script, '--port', '0', '--api-key', 'rule-key-1'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  try {
    const baseURL = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout!.on('data', (d) => {
        out += d;
        const m = /on (http:\/\/\S+\/v1)/.exec(out);
        if (m) resolve(m[1]!);
      });
      child.stderr!.on('data', (d) => (out += d));
      child.once('exit', (c) => reject(new Error(`rule judge exited ${c}: ${out}`)));
    });
    const j = new Judge({ baseURL, apiKey: 'rule-key-1', model: 'judge', maxRetries: 0 });
    const ask = (response: string) =>
      j.grade({ prompt: 'What is 4*10?', response, reference: '4*10=40\n#### 40' });
    assert.is((await ask('4*10=40. The answer is 40.')).grade, 10);
    assert.is((await ask('4*10=44. The answer is 44.')).grade, 1);
    // The last stated answer counts.
    assert.is((await ask('The answer is 44. No: 4*10=40. The answer is 40.')).grade, 10);
    assert.is((await ask('forty')).grade, 0);
    const wrongKey = new Judge({ baseURL, apiKey: 'nope-nope', model: 'judge', maxRetries: 0 });
    try {
      await wrongKey.grade({ prompt: 'q', response: 'The answer is 1.' });
      assert.unreachable('a wrong key is refused');
    } catch (e) {
      assert.instance(e, JudgeError);
      assert.match((e as Error).message, /401/);
    }
  } finally {
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await exited;
  }
});

test.run();
