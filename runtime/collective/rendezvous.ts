/**
 * How the members of a collective group find each other: each opens a TCP listener, publishes
 * its address and a fresh nonce in the head's KV under `collective/<group>/<rank>`, connects to
 * its right neighbour (rank + 1 mod N) and accepts exactly one connection, from its left
 * neighbour. A connection proves it belongs to the cluster with an HMAC of the listener's nonce
 * keyed by the cluster token, so the data sockets are as closed as the rest of the runtime.
 *
 * An entry left by an earlier group of the same name points at a listener that is gone (or
 * refuses the proof); the connecting side then reads the KV again until its deadline.
 *
 * @module
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { type Server, type Socket, connect, createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { splitAddress } from '../address.ts';
import { RtjobError } from '../errors.ts';

/** The head's KV, as the runtime reaches it. */
export interface Kv {
  put(key: string, value: Uint8Array): Promise<unknown>;
  get(key: string): Promise<Uint8Array | null>;
}

interface Entry {
  address: string;
  nonce: string;
  worldSize: number;
}

interface Hello {
  group: string;
  rank: number;
  worldSize: number;
  proof: string;
}

/** The two sockets of one ring member. */
export interface RingLinks {
  left: Socket | undefined;
  right: Socket | undefined;
}

/** What went wrong while forming the ring, in words (the group wraps it in a `CollectiveError`). */
export class RendezvousError extends RtjobError<'RENDEZVOUS'> {
  override get name(): string {
    return 'RendezvousError';
  }

  constructor(
    message: string,
    readonly reason: 'timeout' | 'mismatch',
  ) {
    super('RENDEZVOUS', message);
  }
}

const maxHelloBytes = 4096;

function proofOf(token: string, nonce: string, group: string, rank: number): string {
  return createHmac('sha256', token).update(`${nonce}\0${group}\0${rank}`).digest('hex');
}

/** Connects rank `rank` of `worldSize` into the ring of `group`; resolves with both sockets. */
export async function formRing(opts: {
  group: string;
  rank: number;
  worldSize: number;
  host: string;
  token: string;
  kv: Kv;
  deadlineMs: number;
}): Promise<RingLinks> {
  const { group, rank, worldSize: n } = opts;
  if (n === 1) return { left: undefined, right: undefined };
  const nonce = randomBytes(16).toString('hex');
  const leftRank = (rank - 1 + n) % n;
  const server = createServer({ noDelay: true });
  const left = acceptLeft(server, opts, nonce, leftRank);
  left.catch(() => {});
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, opts.host, () => resolve());
  });
  const port = (server.address() as { port: number }).port;
  const entry: Entry = { address: `${opts.host}:${port}`, nonce, worldSize: n };
  try {
    await opts.kv.put(keyOf(group, rank), Buffer.from(JSON.stringify(entry)));
    let right: Socket;
    try {
      right = await connectRight(opts);
    } catch (e) {
      left.then(
        (s) => s.destroy(),
        () => {},
      );
      throw e;
    }
    try {
      const l = await withDeadline(
        left,
        opts.deadlineMs,
        () => `rank ${leftRank} of group '${group}' did not connect`,
      );
      return { left: l, right };
    } catch (e) {
      right.destroy();
      throw e;
    }
  } finally {
    server.close();
  }
}

function keyOf(group: string, rank: number): string {
  return `collective/${group}/${rank}`;
}

async function withDeadline<T>(p: Promise<T>, deadlineMs: number, what: () => string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new RendezvousError(`${what()} before the join timeout`, 'timeout')),
      Math.max(0, deadlineMs - Date.now()),
    );
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Accepts the first connection that presents a valid hello from `leftRank`. */
function acceptLeft(
  server: Server,
  opts: { group: string; rank: number; worldSize: number; token: string },
  nonce: string,
  leftRank: number,
): Promise<Socket> {
  return new Promise((resolve, reject) => {
    server.once('close', () => reject(new Error('listener closed')));
    server.on('connection', (sock) => {
      sock.setNoDelay(true);
      readFrame(sock, 10_000).then(
        (bytes) => {
          let hello: Hello;
          try {
            hello = JSON.parse(bytes.toString('utf8')) as Hello;
          } catch {
            sock.destroy();
            return;
          }
          const want = Buffer.from(proofOf(opts.token, nonce, opts.group, leftRank));
          const got = Buffer.from(String(hello.proof));
          const ok =
            hello.group === opts.group &&
            hello.rank === leftRank &&
            hello.worldSize === opts.worldSize &&
            got.length === want.length &&
            timingSafeEqual(got, want);
          if (!ok) {
            sock.destroy();
            return;
          }
          server.removeAllListeners('connection');
          // The neighbour is here: anything else that connects before the listener closes is refused.
          server.on('connection', (other) => other.destroy());
          // Until the group watches it: an error must not go unhandled (the group sees `destroyed`).
          sock.on('error', () => {});
          // Held until the group listens: the neighbour may start an operation at once.
          sock.pause();
          sock.write(Buffer.from([1]));
          resolve(sock);
        },
        () => sock.destroy(),
      );
    });
  });
}

