/**
 * Authenticated WebSocket connections shared by every rtjob process: token check at the upgrade,
 * request/response by `rid`, heartbeats, a frame size limit, batched writes, and large messages
 * sent over the connection's bulk link (`bulk.ts`), a second socket opened on first use, so they
 * never hold up other traffic. A peer that sends something malformed, oversized or unexpected has
 * its connection closed with a logged reason; the process carries on.
 *
 * Over 500 lines on purpose: one concept (a connection's framing, requests, heartbeats and
 * flow control) and the two ways to open one, which share its options. The bulk link's stream is
 * in `bulk.ts`, message checks in `wire-schemas.ts`.
 *
 * @module
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { type IncomingMessage, STATUS_CODES, createServer } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { WebSocket, WebSocketServer } from 'ws';
import { AuthError, ConnectionError, InvalidArgumentError, fromWire, toWire } from './errors.ts';
import { guarded, logger } from './log.ts';
import {
  type AnyRequestBody,
  type ReplyOf,
  type Message,
  type MessageType,
  invalidMessage,
  pack,
  unpack,
  unpackFrame,
} from './protocol.ts';
import { BulkReader, bulkHeader, bulkProtocol, bulkTicketHeader, openBulkLink } from './bulk.ts';
import {
  Immutable,
  decodeOutOfBand,
  encodeOutOfBand,
  installOutOfBandCodec,
  isOutOfBand,
  largeBytes,
  packOutOfBand,
} from './out-of-band.ts';
import { invalidFields } from './wire-schemas.ts';

const log = logger('transport');
installOutOfBandCodec();

/** Connection limits and timers. */
export interface TransportOptions {
  /** Largest WebSocket frame accepted. @default 64 MiB */
  maxFrameBytes?: number;
  /** Largest message the bulk link accepts; a larger announced size closes it. @default 2 GiB */
  maxMessageBytes?: number;
  /**
   * Messages larger than this, or with this many bytes in large typed arrays, go over the bulk
   * link. @default 1 MiB
   */
  bulkMinBytes?: number;
  /** How often each side pings. @default 1000 */
  heartbeatIntervalMs?: number;
  /** Silence after which the connection is declared dead and closed. @default 30000 */
  heartbeatTimeoutMs?: number;
  /**
   * Whether open sockets keep the process alive. Drivers pass false: their process then lives
   * while a request is outstanding and may exit once the script is done. @default true
   */
  holdProcess?: boolean;
}

export const transportDefaults: Required<TransportOptions> = {
  maxFrameBytes: 64 * 1024 * 1024,
  maxMessageBytes: 2 * 1024 * 1024 * 1024 - 1,
  bulkMinBytes: 1024 * 1024,
  heartbeatIntervalMs: 1000,
  heartbeatTimeoutMs: 30_000,
  holdProcess: true,
};

/**
 * Keeps the process alive while requests on non-holding connections are outstanding: one timer,
 * referenced only while the count is above zero (ref/unref are cheap enough for every call).
 */
let outstanding = 0;
const keepalive = setInterval(() => {}, 2 ** 30);
keepalive.unref();
function holdOpen(delta: number): void {
  outstanding += delta;
  if (outstanding === delta && delta > 0) keepalive.ref();
  else if (outstanding === 0) keepalive.unref();
}

/** Keeps the process alive until `p` settles (e.g. an orderly shutdown over unref'd sockets). */
export async function holdProcessWhile<T>(p: Promise<T>): Promise<T> {
  holdOpen(1);
  try {
    return await p;
  } finally {
    holdOpen(-1);
  }
}

function unrefSocket(ws: WebSocket): void {
  (ws as unknown as { _socket?: { unref?(): void } })._socket?.unref?.();
}

/** Called for every message but replies and `bulkOpen`; a returned value answers `rid`. */
export type Handler = (msg: Message, conn: Connection) => unknown;

