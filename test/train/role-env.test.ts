import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { roleEnv } from '../../train/ppo/remote-roles.ts';

const o = { asyncNumTasks: 8, asyncQueueSize: 2 };

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

test.run();