/** Reads the right neighbour's KV entry and connects, retrying until the deadline. */
async function connectRight(opts: {
  group: string;
  rank: number;
  worldSize: number;
  token: string;
  kv: Kv;
  deadlineMs: number;
}): Promise<Socket> {
  const rightRank = (opts.rank + 1) % opts.worldSize;
  let delayMs = 10;
  let last = 'no entry in the KV yet';
  while (Date.now() < opts.deadlineMs) {
    const raw = await opts.kv.get(keyOf(opts.group, rightRank));
    if (raw) {
      const entry = JSON.parse(Buffer.from(raw).toString('utf8')) as Entry;
      if (entry.worldSize !== opts.worldSize) {
        // Possibly a stale entry of an earlier group; a real mismatch shows as a timeout with this.
        last = `it registered with world size ${entry.worldSize}, this member with ${opts.worldSize}`;
      } else {
        try {
          return await handshake(entry, opts);
        } catch (e) {
          last = (e as Error).message;
        }
      }
    }
    await sleep(delayMs);
    delayMs = Math.min(delayMs * 2, 200);
  }
  throw new RendezvousError(
    `rank ${rightRank} of group '${opts.group}' could not be reached before the join timeout (${last})`,
    last.includes('world size') ? 'mismatch' : 'timeout',
  );
}

function handshake(
  entry: Entry,
  opts: { group: string; rank: number; worldSize: number; token: string },
): Promise<Socket> {
  const [host, port] = splitAddress(entry.address);
  return new Promise((resolve, reject) => {
    const sock = connect({ host, port, noDelay: true });
    const fail = (why: string) => {
      sock.destroy();
      reject(new Error(why));
    };
    const timer = setTimeout(() => fail(`no answer from ${entry.address}`), 5000);
    sock.once('error', (e) => {
      clearTimeout(timer);
      fail(`cannot connect to ${entry.address}: ${e.message}`);
    });
    sock.once('close', () => {
      clearTimeout(timer);
      fail(`${entry.address} refused the handshake`);
    });
    sock.once('connect', () => {
      const hello: Hello = {
        group: opts.group,
        rank: opts.rank,
        worldSize: opts.worldSize,
        proof: proofOf(opts.token, entry.nonce, opts.group, opts.rank),
      };
      const body = Buffer.from(JSON.stringify(hello));
      const len = Buffer.allocUnsafe(4);
      len.writeUInt32LE(body.length, 0);
      sock.write(Buffer.concat([len, body]));
    });
    sock.once('data', (d: Buffer) => {
      clearTimeout(timer);
      sock.removeAllListeners('close');
      sock.removeAllListeners('error');
      sock.on('error', () => {});
      if (d.length !== 1 || d[0] !== 1)
        return fail(`${entry.address} answered the handshake wrongly`);
      resolve(sock);
    });
  });
}

/** Reads one `[u32 length][bytes]` frame, refusing oversized ones. */
function readFrame(sock: Socket, timeoutMs: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const timer = setTimeout(() => done(new Error('handshake timeout')), timeoutMs);
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (buf.length < 4) return;
      const len = buf.readUInt32LE(0);
      if (len > maxHelloBytes || buf.length > 4 + len) return done(new Error('bad hello'));
      if (buf.length === 4 + len) done(undefined, buf.subarray(4));
    };
    const onEnd = () => done(new Error('closed during handshake'));
    function done(err: Error | undefined, v?: Buffer) {
      clearTimeout(timer);
      sock.off('data', onData);
      sock.off('error', onEnd);
      sock.off('close', onEnd);
      if (err) reject(err);
      else resolve(v!);
    }
    sock.on('data', onData);
    sock.on('error', onEnd);
    sock.on('close', onEnd);
  });
}