/** Per-request options. */
export interface RequestOptions {
  /**
   * On a connection that does not hold the process, whether this outstanding request does
   * (false for long polls that watch something, so they never keep a finished driver alive).
   * @default true
   */
  holdProcess?: boolean;
}

/** How a reply is delivered: `(undefined, value)` or `(error)`. */
export type ReplyCallback = (err: Error | undefined, value?: unknown) => void;

interface OutgoingLarge {
  /** The message's bytes: one packed buffer, or an out-of-band value's parts in place. */
  parts: Uint8Array[];
  length: number;
  /** The reusable buffer the bytes lie in, given back once they are written. */
  spare?: Buffer;
}

/**
 * How a connection gets its bulk link: the WebSocket's client opens it with the ticket the server
 * gave in the handshake; the server, when it has a large message first, asks the client to.
 */
type BulkSide =
  | { readonly role: 'client'; readonly address: string; readonly token: string; ticket?: string }
  | { readonly role: 'server' };

/**
 * One buffer this process reuses for out-of-band messages it sends: a fresh 64 MiB buffer costs
 * 16,384 page faults, several times the copy into it (measured 40-75 ms against 7-15 ms under
 * load). Taken by one message at a time; dropped after a few idle seconds.
 */
let spareSendBuffer: Buffer | undefined;
let spareTimer: NodeJS.Timeout | undefined;
function takeSpare(bytes: number): Buffer | undefined {
  const b = spareSendBuffer;
  // Not for much smaller messages: the buffer would be held for their whole send.
  if (!b || b.length < bytes || b.length > 4 * bytes) return undefined;
  spareSendBuffer = undefined;
  return b;
}
function giveSpare(b: Buffer): void {
  if (spareSendBuffer && spareSendBuffer.length >= b.length) return;
  spareSendBuffer = b;
  clearTimeout(spareTimer);
  spareTimer = setTimeout(() => (spareSendBuffer = undefined), 5000);
  spareTimer.unref();
}
/** How long a bulk link may take to open (connect, upgrade) before the connection is closed. */
const bulkOpenTimeoutMs = 10_000;
let nextConnId = 1;

export { bulkBytesInFlight, setProcessBulkBudget } from './bulk.ts';

/** One authenticated connection, either side. */
export class Connection {
  readonly id = nextConnId++;
  /** Free slot for the owner (the head keeps the peer's role here). */
  meta: Record<string, unknown> = {};
  closed = false;
  closeReason = '';
  private finished = false;

  private readonly ws: WebSocket;
  private readonly opts: Required<TransportOptions>;
  private readonly label: string;
  private readonly pending = new Map<number, ReplyCallback>();
  private nextRid = 1;
  private small: Buffer[] = [];
  private flushScheduled = false;
  /** The bulk link, once open; large messages wait in `bulkWaiting` until it is. */
  private bulk: Socket | undefined;
  private bulkState: 'none' | 'opening' | 'open' = 'none';
  private bulkWaiting: OutgoingLarge[] = [];
  private bulkTimer: NodeJS.Timeout | undefined;
  private readonly bulkReader: BulkReader;
  /** Whether the peer may open a bulk link yet (a head allows it once the peer registered). */
  private bulkAllowed: boolean;
  private lastSeenMs = Date.now();
  private lastBeatMs = Date.now();
  private heartbeatTimeoutMs: number;
  private readonly heartbeat: NodeJS.Timeout;
  private readonly closeListeners: ((reason: string) => void)[] = [];

