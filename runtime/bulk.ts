/**
 * The bulk link: a second TCP socket beside a WebSocket connection that carries its large
 * messages, so their bytes cross with at most one copy in JavaScript on each side and land in the
 * buffer they are decoded from. ws hands over each frame that spans several socket reads as a
 * fresh copy, and a message in frames needs another copy to join them; here the receiver takes a
 * message's size from its 8-byte header, allocates that buffer once and puts every byte straight
 * into it: the side that opened the link has the kernel read into it (`net`'s `onread`), the side
 * that accepted it copies each socket chunk in.
 *
 * A link is opened by the WebSocket's client side, on the same port and with the same bearer
 * token as the WebSocket (an HTTP upgrade to `rtjob-bulk`), and names its WebSocket by the ticket
 * that the server gave in the WebSocket handshake (`x-rtjob-bulk`). `transport.ts` owns both.
 *
 * Stream: messages back to back, each `'RTB1'`, its length (u32 LE), then that many bytes (an
 * out-of-band value or a packed message). An announced size is checked against the connection's
 * limit and the process's budget before anything is allocated; the kernel commits the buffer's
 * pages only as bytes land in them.
 *
 * @module
 */
import { type Socket, connect as tcpConnect } from 'node:net';
import { splitAddress } from './address.ts';

/** The `Upgrade` token of a bulk link. */
export const bulkProtocol = 'rtjob-bulk';
/** The WebSocket handshake header that carries a connection's bulk ticket. */
export const bulkTicketHeader = 'x-rtjob-bulk';

const MAGIC = 0x31425452; // 'RTB1'
const headerBytes = 8;
/** Longest HTTP answer to an upgrade read before giving up. */
const maxHandshakeBytes = 4096;

let processBytesInFlight = 0;
let processBudgetBytes = 4 * 1024 * 1024 * 1024;

/** Sets the process-wide budget for partly received large messages (default 4 GiB). */
export function setProcessBulkBudget(bytes: number): void {
  processBudgetBytes = bytes;
}

/** Bytes of partly received large messages this process has allocated now. */
export function bulkBytesInFlight(): number {
  return processBytesInFlight;
}

/** The 8 bytes that precede a message of `bytes` bytes on a bulk link. */
export function bulkHeader(bytes: number): Buffer {
  const h = Buffer.allocUnsafe(headerBytes);
  h.writeUInt32LE(MAGIC, 0);
  h.writeUInt32LE(bytes, 4);
  return h;
}

/**
 * Reads messages off a bulk link, each into one buffer of its announced size. Bytes come either
 * as chunks to copy (`feed`) or, where the socket reads into memory the reader names
 * (`nextBuffer` then `advance`), with no copy at all. After an error it swallows what follows.
 */
export class BulkReader {
  private readonly header = Buffer.alloc(headerBytes);
  private headerGot = 0;
  private body: Buffer | undefined;
  private got = 0;
  private failed = false;
  /** Where reads land once the reader failed (the connection is closing). */
  private static readonly sink = Buffer.allocUnsafe(64 * 1024);

  constructor(
    private readonly maxMessageBytes: number,
    private readonly onMessage: (bytes: Buffer) => void,
    private readonly onError: (reason: string) => void,
  ) {}

  /** Whether a message has begun and not ended. */
  get busy(): boolean {
    return this.headerGot > 0;
  }

  /** Where the next bytes belong: the rest of the header, or the rest of the message. */
  nextBuffer(): Buffer {
    if (this.failed) return BulkReader.sink;
    return this.body ? this.body.subarray(this.got) : this.header.subarray(this.headerGot);
  }

  /** Takes `n` bytes that were put at `nextBuffer()`; false once the stream broke a rule. */
  advance(n: number): boolean {
    if (this.failed) return false;
    if (this.body) {
      this.got += n;
      if (this.got === this.body.length) this.deliver();
      return true;
    }
    this.headerGot += n;
    if (this.headerGot === headerBytes) return this.begin();
    return true;
  }

