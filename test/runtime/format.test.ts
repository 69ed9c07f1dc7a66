// runtime/format.ts: the durations and byte sizes the CLI and the dashboard both print.
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { bytes, duration, failureReason, parseBytes, resumeAdvice } from '../../runtime/format.ts';

test('durations: tenths of seconds under a minute, then minutes and seconds, then hours', () => {
  assert.is(duration(0), '0.0s');
  assert.is(duration(12_345), '12.3s');
  assert.is(duration(185_000), '3m 05s');
  assert.is(duration(3_720_000), '1h 02m');
  assert.is(duration(-5), '0.0s', 'clock skew never prints a negative duration');
  assert.is(duration(Number.NaN), '0.0s');
});

test('bytes: binary units with one decimal', () => {
  assert.is(bytes(512), '512 B');
  assert.is(bytes(1536), '1.5 KiB');
  assert.is(bytes(3 * 2 ** 30), '3.0 GiB');
  assert.is(bytes(2 ** 50), '1024.0 TiB');
});

test('byte sizes as people write them: decimal and binary units, or none', () => {
  assert.is(parseBytes('2GiB'), 2 * 2 ** 30);
  assert.is(parseBytes('512 MB'), 512e6);
  assert.is(parseBytes('1.5g'), 1.5e9);
  assert.is(parseBytes('1000000'), 1e6);
  assert.is(parseBytes('64KiB'), 65536);
  for (const bad of ['', 'lots', '-1GiB', '2 GiBs', '1e9'])
    assert.is(parseBytes(bad), undefined, bad);
});

test('a failed job’s reason: the error line, not the stack or the log around it', () => {
  const died = [
    'driver exited with code 1; last output:',
    '[train_ppo] step 6/300  reward 0.000',
    'train_ppo: RoleDiedError: the trainer died: killed',
    '    at main (file:///x/main.ts:3:9)',
    '  [cause]: ActorDiedError: actor a1 died',
    '',
    'Node.js v20.20.2',
  ].join('\n');
  assert.is(failureReason(died), 'train_ppo: RoleDiedError: the trainer died: killed');
  // No error's name: the last line that is no stack frame or Node's footer.
  assert.is(
    failureReason('driver exited with code 2; last output:\ntrain_ppo: unknown flag --zero-stage'),
    'train_ppo: unknown flag --zero-stage',
  );
  assert.is(failureReason('boom\n    at f (x.ts:1)\nNode.js v22.1.0'), 'boom');
  assert.is(failureReason('driver exited with code 1'), 'driver exited with code 1');
  assert.is(failureReason('driver exited with code 1; last output:'), 'driver exited with code 1');
});

test('resume advice: the lost steps, or the checkpoint and the flags that resume from it', () => {
  assert.is(resumeAdvice(undefined, 22), 'no checkpoint: the 22 steps done are lost');
  assert.is(resumeAdvice(undefined, null), 'no checkpoint');
  const c = { step: 10, resumeFlags: '--ckpt-path /c --load-checkpoint' };
  assert.is(
    resumeAdvice(c, 10),
    'the last checkpoint is at step 10: run the same command with --ckpt-path /c --load-checkpoint to resume from it',
  );
  assert.match(resumeAdvice(c, 11), /at step 10 \(step 11 is lost\):/);
  assert.match(resumeAdvice(c, 14), /at step 10 \(steps 11–14 are lost\):/);
});

test('the shared module stays free of Node imports (the dashboard bundles it for the browser)', async () => {
  const { readFileSync } = await import('node:fs');
  const src = readFileSync(new URL('../../runtime/format.ts', import.meta.url), 'utf8');
  assert.not.match(src, /^import /m);
});

test.run();