  constructor(
    ws: WebSocket,
    private handler: Handler,
    private readonly accepts: ReadonlySet<MessageType> | undefined,
    opts: Required<TransportOptions>,
    label: string,
    private readonly bulkSide: BulkSide,
    bulkAllowed = true,
  ) {
    this.bulkAllowed = bulkAllowed;
    this.bulkReader = new BulkReader(
      opts.maxMessageBytes,
      (bytes) => guarded(log, `large message from ${label}`, () => this.onBulkMessage(bytes)),
      (reason) => this.close(reason, 1008),
    );
    this.ws = ws;
    this.opts = opts;
    this.label = label;
    this.heartbeatTimeoutMs = opts.heartbeatTimeoutMs;
    ws.binaryType = 'nodebuffer';
    ws.on('message', (data: Buffer, isBinary: boolean) =>
      guarded(log, `message from ${label}`, () => this.onFrame(data, isBinary)),
    );
    ws.on('pong', () => (this.lastSeenMs = Date.now()));
    ws.on('ping', () => (this.lastSeenMs = Date.now()));
    // ws reports protocol violations (oversized frame, bad opcode) with a WS_ERR_* code.
    ws.on('error', (err: Error & { code?: string }) =>
      this.close(`socket error: ${err.message}`, 1002, err.code?.startsWith('WS_ERR') ?? false),
    );
    ws.on('close', (code: number, reason: Buffer) =>
      this.onClosed(
        this.closeReason || `closed by peer (${code} ${reason.toString()})`.trim(),
        true,
      ),
    );
    this.heartbeat = setInterval(() => this.beat(), opts.heartbeatIntervalMs);
    this.heartbeat.unref();
    if (!opts.holdProcess) unrefSocket(ws);
  }

  /** Lets the peer open a bulk link for large messages (called once it has registered). */
  allowBulk(): void {
    this.bulkAllowed = true;
  }

  /** Replaces the message handler (a role is known only after registration). */
  setHandler(h: Handler): void {
    this.handler = h;
  }

  /** Whether this connection's bulk link is open (it opens with the first large message). */
  get bulkLinked(): boolean {
    return this.bulkState === 'open' && this.bulk !== undefined;
  }

  /** Peer address as `host:port`, for logs. */
  get peer(): string {
    return this.label;
  }

  /**
   * Sends a one-way message. Dropped silently when the connection is closed. A message whose
   * typed arrays are large is laid out out of band (`out-of-band.ts`: arrays copied once, raw,
   * and decoded into views of the received bytes); it, and any message over `bulkMinBytes`, goes
   * over the bulk link, written from that one buffer. `inPlace`: the message's arrays stay
   * unchanged until it is written (an `Immutable` reply), so they are written from their own
   * memory, with no copy.
   */
  send(msg: Message, inPlace = false): void {
    if (this.closed) return;
    let job: OutgoingLarge;
    if (largeBytes(msg) < this.opts.bulkMinBytes) {
      const bytes = pack(msg);
      if (bytes.length <= this.opts.bulkMinBytes) {
        this.small.push(bytes);
        this.scheduleFlush();
        return;
      }
      job = { parts: [bytes], length: bytes.length };
    } else if (inPlace) {
      const { parts, total } = encodeOutOfBand(msg);
      job = { parts, length: total };
    } else {
      let spare: Buffer | undefined;
      const bytes = packOutOfBand(msg, (n) => {
        spare = takeSpare(n) ?? Buffer.allocUnsafeSlow(n);
        return spare.subarray(0, n);
      });
      job = { parts: [bytes], length: bytes.length, spare };
    }
    if (this.bulkState === 'open') this.writeBulk(job);
    else {
      this.bulkWaiting.push(job);
      this.openBulk();
    }
  }

  /**
   * Sends a request and resolves with the reply's value (rejects with the remote error); the
   * value's type is the one `Replies` gives the request's `type`.
   */
  request<B extends AnyRequestBody>(body: B, opts?: RequestOptions): Promise<ReplyOf<B['type']>> {
    return new Promise((resolve, reject) =>
      this.requestCb(
        body,
        (err, value) => (err ? reject(err) : resolve(value as ReplyOf<B['type']>)),
        opts,
      ),
    );
  }

