/**
 * W&B's transaction log (`run-<id>.wandb`), the file `wandb sync` uploads: a 7-byte header
 * (ident `:W&B`, magic `0xBEE1` little-endian, version 0), then LevelDB's log format: 32 KiB
 * blocks (the header counts in the first), each record one or more chunks of `crc32 (uint32 LE),
 * length (uint16 LE), type (FULL 1, FIRST 2, MIDDLE 3, LAST 4), data`. A chunk never starts in
 * the last 6 bytes of a block: those are zero. The CRC is zlib's CRC-32 (IEEE, not LevelDB's
 * CRC-32C) of the type byte followed by the data, unmasked.
 *
 * Read from the SDK 0.28.3.dev1 (wandb/wandb at b6e2950, 2026-08): `wandb/sdk/internal/datastore.py`
 * (the Python writer) and `core/pkg/leveldb/record.go` with `core/internal/transactionlog/` (the Go
 * writer, `CRCAlgoIEEE`, store version 0), which frame records the same way.
 *
 * @module
 */
import { closeSync, openSync, writeSync } from 'node:fs';

const BLOCK_BYTES = 32 * 1024;
const CHUNK_HEADER_BYTES = 7;
const FULL = 1;
const FIRST = 2;
const MIDDLE = 3;
const LAST = 4;

/** The CRC-32 (IEEE, zlib's) table, reflected polynomial 0xEDB88320. */
const table = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** zlib's CRC-32 of the type byte then `data`, as W&B checks a chunk. */
function chunkCrc(type: number, data: Uint8Array): number {
  let c = table[(0xffffffff ^ type) & 0xff]! ^ (0xffffffff >>> 8);
  for (const b of data) c = table[(c ^ b) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** The file header: `:W&B`, magic 0xBEE1 (LE), store version 0. */
const fileHeader = Buffer.from([0x3a, 0x57, 0x26, 0x42, 0xe1, 0xbe, 0x00]);

/**
 * A `.wandb` file being written. Each record is written at once (one `write` call), so a run that
 * dies leaves every record before it readable.
 *
 * @example
 * const log = new WandbDatastore('/tmp/run-abc.wandb');
 * log.append(recordBytes);
 * log.close();
 */
export class WandbDatastore {
  readonly #fd: number;
  /** Bytes written so far, the header included. */
  #offset = 0;

  /** Creates `path` (which must not exist, as the SDK opens it) and writes the header. */
  constructor(path: string) {
    this.#fd = openSync(path, 'wx');
    this.#write(fileHeader);
  }

  /** Appends one record (a serialised `wandb_internal.Record`), split into chunks across blocks. */
  append(record: Uint8Array): void {
    const parts: Buffer[] = [];
    let at = this.#offset;
    let used = 0;
    // A block's last 7 bytes take a FIRST chunk with no data, so "first" is not "used === 0".
    let first = true;
    do {
      let left = BLOCK_BYTES - (at % BLOCK_BYTES);
      if (left < CHUNK_HEADER_BYTES) {
        parts.push(Buffer.alloc(left));
        at += left;
        left = BLOCK_BYTES;
      }
      const n = Math.min(record.length - used, left - CHUNK_HEADER_BYTES);
      const last = used + n === record.length;
      const type = first && last ? FULL : first ? FIRST : last ? LAST : MIDDLE;
      const data = record.subarray(used, used + n);
      const head = Buffer.alloc(CHUNK_HEADER_BYTES);
      head.writeUInt32LE(chunkCrc(type, data), 0);
      head.writeUInt16LE(n, 4);
      head.writeUInt8(type, 6);
      parts.push(head, Buffer.from(data));
      at += CHUNK_HEADER_BYTES + n;
      used += n;
      first = false;
    } while (used < record.length);
    this.#write(Buffer.concat(parts));
  }

  close(): void {
    closeSync(this.#fd);
  }

  #write(bytes: Buffer): void {
    for (let done = 0; done < bytes.length; )
      done += writeSync(this.#fd, bytes, done, bytes.length - done);
    this.#offset += bytes.length;
  }
}
