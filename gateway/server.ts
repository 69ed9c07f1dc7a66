/**
 * The agent gateway: an OpenAI- and Anthropic-compatible HTTP endpoint (`/v1/chat/completions`,
 * `/v1/responses`, `/v1/messages`, `/v1/models`) in front of the run's inference engine. Each agent episode gets
 * its own random key, valid only while the episode runs; the key selects the episode's token
 * session, so one episode can never read or extend another's. Bound to loopback by default.
 *
 * @module
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ChatTokenizer } from '../model/tokenizer.ts';
import type { AgentTrace } from '../runtime/agent-trace.ts';
import { ChatCompletionStream, chatCompletionBody, chatCompletionId } from './chat-completions.ts';
import { parseChatRequest } from './chat-request.ts';
import {
  complete,
  renderPrompt,
  type CompletionContext,
  type CompletionResult,
  type GatewayEngine,
} from './completion.ts';
import { EpisodeTrace, traceLimits } from './episode-trace.ts';
import { GatewayError } from './errors.ts';
import { MessagesStream, messageId, parseMessagesRequest, sendMessage } from './messages.ts';
import { spansFromAgentsSdk } from './agents-sdk-traces.ts';
import { protobufResponse, spansFromJson, spansFromProtobuf } from './otlp.ts';
import { ResponseStore } from './response-store.ts';
import { handleResponses } from './responses.ts';
import { sendJson } from './sse.ts';
import { TokenSession } from './token-session.ts';
import { parseTraceparent, type TraceParent } from './trace-context.ts';
import { forcedOpening } from './tool-choice.ts';
import { toolCallParser } from './tool-parsers.ts';
import * as v from './validate.ts';

/** How a gateway is built. */
export interface GatewayOptions {
  engine: GatewayEngine;
  tokenizer: ChatTokenizer;
  /** The model name clients pass (`/v1/models` lists it). */
  model: string;
  /** Prompt + completion cap in tokens. */
  contextLength: number;
  /** Completion cap and default `max_tokens`. @default contextLength */
  maxNewTokens?: number;
  /** @default 'hermes' */
  toolCallParser?: string;
  /** Sampling that overrides the client's (training: the run's settings). */
  fixedSampling?: { temperature: number; topP: number };
  /**
   * Bridge mode: a turn whose re-rendered prompt no longer extends its trajectory continues it
   * where provably safe (`bridge.ts`); off, it starts a new trajectory. @default true
   */
  bridge?: boolean;
  /** Compare every turn's rendered prompt with the recorded tokens and keep drift reports. @default false */
  checkDrift?: boolean;
  /** @default '127.0.0.1' */
  host?: string;
  /** @default 0 (a free port) */
  port?: number;
  /** Request bodies above this are refused with 413. @default 16 MiB */
  maxBodyBytes?: number;
}

/** A key and what it opens: a recording session (agent episodes) or none (`rtjob serve`). */
interface KeyEntry {
  session: TokenSession | undefined;
  /** The episode's spans and model calls (agent episodes only). */
  trace?: EpisodeTrace;
  /** Responses stored with this key (`previous_response_id` finds only these). */
  responses: ResponseStore;
  /** This key's completions are generated with these settings (evaluation: greedy). */
  ctx?: CompletionContext;
}

/** An open session handed to one agent episode. */
export interface GatewaySession {
  apiKey: string;
  session: TokenSession;
  /** The spans its agent exported (`POST /v1/traces`) and its model calls. */
  trace: EpisodeTrace;
  /** The two joined, as a kept sample carries them; undefined when the agent sent no trace. */
  agentTrace(): AgentTrace | undefined;
  /** Revokes the key; requests in flight finish but record nothing more. */
  close(): void;
}

/** Anthropic's token counting route. */
const countTokens = '/v1/messages/count_tokens';

/** How many recent requests {@link Gateway.overheadMs} keeps. */
const overheadWindow = 4096;

/** The OpenAI-compatible endpoint; start it with {@link Gateway.start}. */
export class Gateway {
  private readonly keys = new Map<string, KeyEntry>();
  /** A server of fixed keys (`rtjob serve`) rather than of agent episodes: errors say so. */
  private serving = false;
  private readonly overhead: number[] = [];

