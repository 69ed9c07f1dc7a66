/**
 * Streaming one choice as it is generated: the engine's tokens are decoded incrementally and the
 * text given to the tool-call parser, and whatever no later token can change is sent — content
 * deltas, and each tool call once its block has closed. Held back meanwhile: a possible stop
 * string (it is cut from the answer), trailing whitespace (trimmed when calls follow), a trailing
 * special token (the end token is not content) and an opening tool-call marker still being
 * generated. At the end the whole answer is parsed as without streaming and the rest sent, so the
 * streamed message is the non-streamed one (except that leading whitespace before a tool call is
 * sent, where the whole answer trims it).
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import type { TopLogprobs } from '../engines/types.ts';
import type { ChatTokenizer } from '../model/tokenizer.ts';
import { firstCallEnd } from './tool-choice.ts';
import type { ToolCallParser } from './tool-parsers.ts';

/** A tool call as answered to the client. */
export interface ToolCallOut {
  id: string;
  name: string;
  arguments: string;
}

/** One generated choice. */
export interface CompletionChoice {
  index: number;
  ids: number[];
  logprobs: number[];
  /** The policy version that generated each token. */
  versions: number[];
  /** With `top_logprobs`: the most likely tokens at each position. */
  top: TopLogprobs[] | undefined;
  content: string | null;
  toolCalls: ToolCallOut[];
  finishReason: 'stop' | 'length' | 'tool_calls';
  /** The request's stop string that ended the answer (cut from it), if one did. */
  stopSequence: string | null;
}

/** Where streamed choices go (chat-completion chunks or Responses events). */
export interface StreamSink {
  /** More content of `choice`. */
  text(choice: ChoiceStream, delta: string): void;
  /** The `k`-th tool call of `choice`, complete. */
  toolCall(choice: ChoiceStream, k: number, call: ToolCallOut): void;
  /** `choice` is complete: everything of `c` has been sent. */
  done(choice: ChoiceStream, c: CompletionChoice): void;
}

/** A fresh tool-call id in OpenAI's form. */
export function toolCallId(): string {
  return `call_${randomBytes(12).toString('hex')}`;
}

/** The incremental state of one streamed choice. */
export class ChoiceStream {
  private readonly ids: number[] = [];
  private readonly logprobs: number[] = [];
  private readonly top: TopLogprobs[] = [];
  private text = '';
  /** Tokens decoded into `text` so far. */
  private decoded = 0;
  private sentContent = '';
  private readonly sentCalls: ToolCallOut[] = [];
  /** Tokens whose logprobs no chunk has carried yet start here. */
  private reported = 0;
  /** With one call per turn: the first call is complete and later tokens are dropped. */
  private cut = false;

  constructor(
    readonly index: number,
    private readonly tokenizer: ChatTokenizer,
    private readonly parser: ToolCallParser | undefined,
    private readonly sink: StreamSink,
    private readonly maxStopChars: number,
    /** Text the answer starts with that the prompt supplied (a forced call's opening). */
    private readonly opening = '',
    /** `parallel_tool_calls: false`: nothing after the first call is sent. */
    private readonly oneCall = false,
  ) {
    this.text = opening;
  }

  /** Takes new tokens and sends what they settle. */
  push(tokens: number[], logprobs: number[], top?: TopLogprobs[]): void {
    if (this.cut) return;
    this.ids.push(...tokens);
    this.logprobs.push(...logprobs);
    if (top) this.top.push(...top);
    // The last token may be the end token, which is not content: decode it when another follows.
    const last = this.ids[this.ids.length - 1]!;
    const upTo = this.isSpecial(last) ? this.ids.length - 1 : this.ids.length;
    this.decodeTo(upTo);
    if (this.oneCall && this.parser?.pieces(this.text).some((p) => 'call' in p))
      this.cutAfterCall();
    const settled = Math.min(
      this.parser ? this.parser.settled(this.text) : this.text.length,
      this.text.length - this.maxStopChars,
    );
    if (settled > 0) this.send(this.text.slice(0, settled));
  }

  /**
   * Ends the stream with the whole choice (parsed as without streaming): sends what is left, and
   * gives the choice the ids of the calls already sent.
   */
  finish(choice: CompletionChoice): void {
    choice.toolCalls.forEach((c, k) => {
      const sent = this.sentCalls[k];
      if (sent) c.id = sent.id;
      else this.sink.toolCall(this, k, c);
    });
    const content = choice.content ?? '';
    if (content.startsWith(this.sentContent) && content.length > this.sentContent.length)
      this.sink.text(this, content.slice(this.sentContent.length));
    this.sink.done(this, choice);
  }

  /** Ids and logprobs of the tokens no chunk has carried yet (chat `logprobs` per chunk). */
  takeUnreported(): { ids: number[]; logprobs: number[]; top: TopLogprobs[] } {
    const from = this.reported;
    this.reported = this.ids.length;
    return {
      ids: this.ids.slice(from),
      logprobs: this.logprobs.slice(from),
      top: this.top.slice(from),
    };
  }

  /**
   * Drops the tokens past the first call, as the whole answer is cut (`firstCallOnly`), so no
   * chunk sends their text or logprobs.
   */
  private cutAfterCall(): void {
    const k = firstCallEnd(this.tokenizer, this.parser!, this.opening, this.ids) ?? this.ids.length;
    this.cut = true;
    this.ids.length = Math.min(this.ids.length, k);
    this.logprobs.length = Math.min(this.logprobs.length, k);
    this.top.length = Math.min(this.top.length, k);
    this.reported = Math.min(this.reported, k);
    this.text = this.opening + this.tokenizer.decode(this.ids, { skipSpecialTokens: false });
    this.decoded = this.ids.length;
  }

  private isSpecial(id: number): boolean {
    return this.tokenizer.decode([id], { skipSpecialTokens: true }) === '';
  }

  /**
   * Appends the text of tokens [decoded, upTo). Decoding a few tokens of context before and
   * taking the difference keeps tokenizers that strip a leading space right; an incomplete UTF-8
   * character waits for its next token.
   */
  private decodeTo(upTo: number): void {
    if (upTo <= this.decoded) return;
    const from = Math.max(0, this.decoded - 4);
    const opts = { skipSpecialTokens: false };
    const before = this.tokenizer.decode(this.ids.slice(from, this.decoded), opts);
    const all = this.tokenizer.decode(this.ids.slice(from, upTo), opts);
    if (all.endsWith('\uFFFD') || !all.startsWith(before)) return;
    this.text += all.slice(before.length);
    this.decoded = upTo;
  }

  private send(settledText: string): void {
    const pieces = this.parser ? this.parser.pieces(settledText) : [{ text: settledText }];
    let content = '';
    let k = 0;
    for (const p of pieces) {
      if ('text' in p) {
        content += p.text;
        continue;
      }
      if (k === this.sentCalls.length) {
        const call = { id: toolCallId(), ...p.call };
        this.sentCalls.push(call);
        this.sink.toolCall(this, k, call);
      }
      k++;
    }
    // Trailing whitespace waits: the whole answer trims it when a call follows.
    content = content.trimEnd();
    if (content.length > this.sentContent.length && content.startsWith(this.sentContent)) {
      this.sink.text(this, content.slice(this.sentContent.length));
      this.sentContent = content;
    }
  }
}
