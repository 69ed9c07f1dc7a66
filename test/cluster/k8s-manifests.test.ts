// examples/k8s: every object validates against the Kubernetes API schemas (kubernetes-models,
// YAML read as kubectl reads it), the rtjob flags in the containers are ones the CLI knows, and
// the token reaches every pod as a Secret file named by --token-file, never in args or env.
// A broken manifest fails each check.
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { StatefulSet } from 'kubernetes-models/apps/v1/StatefulSet';
import { Job } from 'kubernetes-models/batch/v1/Job';
import { Service } from 'kubernetes-models/v1/Service';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { parseAllDocuments } from 'yaml';

import { binPath } from '../cli/helpers.ts';

const dir = fileURLToPath(new URL('../../examples/k8s/', import.meta.url));

/** A manifest object, as parsed. */
type Obj = Record<string, unknown> & { apiVersion: string; kind: string };

interface PodSpec {
  containers: {
    name: string;
    command?: string[];
    args?: string[];
    env?: { name: string; value?: string }[];
    volumeMounts?: { name: string; mountPath: string }[];
  }[];
  volumes?: { name: string; secret?: { secretName: string; defaultMode?: number } }[];
}

const models: Record<string, new (data: never) => { validate(): void }> = {
  'apps/v1 Deployment': Deployment,
  'apps/v1 StatefulSet': StatefulSet,
  'batch/v1 Job': Job,
  'v1 Service': Service,
};

/** The objects of every manifest, by file; YAML 1.1 as kubectl reads it (0440 is octal). */
function manifests(): { file: string; obj: Obj }[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .flatMap((file) =>
      parseAllDocuments(readFileSync(join(dir, file), 'utf8'), { version: '1.1' }).map((doc) => {
        if (doc.errors.length) throw new Error(`${file}: ${doc.errors[0]!.message}`);
        return { file, obj: doc.toJS() as Obj };
      }),
    );
}

/** Throws naming the object when it does not validate against its kind's schema. */
function validate(obj: Obj): void {
  const Model = models[`${obj.apiVersion} ${obj.kind}`];
  if (!Model) throw new Error(`no schema here for ${obj.apiVersion} ${obj.kind}`);
  new Model(obj as never).validate();
}

function podSpec(obj: Obj): PodSpec | undefined {
  const spec = obj.spec as { template?: { spec: PodSpec } } | undefined;
  return spec?.template?.spec;
}

/**
 * What breaks the token rule in a pod: the token in args or env, or a --token-file that is not
 * a mounted Secret file no other user may read. Empty when the pod keeps it.
 */
function tokenProblems(pod: PodSpec): string[] {
  const out: string[] = [];
  for (const c of pod.containers) {
    for (const a of c.args ?? [])
      if (/^--token(=|$)/.test(a)) out.push(`${c.name}: the token on the command line (${a})`);
    for (const e of c.env ?? [])
      if (/TOKEN/.test(e.name)) out.push(`${c.name}: the token in env ${e.name}`);
    const file = (c.args ?? []).find((a) => a.startsWith('--token-file='))?.split('=')[1];
    if (!file) {
      out.push(`${c.name}: no --token-file`);
      continue;
    }
    const mount = c.volumeMounts?.find((m) => file.startsWith(`${m.mountPath}/`));
    const secret = pod.volumes?.find((v) => v.name === mount?.name)?.secret;
    if (!secret) out.push(`${c.name}: ${file} is not in a mounted Secret`);
    else if ((secret.defaultMode ?? 0o644) & 0o007)
      out.push(
        `${c.name}: the Secret's mode ${(secret.defaultMode ?? 0o644).toString(8)} lets any user read it`,
      );
  }
  return out;
}

test('every object validates against the Kubernetes schemas', () => {
  const all = manifests();
  const kinds = all.map(({ obj }) => obj.kind).sort();
  assert.equal(kinds, [
    'Deployment',
    'Job',
    'Service',
    'Service',
    'Service',
    'StatefulSet',
    'StatefulSet',
  ]);
  for (const { file, obj } of all) {
    try {
      validate(obj);
    } catch (err) {
      assert.unreachable(`${file} ${obj.kind}: ${(err as Error).message}`);
    }
  }
});

test('a broken manifest fails the schema check', () => {
  const deployment = manifests().find(({ obj }) => obj.kind === 'Deployment')!.obj;
  const broken = structuredClone(deployment);
  const c = podSpec(broken)!.containers[0] as unknown as { ports: { containerPort: unknown }[] };
  c.ports[0]!.containerPort = 'six thousand';
  assert.throws(() => validate(broken), /containerPort must be integer/);
  const noSelector = structuredClone(deployment);
  delete (noSelector.spec as Record<string, unknown>).selector;
  assert.throws(() => validate(noSelector), /selector/);
});

test('the token reaches every pod as a Secret file, in no args or env', () => {
  const pods = manifests().flatMap(({ file, obj }) => {
    const pod = podSpec(obj);
    return pod ? [{ file, pod }] : [];
  });
  assert.is(pods.length, 4);
  for (const { file, pod } of pods) assert.equal(tokenProblems(pod), [], file);
  // And the check sees each way of breaking it.
  const pod = pods[0]!.pod;
  const args = (f: (a: string[]) => string[]) => {
    const p = structuredClone(pod);
    p.containers[0]!.args = f(p.containers[0]!.args ?? []);
    return tokenProblems(p);
  };
  assert.match(args((a) => [...a, '--token=abc'])[0] ?? '', /on the command line/);
  assert.match(
    args((a) => a.filter((x) => !x.startsWith('--token-file')))[0] ?? '',
    /no --token-file/,
  );
  const open = structuredClone(pod);
  open.volumes!.find((v) => v.secret)!.secret!.defaultMode = 0o444;
  assert.match(tokenProblems(open)[0] ?? '', /lets any user read it/);
  const env = structuredClone(pod);
  env.containers[0]!.env = [{ name: 'RTJOB_TOKEN', value: 'abc' }];
  assert.match(tokenProblems(env)[0] ?? '', /in env RTJOB_TOKEN/);
});

test("the containers' rtjob flags are ones the CLI knows", async () => {
  const run = promisify(execFile);
  const help = new Map<string, string>();
  for (const { file, obj } of manifests()) {
    for (const c of podSpec(obj)?.containers ?? []) {
      assert.equal(c.command, ['rtjob'], `${file}: ${c.name} runs rtjob`);
      const [sub, ...rest] = c.args ?? [];
      assert.ok(sub, `${file}: ${c.name} names an rtjob command`);
      if (!help.has(sub))
        help.set(sub, (await run(process.execPath, [binPath, sub, '--help'])).stdout);
      const own = rest.slice(0, rest.includes('--') ? rest.indexOf('--') : undefined);
      for (const a of own.filter((x) => x.startsWith('--'))) {
        const flag = a.split('=')[0]!;
        assert.ok(help.get(sub)!.includes(`${flag} `), `${file}: rtjob ${sub} has no ${flag}`);
      }
    }
  }
  assert.ok(help.has('start') && help.has('submit'));
});

test.run();
