import * as assert from 'uvu/assert';

/** Asserts two number lists are equal within `tol`, with a readable message. */
export function near(actual: ArrayLike<number>, expected: ArrayLike<number>, tol = 1e-5): void {
  const a = Array.from(actual);
  const e = Array.from(expected);
  assert.is(a.length, e.length, `length ${a.length} != ${e.length}: ${JSON.stringify(a)}`);
  for (let i = 0; i < e.length; i++) {
    const ok = Math.abs((a[i] as number) - (e[i] as number)) <= tol;
    assert.ok(ok, `index ${i}: got ${a[i]}, expected ${e[i]} (all: ${JSON.stringify(a)})`);
  }
}

/** Asserts `fn` throws an error with the given `code` whose message contains `text`. */
export function throwsCode(fn: () => unknown, code: string, text?: string): void {
  try {
    fn();
  } catch (e) {
    const err = e as { code?: string; message: string };
    assert.is(err.code, code, `wrong code; message: ${err.message}`);
    if (text) assert.ok(err.message.includes(text), `message "${err.message}" lacks "${text}"`);
    return;
  }
  assert.unreachable(`expected a ${code} error`);
}

/** Async version of {@link throwsCode}. */
export async function rejectsCode(p: Promise<unknown>, code: string): Promise<void> {
  try {
    await p;
  } catch (e) {
    assert.is((e as { code?: string }).code, code, (e as Error).message);
    return;
  }
  assert.unreachable(`expected a ${code} rejection`);
}