  /**
   * Sends a request and calls `cb` with the reply, without a promise in between: the hot path
   * of actor calls. `cb` is called exactly once, possibly synchronously when the connection is
   * already closed or the body cannot be packed.
   */
  requestCb(body: AnyRequestBody, cb: ReplyCallback, opts?: RequestOptions): void {
    if (this.closed) {
      cb(new ConnectionError(`connection to ${this.label} is closed: ${this.closeReason}`));
      return;
    }
    const rid = this.nextRid++;
    let done = cb;
    if (!this.opts.holdProcess && opts?.holdProcess !== false) {
      holdOpen(1);
      done = (err, value) => {
        holdOpen(-1);
        cb(err, value);
      };
    }
    this.pending.set(rid, done);
    try {
      (body as { rid?: number }).rid = rid;
      this.send(body as unknown as Message);
    } catch (e) {
      this.pending.delete(rid);
      done(e as Error);
    }
  }

  /**
   * Answers request `rid` with a value; an `Immutable` one's arrays are written from their own
   * memory (see `out-of-band.ts`).
   */
  reply(rid: number, value: unknown): void {
    try {
      if (value instanceof Immutable) this.send({ type: 'reply', rid, value: value.value }, true);
      else this.send({ type: 'reply', rid, value });
    } catch (e) {
      this.send({ type: 'reply', rid, error: toWire(e) });
    }
  }

  /** Answers request `rid` with an error. */
  replyError(rid: number, err: unknown): void {
    this.send({ type: 'reply', rid, error: toWire(err) });
  }

  /** Registers a listener for the end of the connection (reason in words). */
  onClose(fn: (reason: string) => void): void {
    if (this.finished) guarded(log, `close handler of ${this.label}`, () => fn(this.closeReason));
    else this.closeListeners.push(fn);
  }

  /** Closes the connection, logging `reason` when it is the peer's fault. */
  close(reason = 'closed', code = 1000, warn = code !== 1000): void {
    if (this.closed) return;
    if (warn) log.warn(`closing connection ${this.label}: ${reason}`);
    this.closeReason = reason;
    try {
      if (this.small.length) this.flush();
      this.ws.close(code, reason.slice(0, 120));
    } catch {
      this.ws.terminate();
    }
    // A peer that never answers the close handshake must not keep the socket alive.
    setTimeout(() => this.ws.terminate(), 2000).unref();
    this.onClosed(reason);
  }

