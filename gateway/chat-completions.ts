/**
 * `POST /v1/chat/completions`: the documented response shapes, whole or streamed as
 * `chat.completion.chunk` events (role, content, tool-call deltas, finish reason, optional usage,
 * `[DONE]`), sent as the tokens are generated.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { TopLogprobs } from '../engines/types.ts';
import type { ChatTokenizer } from '../model/tokenizer.ts';
import type { ChatRequest } from './chat-request.ts';
import type { ChoiceStream, StreamSink } from './choice-stream.ts';
import type { CompletionChoice, ToolCallOut } from './choice-stream.ts';
import type { CompletionResult } from './completion.ts';
import { endSse, sendSse, startSse } from './sse.ts';

/** OpenAI's `usage` of a chat completion. */
export function chatUsage(r: CompletionResult) {
  return {
    prompt_tokens: r.promptTokens,
    completion_tokens: r.completionTokens,
    total_tokens: r.promptTokens + r.completionTokens,
  };
}

function toolCallsOf(c: CompletionChoice) {
  return c.toolCalls.map((t) => ({
    id: t.id,
    type: 'function' as const,
    function: { name: t.name, arguments: t.arguments },
  }));
}

/** OpenAI's `logprobs.content`: each token, its logprob, and the alternatives when asked. */
function logprobsOf(
  tok: ChatTokenizer,
  ids: number[],
  logprobs: number[],
  top: TopLogprobs[] | undefined,
) {
  const entry = (id: number, logprob: number) => {
    const token = tok.decode([id], { skipSpecialTokens: false });
    return { token, logprob, bytes: [...Buffer.from(token)] };
  };
  return {
    content: ids.map((id, i) => ({
      ...entry(id, logprobs[i] ?? 0),
      top_logprobs: (top?.[i]?.ids ?? []).map((t, j) => entry(t, top![i]!.logprobs[j]!)),
    })),
    refusal: null,
  };
}

/** A fresh `chat.completion` id. */
export function chatCompletionId(): string {
  return `chatcmpl-${randomBytes(12).toString('hex')}`;
}

/** The whole `chat.completion` object. */
export function chatCompletionBody(
  req: ChatRequest,
  r: CompletionResult,
  tok: ChatTokenizer,
  model: string,
  id = chatCompletionId(),
): Record<string, unknown> {
  return {
    id,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model,
    system_fingerprint: null,
    choices: r.choices.map((c) => ({
      index: c.index,
      message: {
        role: 'assistant',
        content: c.content,
        refusal: null,
        ...(c.toolCalls.length ? { tool_calls: toolCallsOf(c) } : {}),
      },
      logprobs: req.sampling.logprobs ? logprobsOf(tok, c.ids, c.logprobs, c.top) : null,
      finish_reason: c.finishReason,
    })),
    usage: chatUsage(r),
  };
}

/**
 * A `chat.completion.chunk` stream, written as the choices are generated (a {@link StreamSink}):
 * the role chunk of every choice first, then content and tool-call deltas, then {@link end} sends
 * each finish reason, the usage when asked, and `[DONE]`. The response starts at the first chunk,
 * so an error found before any (a bad field, a prompt over the context) is still a plain 4xx.
 */
export class ChatCompletionStream implements StreamSink {
  private readonly base;
  private started = false;

  constructor(
    private readonly res: ServerResponse,
    private readonly req: ChatRequest,
    private readonly tok: ChatTokenizer,
    model: string,
    id = chatCompletionId(),
  ) {
    this.base = {
      id,
      object: 'chat.completion.chunk',
      created: Math.floor(Date.now() / 1000),
      model,
      system_fingerprint: null,
    };
  }

  text(choice: ChoiceStream, delta: string): void {
    this.chunk(choice, { content: delta });
  }

  toolCall(choice: ChoiceStream, k: number, call: ToolCallOut): void {
    this.chunk(choice, {
      tool_calls: [
        { index: k, id: call.id, type: 'function', function: { name: call.name, arguments: '' } },
      ],
    });
    this.chunk(choice, { tool_calls: [{ index: k, function: { arguments: call.arguments } }] });
  }

  done(choice: ChoiceStream, c: CompletionChoice): void {
    this.chunk(choice, {}, { finish_reason: c.finishReason });
  }

  /** Sends the usage when asked, and `[DONE]`. */
  end(r: CompletionResult): void {
    this.start();
    if (this.req.includeUsage)
      sendSse(this.res, { ...this.base, choices: [], usage: chatUsage(r) });
    endSse(this.res);
  }

  /** Ends a started stream with an error event (the client raises it); false when not started. */
  fail(body: unknown): boolean {
    if (!this.started) return false;
    sendSse(this.res, body);
    this.res.end();
    return true;
  }

  private start(): void {
    if (this.started) return;
    this.started = true;
    startSse(this.res);
    for (let index = 0; index < this.req.sampling.n; index++)
      this.send(index, { role: 'assistant', content: '', refusal: null }, {});
  }

  private chunk(choice: ChoiceStream, delta: unknown, extra: Record<string, unknown> = {}): void {
    this.start();
    const lp = this.req.sampling.logprobs ? choice.takeUnreported() : undefined;
    this.send(choice.index, delta, {
      ...(lp?.ids.length ? { logprobs: logprobsOf(this.tok, lp.ids, lp.logprobs, lp.top) } : {}),
      ...extra,
    });
  }

  private send(index: number, delta: unknown, extra: Record<string, unknown>): void {
    if (this.res.destroyed) return;
    sendSse(this.res, {
      ...this.base,
      choices: [{ index, delta, logprobs: null, finish_reason: null, ...extra }],
      ...(this.req.includeUsage ? { usage: null } : {}),
    });
  }
}
