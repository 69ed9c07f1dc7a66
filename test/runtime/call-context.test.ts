import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { CallContext, callSignal, runInCall } from '../../runtime/call-context.ts';

test('callSignal is the running call’s, taken before its first await; outside a call it never aborts', async () => {
  const a = new CallContext('m', 'actor');
  const b = new CallContext('m', 'actor');
  const method = async () => {
    const signal = callSignal();
    await Promise.resolve();
    return signal;
  };
  const [pa, pb] = [runInCall(a, method), runInCall(b, method)];
  const outside = callSignal();
  a.cancel();
  const [sa, sb] = await Promise.all([pa, pb]);
  assert.is(sa.aborted, true);
  assert.is((sa.reason as { code?: string }).code, 'TASK_CANCELLED');
  assert.is(sb.aborted, false, 'the other call is not cancelled');
  assert.is(outside.aborted, false);
});

test('a signal asked for after the cancel is already aborted', () => {
  const c = new CallContext('m', 'actor');
  c.cancel();
  assert.is(
    runInCall(c, () => callSignal().aborted),
    true,
  );
});

test.run();