  /**
   * The end of the connection: `byPeer` when its WebSocket closed from the other side. A large
   * message the peer sent before closing may still be arriving on the bulk link (a second
   * socket, so the close can overtake it): the connection then ends once that message is in or
   * the link closes, and its reply still reaches the caller.
   */
  private onClosed(reason: string, byPeer = false): void {
    if (this.finished) return;
    const waitForBulk = byPeer && !this.closed && this.bulk !== undefined && this.bulkReader.busy;
    this.closed = true;
    this.closeReason ||= reason;
    if (!waitForBulk) return this.finish();
    const bulk = this.bulk!;
    setTimeout(() => bulk.destroy(), this.heartbeatTimeoutMs).unref();
  }

  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    clearInterval(this.heartbeat);
    clearTimeout(this.bulkTimer);
    this.small = [];
    this.bulkWaiting = [];
    this.bulkReader.clear();
    const bulk = this.bulk;
    if (bulk) {
      // Ended once the WebSocket is closed, so the peer learns why from its close frame rather
      // than from the link going first; what was written still goes out, and a peer that stops
      // reading does not keep the socket.
      if (this.ws.readyState === WebSocket.CLOSED) bulk.end();
      else this.ws.once('close', () => bulk.end());
      setTimeout(() => bulk.destroy(), 4000).unref();
    }
    const err = new ConnectionError(`connection to ${this.label} closed: ${this.closeReason}`);
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) guarded(log, `reply handler of ${this.label}`, () => p(err));
    const listeners = this.closeListeners.splice(0);
    for (const fn of listeners)
      guarded(log, `close handler of ${this.label}`, () => fn(this.closeReason));
  }

  /** Changes how long the peer may stay silent (the head tightens it for node agents). */
  setHeartbeatTimeout(ms: number): void {
    this.heartbeatTimeoutMs = ms;
  }

  private beat(): void {
    const now = Date.now();
    // If this process itself was stalled (CPU starved, long GC), replies may be sitting unread
    // in the socket; don't blame the peer for our own pause.
    if (now - this.lastBeatMs > 3 * this.opts.heartbeatIntervalMs) this.lastSeenMs = now;
    this.lastBeatMs = now;
    if (now - this.lastSeenMs > this.heartbeatTimeoutMs) {
      this.close(`heartbeat timeout after ${this.heartbeatTimeoutMs} ms`, 1001, true);
      this.ws.terminate();
      return;
    }
    try {
      this.ws.ping();
    } catch {
      // The close event follows.
    }
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => this.flush());
  }

  private flush(): void {
    this.flushScheduled = false;
    if (this.closed || this.small.length === 0) return;
    const batch = this.small.length === 1 ? this.small[0]! : Buffer.concat(this.small);
    this.small = [];
    this.ws.send(batch);
  }

  /** Opens the bulk link (client), or asks the peer to (server); once per connection. */
  private openBulk(): void {
    if (this.bulkState !== 'none') return;
    this.bulkState = 'opening';
    const side = this.bulkSide;
    if (side.role === 'server') {
      this.small.push(pack({ type: 'bulkOpen' }));
      this.scheduleFlush();
      this.bulkTimer = setTimeout(
        () => this.close(`the peer did not open its bulk link in ${bulkOpenTimeoutMs} ms`, 1011),
        bulkOpenTimeoutMs,
      );
      this.bulkTimer.unref();
      return;
    }
    if (side.ticket === undefined) return this.close('the peer gave no bulk ticket', 1002);
    openBulkLink(side.address, side.token, side.ticket, this.bulkReader, bulkOpenTimeoutMs).then(
      (sock) => this.attachBulk(sock),
      (e: Error) => this.close(`cannot open the bulk link: ${e.message}`, 1011),
    );
  }

  /**
   * The server's side of a bulk upgrade naming this connection: answers it and takes the socket,
   * or returns why not (the caller refuses the upgrade).
   */
  acceptBulk(sock: Socket, head: Buffer): string | undefined {
    if (this.closed) return 'the connection is closed';
    if (this.bulkState === 'open') return 'a second bulk link';
    // A head lets a peer send large messages only once it registered, unless it asked itself.
    if (!this.bulkAllowed && this.bulkState !== 'opening')
      return 'large message before registering';
    sock.setNoDelay(true);
    sock.write(
      `HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${bulkProtocol}\r\nConnection: Upgrade\r\n\r\n`,
    );
    this.attachBulk(sock);
    sock.on('data', (d: Buffer) => this.bulkReader.feed(d));
    if (head.length > 0) this.bulkReader.feed(head);
    return undefined;
  }

  private attachBulk(sock: Socket): void {
    if (this.closed) {
      sock.destroy();
      return;
    }
    this.bulk = sock;
    this.bulkState = 'open';
    clearTimeout(this.bulkTimer);
    if (!this.opts.holdProcess) sock.unref();
    sock.on('error', () => {}); // 'close' follows
    sock.on('end', () => sock.end());
    sock.on('close', () => this.onBulkClosed());
    for (const job of this.bulkWaiting.splice(0)) this.writeBulk(job);
  }

  private writeBulk(job: OutgoingLarge): void {
    const sock = this.bulk!;
    sock.cork();
    sock.write(bulkHeader(job.length));
    const last = job.parts.length - 1;
    for (let i = 0; i < last; i++) sock.write(job.parts[i]!);
    sock.write(job.parts[last]!, (err) => {
      if (!err && job.spare) giveSpare(job.spare);
    });
    sock.uncork();
  }

  private onBulkClosed(): void {
    const midMessage = this.bulkReader.busy;
    this.bulkReader.clear();
    this.bulk = undefined;
    if (this.closed) return this.finish();
    this.close(`bulk link closed${midMessage ? ' in the middle of a message' : ''}`, 1011);
  }

  private onBulkMessage(bytes: Buffer): void {
    if (this.finished) return;
    let msg: unknown;
    try {
      msg = isOutOfBand(bytes) ? decodeOutOfBand(bytes) : unpack(bytes);
    } catch (e) {
      return this.close(`malformed large message: ${(e as Error).message}`, 1007);
    }
    if (!this.closed) return this.dispatch(msg);
    // The peer closed after sending this: only a reply still has someone waiting for it.
    if ((msg as { type?: unknown } | null)?.type === 'reply') this.dispatch(msg);
    this.finish();
  }

  private onFrame(data: Buffer, isBinary: boolean): void {
    this.lastSeenMs = Date.now();
    if (this.closed) return;
    if (!isBinary)
      return this.close('text frame received; only binary msgpack frames are allowed', 1003);
    let msgs: unknown[];
    try {
      msgs = unpackFrame(data);
    } catch (e) {
      return this.close(`malformed frame: ${(e as Error).message}`, 1007);
    }
    for (let i = 0; i < msgs.length; i++) {
      if (this.closed) return;
      this.dispatch(msgs[i]);
    }
  }

  private dispatch(m: unknown): void {
    const bad = invalidMessage(m);
    if (bad) return this.close(bad, 1008);
    const msg = m as Message;
    if (
      msg.type !== 'reply' &&
      msg.type !== 'bulkOpen' &&
      this.accepts &&
      !this.accepts.has(msg.type)
    ) {
      return this.close(`unexpected message type '${msg.type}' for this endpoint`, 1008);
    }
    // Every message is checked against its type's schema before anything reads its fields.
    const badField = invalidFields(msg);
    if (badField !== undefined) {
      const rid = (msg as { rid?: unknown }).rid;
      if (msg.type !== 'reply' && Number.isSafeInteger(rid)) {
        return this.replyError(
          rid as number,
          new InvalidArgumentError(`invalid '${msg.type}': ${badField}`),
        );
      }
      return this.close(`invalid '${msg.type}': ${badField}`, 1008);
    }
    if (msg.type === 'reply') {
      const p = this.pending.get(msg.rid);
      if (!p) return; // a reply to a request that timed out or was never made; harmless
      this.pending.delete(msg.rid);
      guarded(log, `reply handler of ${this.label}`, () =>
        msg.error ? p(fromWire(msg.error)) : p(undefined, msg.value),
      );
      return;
    }
    if (msg.type === 'bulkOpen') {
      if (this.bulkSide.role === 'server') return this.close('bulkOpen from a client', 1008);
      return this.openBulk();
    }
    const rid = (msg as { rid?: number }).rid;
    let result: unknown;
    try {
      result = this.handler(msg, this);
    } catch (e) {
      if (rid !== undefined) this.replyError(rid, e);
      else log.warn(`handler for '${msg.type}' from ${this.label} threw: ${(e as Error).message}`);
      return;
    }
    if (rid === undefined) {
      if (isThenable(result)) {
        result.then(undefined, (e: Error) =>
          log.warn(`handler for '${msg.type}' from ${this.label} failed: ${e.message}`),
        );
      }
      return;
    }
    if (isThenable(result)) {
      result.then(
        (v) => this.reply(rid, v),
        (e) => this.replyError(rid, e),
      );
    } else {
      this.reply(rid, result);
    }
  }
}

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return (
    v !== null &&
    (typeof v === 'object' || typeof v === 'function') &&
    typeof (v as { then?: unknown }).then === 'function'
  );
}

