import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ActorDiedError, TaskError, fromWire, isRtjobError, toWire } from '../../runtime/errors.ts';
import { invalidMessage, pack, unpack, unpackFrame } from '../../runtime/protocol.ts';

test('typed arrays survive the codec with their type and values', () => {
  const v = {
    f32: new Float32Array([1.5, -2, 3.25]),
    f64: new Float64Array([Math.PI]),
    i32: new Int32Array([-7, 8]),
    u8: new Uint8Array([0, 255]),
    i64: new BigInt64Array([5n]),
    nested: [{ x: new Uint16Array([9]) }],
  };
  const back = unpack(pack(v)) as typeof v;
  assert.ok(back.f32 instanceof Float32Array);
  assert.equal(Array.from(back.f32), [1.5, -2, 3.25]);
  assert.ok(back.f64 instanceof Float64Array);
  assert.ok(back.i32 instanceof Int32Array);
  assert.ok(back.u8 instanceof Uint8Array);
  assert.is(back.i64[0], 5n);
  assert.ok(back.nested[0]!.x instanceof Uint16Array);
});

test('a typed array costs its bytes plus a few header bytes on the wire', () => {
  const a = new Float32Array(1024);
  assert.ok(pack(a).length <= a.byteLength + 8);
});

test('one frame can hold several messages back to back', () => {
  const frame = Buffer.concat([pack({ type: 'ping', rid: 1 }), pack({ type: 'ping', rid: 2 })]);
  assert.equal(unpackFrame(frame), [
    { type: 'ping', rid: 1 },
    { type: 'ping', rid: 2 },
  ]);
});

test('invalidMessage names what is wrong', () => {
  assert.is(invalidMessage({ type: 'call', rid: 1, method: 'f', args: [] }), undefined);
  assert.match(invalidMessage([1, 2]) ?? '', /not an object/);
  assert.match(invalidMessage({ rid: 1 }) ?? '', /no string type/);
  assert.match(
    invalidMessage({ type: 'launchMissiles' }) ?? '',
    /unknown message type 'launchMissiles'/,
  );
  assert.match(invalidMessage({ type: 'ping', rid: 'x' }) ?? '', /rid/);
});

test('errors keep name, code, context, cause and remote stack across the wire', () => {
  const inner = new ActorDiedError('worker died', { context: { actorId: 'a1', exitCode: 3 } });
  const outer = new TaskError('RangeError', 'bad', { context: { actorId: 'a2' }, cause: inner });
  const wire = unpack(pack(toWire(outer))) as ReturnType<typeof toWire>;
  const back = fromWire(wire);
  assert.ok(back instanceof TaskError);
  assert.is(back.name, 'TaskError');
  assert.is((back as TaskError).remoteName, 'RangeError');
  assert.is(back.context.actorId, 'a2');
  assert.ok(back.remoteStack);
  assert.ok(isRtjobError(back.cause, 'ACTOR_DIED'));
  assert.is((back.cause as ActorDiedError).context.exitCode, 3);
});

test('plain thrown values become TASK errors', () => {
  const w = toWire(new TypeError('nope'));
  assert.is(w.code, 'TASK');
  assert.is(w.name, 'TypeError');
  assert.is(toWire('just a string').message, 'just a string');
});

test.run();