  /** Takes a chunk the socket handed over, copying it into place. */
  feed(chunk: Buffer): boolean {
    let at = 0;
    while (at < chunk.length) {
      const into = this.nextBuffer();
      const n = Math.min(into.length, chunk.length - at);
      chunk.copy(into, 0, at, at + n);
      at += n;
      if (!this.advance(n)) return false;
    }
    return true;
  }

  /** Gives back the budget of a partly received message (the link closed). */
  clear(): void {
    if (this.body) processBytesInFlight -= this.body.length;
    this.body = undefined;
    this.headerGot = 0;
    this.got = 0;
  }

  private begin(): boolean {
    const bytes = this.header.readUInt32LE(4);
    if (this.header.readUInt32LE(0) !== MAGIC) return this.fail('bad bulk message header');
    if (bytes === 0) return this.fail('empty bulk message');
    if (bytes > this.maxMessageBytes) {
      return this.fail(`bulk message of ${bytes} bytes over the limit of ${this.maxMessageBytes}`);
    }
    if (processBytesInFlight + bytes > processBudgetBytes) {
      return this.fail(`bulk message of ${bytes} bytes over this process's budget`);
    }
    try {
      this.body = Buffer.allocUnsafeSlow(bytes);
    } catch {
      return this.fail(`cannot allocate a bulk message of ${bytes} bytes`);
    }
    processBytesInFlight += bytes;
    this.got = 0;
    return true;
  }

  private deliver(): void {
    const body = this.body!;
    this.clear();
    this.onMessage(body);
  }

  private fail(reason: string): false {
    this.clear();
    this.failed = true;
    this.onError(reason);
    return false;
  }
}

/**
 * Opens the bulk link of the WebSocket connection to `address` whose ticket is `ticket`. The
 * socket reads straight into the memory `reader` names; resolves once the server switched
 * protocols (bytes it sent right after go to `reader` too).
 */
export function openBulkLink(
  address: string,
  token: string,
  ticket: string,
  reader: BulkReader,
  timeoutMs: number,
): Promise<Socket> {
  const [host, port] = splitAddress(address);
  const answer = Buffer.alloc(maxHandshakeBytes);
  let answerGot = 0;
  let open = false;
  return new Promise((resolve, reject) => {
    let sock: Socket | undefined = undefined;
    const fail = (why: string) => {
      clearTimeout(timer);
      sock?.destroy();
      reject(new Error(why));
    };
    const timer = setTimeout(() => fail(`no answer from ${address}`), timeoutMs);
    // Until the switch, reads go to `answer`; the end of its headers may carry the first bytes.
    const onHandshake = (n: number): void => {
      answerGot += n;
      const end = answer.subarray(0, answerGot).indexOf('\r\n\r\n');
      if (end < 0) {
        if (answerGot === maxHandshakeBytes) fail(`${address} answered the upgrade wrongly`);
        return;
      }
      const status = answer.subarray(0, answer.indexOf('\r\n')).toString('latin1');
      if (!/^HTTP\/1\.1 101 /.test(status)) return fail(`${address} refused the link: ${status}`);
      open = true;
      clearTimeout(timer);
      sock!.removeAllListeners('error');
      sock!.removeAllListeners('close');
      reader.feed(answer.subarray(end + 4, answerGot));
      resolve(sock!);
    };
    sock = tcpConnect({
      host,
      port,
      noDelay: true,
      onread: {
        buffer: () => (open ? reader.nextBuffer() : answer.subarray(answerGot)),
        callback: (n: number) => {
          if (open) reader.advance(n);
          else onHandshake(n);
          return true;
        },
      },
    });
    sock.once('error', (e) => fail(`cannot connect to ${address}: ${e.message}`));
    sock.once('close', () => fail(`${address} closed the link during its upgrade`));
    sock.once('connect', () =>
      sock!.write(
        `GET / HTTP/1.1\r\nHost: ${address}\r\n` +
          `Connection: Upgrade\r\nUpgrade: ${bulkProtocol}\r\n` +
          `Authorization: Bearer ${token}\r\n${bulkTicketHeader}: ${ticket}\r\n\r\n`,
      ),
    );
  });
}