/** Options for `listen`. */
export interface ListenOptions extends TransportOptions {
  /** @default '127.0.0.1' */
  host?: string;
  /** 0 picks a free port. @default 0 */
  port?: number;
  /** The cluster token every peer must present. */
  token: string;
  /** Message types this endpoint serves; others close the connection. */
  accepts?: ReadonlySet<MessageType>;
  /** Handles messages on every accepted connection. */
  handler: Handler;
  /** Called for each authenticated connection. */
  onConnection?: (conn: Connection) => void;
  /**
   * Refuse a peer's bulk link until the handler calls `conn.allowBulk()` (the head does once a
   * peer registers), so an unregistered peer cannot make this process hold large messages.
   * @default false
   */
  bulkAfterRegistration?: boolean;
}

/** A listening endpoint. */
export interface Server {
  readonly host: string;
  readonly port: number;
  /** `host:port` */
  readonly address: string;
  readonly connections: ReadonlySet<Connection>;
  close(): Promise<void>;
}

/**
 * Logs refused connections at most once a minute per address (with how many were not logged), so
 * a peer hammering the port with bad tokens cannot fill the log.
 */
class RefusalLog {
  private readonly byAddress = new Map<string, { loggedAtMs: number; quiet: number }>();
  note(address: string): void {
    const now = Date.now();
    const e = this.byAddress.get(address);
    if (e && now - e.loggedAtMs < 60_000) {
      e.quiet++;
      return;
    }
    const more = e?.quiet ? ` (${e.quiet} more since the last line)` : '';
    log.warn(`rejected connection from ${address}: bad or missing token${more}`);
    if (this.byAddress.size >= 1024) this.byAddress.clear(); // bounded: forget old addresses
    this.byAddress.set(address, { loggedAtMs: now, quiet: 0 });
  }
}
const refusals = new RefusalLog();

