import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { roleEnv } from '../../train/ppo/remote-roles.ts';

const o = { asyncNumTasks: 8, asyncQueueSize: 2, colocateAllModels: false };

test("every role gets the driver's RTJOB_TF_BACKEND, and none when the driver has none", () => {
  assert.equal(roleEnv(o, { RTJOB_TF_BACKEND: 'cpu' }), {
    ASYNC_NUM_TASKS: '8',
    ASYNC_QUEUE_SIZE: '2',
    RTJOB_QUIET_BACKEND: '1',
    RTJOB_TF_BACKEND: 'cpu',
  });
  assert.not.ok('RTJOB_TF_BACKEND' in roleEnv(o, {}));
  assert.throws(
    () => roleEnv(o, { RTJOB_TF_BACKEND: 'cuda' }),
    /expected one of torch, webgpu, wasm, cpu/,
  );
});

test("colocated roles compute on their bundle's one core unless the driver sets OMP_NUM_THREADS", () => {
  const colocated = { ...o, colocateAllModels: true };
  assert.is(roleEnv(colocated, {}).OMP_NUM_THREADS, '1');
  assert.is(roleEnv(colocated, { OMP_NUM_THREADS: '4' }).OMP_NUM_THREADS, '4');
  assert.is(roleEnv(o, { OMP_NUM_THREADS: '3' }).OMP_NUM_THREADS, '3', 'passed on as given');
  assert.not.ok('OMP_NUM_THREADS' in roleEnv(o, {}), 'not colocated: libtorch decides');
});

test.run();
