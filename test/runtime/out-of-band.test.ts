import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  decodeOutOfBand,
  encodeOutOfBand,
  installOutOfBandCodec,
  largeBytes,
} from '../../runtime/out-of-band.ts';

installOutOfBandCodec();

const join = (parts: Uint8Array[], total: number, at = 0) => {
  const host = Buffer.alloc(total + at);
  let o = at;
  for (const p of parts) {
    host.set(p, o);
    o += p.byteLength;
  }
  assert.is(o - at, total, 'parts add up to total');
  return host.subarray(at);
};

test('a value with large arrays round-trips; the arrays come back as views, the rest as given', () => {
  const backing = new Float32Array(40_000).map((_, i) => i);
  const value = {
    w: backing.subarray(7, 30_007), // a view with an offset
    layers: [new Float64Array(9000).fill(0.5), { ids: new Int32Array(20_000).fill(-3) }],
    raw: Buffer.alloc(70_000, 9),
    small: new Float32Array([1, 2, 3]),
    meta: { version: 4, name: 'policy' },
  };
  const { parts, total } = encodeOutOfBand(value);
  assert.is(parts.filter((p) => p.byteLength >= 64 << 10).length, 4, 'four arrays out of band');
  const bytes = join(parts, total);
  const got = decodeOutOfBand(bytes) as typeof value;
  assert.ok(got.w instanceof Float32Array && got.w.buffer === bytes.buffer, 'a view, not a copy');
  assert.equal([...got.w.subarray(0, 3)], [7, 8, 9]);
  assert.is(got.w.length, 30_000);
  assert.ok(got.layers[0] instanceof Float64Array);
  assert.is((got.layers[1] as { ids: Int32Array }).ids[19_999], -3);
  assert.ok(Buffer.isBuffer(got.raw) && got.raw.length === 70_000 && got.raw[69_999] === 9);
  assert.equal([...got.small], [1, 2, 3]);
  assert.equal(got.meta, { version: 4, name: 'policy' });
  assert.is(largeBytes(value), 30_000 * 4 + 9000 * 8 + 20_000 * 4 + 70_000);
});

test('a buffer at an unaligned offset still decodes (arrays copied out), and garbage is refused', () => {
  const { parts, total } = encodeOutOfBand({ a: new Float32Array(20_000).fill(2) });
  const got = decodeOutOfBand(join(parts, total, 3)) as { a: Float32Array };
  assert.is(got.a[19_999], 2);
  assert.throws(
    () => decodeOutOfBand(Buffer.from('not an out-of-band value at all')),
    /not an out-of-band value/,
  );
  const cut = join(parts, total).subarray(0, 200);
  assert.throws(() => decodeOutOfBand(cut), /malformed out-of-band segment/);
});

test.run();