function tokenMatches(given: string | undefined, token: string): boolean {
  if (given === undefined) return false;
  const a = Buffer.from(given);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

function bearer(req: IncomingMessage): string | undefined {
  const h = req.headers.authorization;
  if (typeof h === 'string' && h.startsWith('Bearer ')) return h.slice(7);
  return undefined;
}

/** Answers an upgrade request with an HTTP error and closes its socket. */
function refuseUpgrade(socket: Socket, status: number, why: string): void {
  socket.once('finish', () => socket.destroy());
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nConnection: close\r\n` +
      `Content-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(why)}\r\n\r\n${why}`,
  );
}

/**
 * Starts an authenticated WebSocket endpoint. The token is checked at every upgrade on its port:
 * to a WebSocket, or to a connection's bulk link (`bulk.ts`).
 */
export function listen(options: ListenOptions): Promise<Server> {
  const opts = { ...transportDefaults, ...stripUndefined(options) };
  const host = options.host ?? '127.0.0.1';
  const connections = new Set<Connection>();
  const bulkSockets = new Set<Socket>();
  /** Each connection's bulk ticket, given in its WebSocket handshake and named by its link. */
  const tickets = new Map<string, Connection>();
  const ticketOf = new WeakMap<IncomingMessage, string>();
  const http = createServer((_req, res) => res.writeHead(426).end('Upgrade Required'));
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: opts.maxFrameBytes,
    perMessageDeflate: false,
    skipUTF8Validation: true,
  });
  wss.on('headers', (headers, req) => {
    const ticket = randomBytes(16).toString('hex');
    ticketOf.set(req, ticket);
    headers.push(`${bulkTicketHeader}: ${ticket}`);
  });
  http.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    socket.on('error', () => {}); // a peer that resets mid-handshake; the socket closes
    if (!tokenMatches(bearer(req), options.token)) {
      refusals.note(req.socket.remoteAddress ?? '?');
      return refuseUpgrade(socket, 401, 'bad or missing token');
    }
    const protocol = String(req.headers.upgrade ?? '').toLowerCase();
    if (protocol === 'websocket') {
      return wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws, req));
    }
    if (protocol !== bulkProtocol) return refuseUpgrade(socket, 400, 'unknown upgrade');
    const conn = tickets.get(String(req.headers[bulkTicketHeader]));
    if (!conn) return refuseUpgrade(socket, 403, 'unknown bulk ticket');
    const refused = conn.acceptBulk(socket, head);
    if (refused !== undefined) {
      refuseUpgrade(socket, 409, refused);
      return conn.close(refused, 1008);
    }
    bulkSockets.add(socket);
    socket.once('close', () => bulkSockets.delete(socket));
  });
  wss.on('connection', (ws, req: IncomingMessage) => {
    const label = `${req.socket.remoteAddress}:${req.socket.remotePort}`;
    const conn = new Connection(
      ws,
      options.handler,
      options.accepts,
      opts,
      label,
      { role: 'server' },
      !options.bulkAfterRegistration,
    );
    const ticket = ticketOf.get(req)!;
    tickets.set(ticket, conn);
    connections.add(conn);
    conn.onClose(() => {
      connections.delete(conn);
      tickets.delete(ticket);
    });
    options.onConnection?.(conn);
  });
  wss.on('error', (e) => log.error(`server error: ${e.message}`));
  http.on('error', (e) => log.error(`server error: ${e.message}`));
  return new Promise((resolve, reject) => {
    http.once('error', reject);
    http.listen(options.port ?? 0, host, () => {
      http.off('error', reject);
      if (!opts.holdProcess) http.unref();
      const port = (http.address() as AddressInfo).port;
      resolve({
        host,
        port,
        address: `${host}:${port}`,
        connections,
        close: () =>
          new Promise<void>((done) => {
            for (const c of connections) c.close('server shutting down');
            for (const ws of wss.clients) ws.terminate();
            for (const b of bulkSockets) b.destroy();
            wss.close();
            http.close(() => done());
            http.closeAllConnections();
          }),
      });
    });
  });
}

/** Options for `connect`. */
export interface ConnectOptions extends TransportOptions {
  token: string;
  handler?: Handler;
  accepts?: ReadonlySet<MessageType>;
  /** Give up connecting after this long. @default 10000 */
  connectTimeoutMs?: number;
}

/** Opens an authenticated connection to `address` (`host:port`). */
export function connect(address: string, options: ConnectOptions): Promise<Connection> {
  const opts = { ...transportDefaults, ...stripUndefined(options) };
  const ws = new WebSocket(`ws://${address}`, {
    headers: { authorization: `Bearer ${options.token}` },
    maxPayload: opts.maxFrameBytes,
    perMessageDeflate: false,
    skipUTF8Validation: true,
    // A zero mask lets ws send client frames without a masked copy of every byte. Masking guards
    // browsers' intermediaries against cache poisoning; these peers are authenticated processes.
    generateMask: zeroMask,
  });
  const bulk: BulkSide = { role: 'client', address, token: options.token };
  ws.once('upgrade', (res) => {
    const ticket = res.headers[bulkTicketHeader];
    if (typeof ticket === 'string') bulk.ticket = ticket;
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      ws.terminate();
      reject(new ConnectionError(`timed out connecting to ${address}`));
    }, options.connectTimeoutMs ?? 10_000);
    ws.once('unexpected-response', (_req, res) => {
      clearTimeout(timer);
      ws.terminate();
      if (res.statusCode === 401) reject(new AuthError(`${address} refused the token`));
      else reject(new ConnectionError(`${address} answered HTTP ${res.statusCode}`));
    });
    ws.once('error', (e) => {
      clearTimeout(timer);
      reject(new ConnectionError(`cannot connect to ${address}: ${e.message}`, { cause: e }));
    });
    ws.once('open', () => {
      clearTimeout(timer);
      ws.removeAllListeners('error');
      ws.removeAllListeners('unexpected-response');
      const handler: Handler =
        options.handler ??
        ((m, c) => c.close(`unexpected message type '${m.type}' for this endpoint`, 1008));
      resolve(new Connection(ws, handler, options.accepts, opts, address, bulk));
    });
  });
}

function zeroMask(mask: Buffer): void {
  mask.fill(0);
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o))
    if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}
