/**
 * A dataset directory's splits by the Hub's conventions: sharded `data/{split}-NNNNN-of-NNNNN`
 * files, `{split}.jsonl`, split folders, config folders (`gsm8k@main`), files with no split name;
 * and the one-line errors of a missing split or an unchosen config, which name what exists.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { datasetFiles, parseSpec, splitFiles } from '../../train/data/layout.ts';
import { isRtjobError } from '../../runtime/errors.ts';
import { writeGsm8kDir } from '../fixtures/data/datasets.ts';

const root = mkdtempSync(join(tmpdir(), 'rtjob-data-layout-'));

/** A directory holding `files` (empty data files: the layout reads names only). */
function tree(name: string, files: string[]): string {
  const dir = join(root, name);
  for (const f of files) {
    mkdirSync(join(dir, f, '..'), { recursive: true });
    writeFileSync(join(dir, f), '');
  }
  return dir;
}

const rel = (dir: string, files: string[]): string[] => files.map((f) => relative(dir, f));

function throwsCode(fn: () => unknown, code: string, re: RegExp): void {
  try {
    fn();
  } catch (err) {
    assert.ok(isRtjobError(err, code), `expected ${code}, got ${String(err)}`);
    assert.match((err as Error).message, re);
    assert.not.match((err as Error).message, /\n/);
    return;
  }
  assert.unreachable(`expected ${code}`);
}

test('sharded data/{split}-NNNNN-of-NNNNN.parquet files, in shard order, any split name', () => {
  const dir = tree('sharded', [
    'README.md',
    '.gitattributes',
    'data/train-00001-of-00002.parquet',
    'data/train-00000-of-00002.parquet',
    'data/test-00000-of-00001.parquet',
    'data/train_prefs-00000-of-00001.parquet',
  ]);
  assert.equal(rel(dir, splitFiles(dir, 'train')), [
    'data/train-00000-of-00002.parquet',
    'data/train-00001-of-00002.parquet',
  ]);
  assert.equal(rel(dir, splitFiles(dir, 'train_prefs')), [
    'data/train_prefs-00000-of-00001.parquet',
  ]);
});

test('{split}.jsonl, split keywords in names, split folders', () => {
  const flat = tree('flat', ['train.jsonl', 'my_validation_file.csv', 'eval.json']);
  assert.equal(rel(flat, splitFiles(flat, 'train')), ['train.jsonl']);
  assert.equal(rel(flat, splitFiles(flat, 'validation')), ['my_validation_file.csv']);
  assert.equal(rel(flat, splitFiles(flat, 'test')), ['eval.json'], 'eval is a test keyword');
  const folders = tree('folders', [
    'data/train/0000.parquet',
    'data/train/0001.parquet',
    'data/test/0000.parquet',
  ]);
  assert.equal(rel(folders, splitFiles(folders, 'train')), [
    'data/train/0000.parquet',
    'data/train/0001.parquet',
  ]);
  const contest = tree('contest', ['contest.jsonl']);
  assert.equal(
    rel(contest, splitFiles(contest, 'train')),
    ['contest.jsonl'],
    "'contest' is no test split",
  );
});

test('files with no split name are all the train split', () => {
  const dir = tree('unnamed', ['a.parquet', 'b.parquet']);
  assert.equal(rel(dir, splitFiles(dir, 'train')), ['a.parquet', 'b.parquet']);
  throwsCode(
    () => splitFiles(dir, 'test'),
    'DATASET_SPLIT',
    /unnamed has no split 'test' \(splits: train\)$/,
  );
});

test('openai/gsm8k: config folders, chosen by DIR@config, or the only one', () => {
  const one = writeGsm8kDir(join(root, 'gsm8k'));
  assert.equal(rel(one, datasetFiles(one, { split: 'test' })), [
    'main/test-00000-of-00001.parquet',
  ]);
  assert.equal(rel(one, datasetFiles(`${one}@main`)), ['main/train-00000-of-00001.parquet']);
  const two = writeGsm8kDir(join(root, 'gsm8k-two'), { configs: ['main', 'socratic'] });
  assert.equal(rel(two, datasetFiles(`${two}@socratic`)), [
    'socratic/train-00000-of-00001.parquet',
  ]);
  throwsCode(
    () => datasetFiles(two),
    'DATASET_CONFIG',
    /gsm8k-two has configs main, socratic: choose one as \S+gsm8k-two@main$/,
  );
  throwsCode(
    () => datasetFiles(`${two}@nope`),
    'DATASET_CONFIG',
    /gsm8k-two has no config 'nope' \(configs: main, socratic\)$/,
  );
});

test('a missing split names the splits there are', () => {
  const dir = writeGsm8kDir(join(root, 'gsm8k-split'));
  throwsCode(
    () => datasetFiles(dir, { split: 'validation' }),
    'DATASET_SPLIT',
    /gsm8k-split has no split 'validation' \(splits: test, train\)$/,
  );
});

test('a directory with no data files says so', () => {
  const dir = tree('empty', ['README.md']);
  throwsCode(
    () => splitFiles(dir, 'train'),
    'DATASET_NOT_FOUND',
    /empty has no data files \(parquet, jsonl, json, csv\)$/,
  );
});

test("a Hub snapshot's symlinked files are followed", () => {
  const blobs = tree('blobs', ['abc123']);
  const snap = join(root, 'snapshots', 'c0ffee', 'data');
  mkdirSync(snap, { recursive: true });
  symlinkSync(join(blobs, 'abc123'), join(snap, 'train-00000-of-00001.parquet'));
  assert.equal(splitFiles(join(root, 'snapshots', 'c0ffee'), 'train'), [
    join(snap, 'train-00000-of-00001.parquet'),
  ]);
});

test("specs: DIR@config, OpenRLHF's json@DIR, and a path that holds an @ itself", () => {
  assert.equal(parseSpec('data/gsm8k@main'), { path: 'data/gsm8k', config: 'main' });
  assert.equal(parseSpec('json@data/prompts'), { path: 'data/prompts' });
  const at = tree('with@sign', ['train.jsonl']);
  assert.equal(parseSpec(at), { path: at });
});

test.after(() => rmSync(root, { recursive: true, force: true }));
test.run();