  private readonly ctx: CompletionContext;
  private readonly maxBodyBytes: number;
  private constructor(
    private readonly server: Server,
    private readonly o: GatewayOptions,
  ) {
    this.ctx = {
      engine: o.engine,
      tokenizer: o.tokenizer,
      parser: toolCallParser(o.toolCallParser ?? 'hermes'),
      contextLength: o.contextLength,
      maxNewTokens: o.maxNewTokens ?? o.contextLength,
      bridge: o.bridge ?? true,
      ...(o.fixedSampling ? { fixedSampling: o.fixedSampling } : {}),
    };
    this.maxBodyBytes = o.maxBodyBytes ?? 16 << 20;
  }

  /** Starts listening (loopback, a free port unless told otherwise). */
  static async start(o: GatewayOptions): Promise<Gateway> {
    const server = createServer();
    const g = new Gateway(server, o);
    server.on('request', (req, res) => void g.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(o.port ?? 0, o.host ?? '127.0.0.1', () => resolve());
    });
    return g;
  }

  /** `http://host:port/v1`, what agents pass as `baseURL`. */
  get baseURL(): string {
    const a = this.server.address() as AddressInfo;
    const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
    return `http://${host}:${a.port}/v1`;
  }

  get model(): string {
    return this.o.model;
  }

  /** Sessions open now. */
  get openSessions(): number {
    let n = 0;
    for (const e of this.keys.values()) if (e.session) n++;
    return n;
  }

  /**
   * Milliseconds each recent completion spent in the gateway itself: from the request's first
   * byte to the response's last, less the time waiting for the engine (bench/gateway.ts).
   */
  get overheadMs(): readonly number[] {
    return this.overhead;
  }

  /**
   * Opens a recording session with a fresh key for one episode; `fixedSampling` overrides the
   * gateway's for this session (evaluation episodes decode greedily: `{ temperature: 0, topP: 1 }`).
   */
  openSession(o: { fixedSampling?: { temperature: number; topP: number } } = {}): GatewaySession {
    const apiKey = `rtj-${randomBytes(24).toString('base64url')}`;
    const session = new TokenSession(
      this.o.checkDrift
        ? (ids) => this.o.tokenizer.decode(ids, { skipSpecialTokens: false })
        : undefined,
    );
    const h = hashKey(apiKey);
    const trace = new EpisodeTrace();
    this.keys.set(h, {
      session,
      trace,
      responses: new ResponseStore(),
      ...(o.fixedSampling ? { ctx: { ...this.ctx, fixedSampling: o.fixedSampling } } : {}),
    });
    return {
      apiKey,
      session,
      trace,
      agentTrace: () =>
        trace.build((id) => this.o.tokenizer.decode([id], { skipSpecialTokens: false })),
      close: () => {
        session.close();
        this.keys.delete(h);
      },
    };
  }

  /** Accepts `apiKey` for requests that record nothing (`rtjob serve`). */
  addStaticKey(apiKey: string): void {
    this.serving = true;
    this.keys.set(hashKey(apiKey), { session: undefined, responses: new ResponseStore() });
  }

  /** Stops listening and drops every key. */
  async close(): Promise<void> {
    this.keys.clear();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const t0 = performance.now();
    let engineMs: number | undefined;
    // Aborted when the client goes away before the answer is complete (a timeout, an abort).
    const gone = new AbortController();
    res.once('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    // Stainless SDKs (openai, @anthropic-ai/sdk) number their attempts; > 0 is a retry.
    const retry = Number(req.headers['x-stainless-retry-count'] ?? 0) > 0;
    let stream: ChatCompletionStream | undefined;
    let messagesStream: MessagesStream | undefined;
    let anthropic = false;
    res.once('finish', () => {
      if (engineMs === undefined) return;
      if (this.overhead.push(performance.now() - t0 - engineMs) > overheadWindow)
        this.overhead.shift();
    });
    try {
      let path = (req.url ?? '/').split('?')[0]!.replace(/\/+$/, '');
      // `new Anthropic({ baseURL })` with the agent's `…/v1` base asks for `/v1/v1/messages`.
      path = path.replace(/^\/v1\/v1\/messages/, '/v1/messages');
      // An OTLP exporter given the agent's base URL (`…/v1`) as its endpoint appends `/v1/traces`.
      path = path.replace(/^\/v1\/v1\/traces$/, '/v1/traces');
      anthropic = path.startsWith('/v1/messages');
      const entry = this.authorize(req);
      if (path === '/v1/traces' || path === '/v1/traces/ingest') {
        if (req.method !== 'POST') throw methodNotAllowed(req.method);
        return await this.traces(req, res, entry, path === '/v1/traces/ingest');
      }
      const trace = parseTraceparent(req.headers.traceparent);
      if (trace) entry.session?.noteTrace(trace.traceId);
      const startMs = performance.timeOrigin + t0;
      const note = (id: string, r: CompletionResult): void =>
        this.noteCall(entry, trace, id, r, startMs);
      if (path === '/v1/models' || path.startsWith('/v1/models/')) {
        if (req.method !== 'GET') throw methodNotAllowed(req.method);
        return this.models(res, path);
      }
      const routes = ['/v1/chat/completions', '/v1/responses', '/v1/messages', countTokens];
      if (!routes.includes(path)) {
        throw new GatewayError(404, 'not_found', `no route ${req.method} ${path}`);
      }
      if (req.method !== 'POST') throw methodNotAllowed(req.method);
      const body = await this.readJson(req);
      this.checkModel(body);
      const ctx = entry.ctx ?? this.ctx;
      if (path === '/v1/responses') {
        const r = await handleResponses(
          res,
          body,
          ctx,
          this.o.model,
          entry.session,
          gone.signal,
          entry.responses,
          retry,
        );
        engineMs = r.engineMs;
        if (r.responseId !== undefined) note(r.responseId, r);
        return;
      }
      if (path === countTokens) {
        const { req: r } = parseMessagesRequest(body, true);
        const opening = forcedOpening(this.o.tokenizer, ctx.parser, r.tools, r.toolChoice);
        const ids = renderPrompt(this.o.tokenizer, r, opening);
        return sendJson(res, 200, { input_tokens: ids.length });
      }
      if (anthropic) {
        const m = parseMessagesRequest(body);
        const id = messageId();
        if (m.stream) messagesStream = new MessagesStream(res, this.o.model, id);
        const result = await complete(ctx, m.req, entry.session, gone.signal, messagesStream, {
          retry,
        });
        engineMs = result.engineMs;
        note(id, result);
        if (messagesStream) return messagesStream.end(result);
        return sendMessage(res, this.o.model, result, id);
      }
      const chat = parseChatRequest(body);
      const id = chatCompletionId();
      if (chat.stream)
        stream = new ChatCompletionStream(res, chat, this.o.tokenizer, this.o.model, id);
      const result = await complete(ctx, chat, entry.session, gone.signal, stream, { retry });
      engineMs = result.engineMs;
      note(id, result);
      if (stream) return stream.end(result);
      sendJson(res, 200, chatCompletionBody(chat, result, this.o.tokenizer, this.o.model, id));
    } catch (err) {
      const e =
        err instanceof GatewayError
          ? err
          : new GatewayError(500, 'engine_error', err instanceof Error ? err.message : String(err));
      // A stream already under way ends with an error event, which the client raises.
      if (stream?.fail(e.toBody()) || messagesStream?.fail(e)) return;
      if (res.headersSent) res.end();
      else sendJson(res, e.status, anthropic ? e.toAnthropicBody() : e.toBody());
    }
  }

  /** Keeps a model call of an agent episode for its trace (`episode-trace.ts`). */
  private noteCall(
    entry: KeyEntry,
    trace: TraceParent | undefined,
    responseId: string,
    r: CompletionResult,
    startMs: number,
  ): void {
    entry.trace?.addCall({
      responseId,
      ...(trace ? { traceId: trace.traceId, parentSpanId: trace.parentId } : {}),
      startMs,
      endMs: performance.timeOrigin + performance.now(),
      promptTokens: r.promptTokens,
      completions: r.choices.map((c) => ({
        ids: c.ids,
        logprobs: c.logprobs,
        versions: c.versions,
      })),
    });
  }

  /**
   * `POST /v1/traces`: an OTLP/HTTP trace export (JSON or protobuf) from an episode's agent, kept
   * with the episode's model calls. Spans over the episode's limit are refused in the answer's
   * `partialSuccess`, as OTLP specifies; a key that opens no episode (`rtjob serve`) keeps nothing.
   * `POST /v1/traces/ingest` takes the OpenAI Agents SDK exporter's JSON the same way
   * (`agents-sdk-traces.ts`).
   */
  private async traces(
    req: IncomingMessage,
    res: ServerResponse,
    entry: KeyEntry,
    agentsSdk: boolean,
  ): Promise<void> {
    const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    const protobuf =
      !agentsSdk && (type === 'application/x-protobuf' || type === 'application/protobuf');
    if (!protobuf && type !== 'application/json') {
      throw new GatewayError(
        415,
        'unsupported_media_type',
        agentsSdk
          ? `Agents SDK traces come as application/json, not '${type}'`
          : `OTLP traces come as application/json or application/x-protobuf, not '${type}'`,
      );
    }
    const raw = await this.readBody(req, traceLimits.maxBodyBytes);
    let spans;
    if (protobuf) spans = spansFromProtobuf(raw);
    else if (agentsSdk) spans = spansFromAgentsSdk(parseJson(raw));
    else spans = spansFromJson(parseJson(raw));
    const partial = entry.trace
      ? entry.trace.addSpans(spans)
      : { rejectedSpans: spans.length, errorMessage: 'this key opens no agent episode' };
    if (protobuf) {
      res.writeHead(200, { 'content-type': 'application/x-protobuf' });
      res.end(protobufResponse(partial));
      return;
    }
    sendJson(res, 200, partial ? { partialSuccess: partial } : {});
  }

  /** The key of `Authorization: Bearer` (OpenAI) or `x-api-key` (Anthropic). */
  private authorize(req: IncomingMessage): KeyEntry {
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '')?.[1];
    const header = req.headers['x-api-key'];
    const key = bearer ?? (typeof header === 'string' && header !== '' ? header : undefined);
    if (key === undefined) {
      throw new GatewayError(
        401,
        'invalid_api_key',
        'You did not provide an API key: send Authorization: Bearer <key> or x-api-key: <key>.',
      );
    }
    const entry = this.keys.get(hashKey(key));
    if (!entry) {
      throw new GatewayError(
        401,
        'invalid_api_key',
        this.serving
          ? 'Incorrect API key provided: use the key the server printed when it started (--api-key or RTJOB_SERVE_API_KEY sets one).'
          : "Incorrect API key provided: an agent's key is env.apiKey, valid only while its episode runs (build the client from env.baseURL and env.apiKey, not from OPENAI_API_KEY).",
      );
    }
    return entry;
  }

  private models(res: ServerResponse, path: string): void {
    const card = { id: this.o.model, object: 'model', created: 0, owned_by: 'rtjob' };
    if (path === '/v1/models') return sendJson(res, 200, { object: 'list', data: [card] });
    const id = decodeURIComponent(path.slice('/v1/models/'.length));
    if (id !== this.o.model) throw this.unknownModel(id);
    sendJson(res, 200, card);
  }

  private checkModel(body: unknown): void {
    const model = v.string(v.object(body, 'body')['model'], 'model');
    if (model !== this.o.model) throw this.unknownModel(model);
  }

  private unknownModel(id: string): GatewayError {
    return new GatewayError(
      404,
      'model_not_found',
      `The model '${id}' does not exist; this gateway serves one model, '${this.o.model}'` +
        (this.serving ? ' (see GET /v1/models).' : ': pass env.model as the model.'),
      'model',
    );
  }

  private async readJson(req: IncomingMessage): Promise<unknown> {
    return parseJson(await this.readBody(req, this.maxBodyBytes));
  }

  private async readBody(req: IncomingMessage, max: number): Promise<Buffer> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of req) {
      size += (c as Buffer).length;
      if (size > max) {
        throw new GatewayError(413, 'request_too_large', `request body over ${max} bytes`);
      }
      chunks.push(c as Buffer);
    }
    return Buffer.concat(chunks);
  }
}

function parseJson(raw: Buffer): unknown {
  try {
    return JSON.parse(raw.toString('utf8'));
  } catch (err) {
    throw new GatewayError(
      400,
      'invalid_json',
      `body is not valid JSON: ${(err as Error).message}`,
      'body',
    );
  }
}

// Keys are kept hashed: a lookup never compares secrets character by character.
function hashKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

function methodNotAllowed(method: string | undefined): GatewayError {
  return new GatewayError(405, 'method_not_allowed', `method ${method ?? '?'} not allowed here`);
}
