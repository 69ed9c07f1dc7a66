import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { grep, sourceFiles } from './source-files.ts';

// Concepts that exist once: the cluster file has one reader and writer, a process-exists check
// has one implementation.

test('~/.rtjob/cluster.json is read and written only by runtime/cluster-file.ts', () => {
  const files = sourceFiles({ withFixtures: false }).filter(
    (f) => f.path !== 'runtime/cluster-file.ts' && !f.path.startsWith('test/'),
  );
  const hits = grep(files, /['"]cluster\.json['"]/);
  assert.equal(hits, [], `use runtime/cluster-file.ts:\n${hits.join('\n')}`);
});

test('one pidAlive: process.kill(pid, 0) only in runtime/pid.ts', () => {
  const files = sourceFiles().filter(
    (f) => f.path !== 'runtime/pid.ts' && !f.path.startsWith('test/conventions/'),
  );
  const hits = grep(files, /process\.kill\(\s*[\w.!]+\s*,\s*0\s*\)/);
  assert.equal(hits, [], `use pidAlive from runtime/pid.ts:\n${hits.join('\n')}`);
});

test.run();
