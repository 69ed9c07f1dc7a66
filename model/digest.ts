/**
 * A content hash of named tensors: names in sorted order, shapes and the float32 bytes. Two
 * processes hold bit-identical weights exactly when their digests match, which lets a driver
 * check its engines against the trainer without moving the weights.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import type { NamedTensors } from './tensors.ts';

/** SHA-256 (hex) of `tensors`: sorted names, shapes and raw float32 bytes. */
export function weightsDigest(tensors: NamedTensors): string {
  const h = createHash('sha256');
  for (const name of Object.keys(tensors).sort()) {
    const t = tensors[name]!;
    h.update(`${name}:${t.shape.join('x')};`);
    h.update(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength));
  }
  return h.digest('hex');
}
