'use strict';
// Checks the kbox chart without helm or a cluster (tests/helm/check-chart drives it):
//
//   validate.cjs values    FILE.json  merged values against values.schema.json (exit 1 if invalid)
//   validate.cjs rendered  DIR        everything about one rendered scenario (kbox-helm-render --out DIR)
//   validate.cjs self-test DIR        breaks a rendered scenario in known ways; each must be caught
//
// Options: --npm-dir (where scripts/install-deps put node_modules), --schema (values.schema.json),
// --proto-dir (the repository's proto/ folder, for the config file check with protoc).

const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const { createRequire } = require('module');
const { validateObject } = require('./k8s_schema.cjs');
const rules = require('./chart_rules.cjs');

function parseArgs(argv) {
  const opts = { positional: [] };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i].startsWith('--')) opts[argv[i].slice(2)] = argv[++i];
    else opts.positional.push(argv[i]);
  }
  for (const k of ['npm-dir', 'schema']) if (!opts[k]) throw new Error(`--${k} is required`);
  return opts;
}

// ---- values.schema.json ---------------------------------------------------------------------

// A strict schema: every object declares additionalProperties, except Kubernetes objects passed
// through to the manifests, which say so in $comment (they are checked after rendering).
function schemaStrictnessErrors(schema, pointer = '#') {
  const errors = [];
  if (schema && typeof schema === 'object' && !Array.isArray(schema)) {
    const passthrough = typeof schema.$comment === 'string' && schema.$comment.startsWith('passthrough:');
    if (schema.type === 'object' && !('additionalProperties' in schema) && !passthrough) {
      errors.push(`${pointer}: object schema without additionalProperties`);
    }
    for (const [k, v] of Object.entries(schema)) errors.push(...schemaStrictnessErrors(v, `${pointer}/${k}`));
  } else if (Array.isArray(schema)) {
    schema.forEach((v, i) => errors.push(...schemaStrictnessErrors(v, `${pointer}/${i}`)));
  }
  return errors;
}

function compileSchema(requireFn, schemaPath) {
  const Ajv = requireFn('ajv');
  const schema = JSON.parse(fs.readFileSync(schemaPath, 'utf8'));
  const strictness = schemaStrictnessErrors(schema);
  if (strictness.length) throw new Error(`values.schema.json is not strict:\n  ${strictness.join('\n  ')}`);
  // strict: unknown keywords and other schema mistakes are errors, not silently ignored
  // (strictRequired is off: `then`/`not` name properties the enclosing schema defines).
  const ajv = new (Ajv.default || Ajv)({ allErrors: true, strict: true, strictTypes: false, strictRequired: false });
  return ajv.compile(schema);
}

function valuesErrors(validate, values) {
  if (validate(values)) return [];
  return validate.errors.map((e) => `values${e.instancePath || ''}: ${e.message}` +
    (e.params && e.params.additionalProperty ? ` (${e.params.additionalProperty})` : ''));
}

// ---- kboxd's config file ----------------------------------------------------------------------

// Fields agreed with the auth work (api_tokens_file and the two auth_required_for_* flags). Until
// that work is in config.proto they are added to a copy of it, so the rest of the file is still
// checked against the real schema; once it is, the real definitions are used.
const AGREED_FIELDS = [
  ['string', 'api_tokens_file'], ['bool', 'auth_required_for_metrics'], ['bool', 'auth_required_for_health'],
];

function protoForConfig(protoDir) {
  const rel = path.join('kbox', 'v1', 'config.proto');
  const text = fs.readFileSync(path.join(protoDir, rel), 'utf8');
  const missing = AGREED_FIELDS.filter(([, name]) => !new RegExp(`\\b${name}\\s*=`).test(text));
  if (!missing.length) return { dir: protoDir, note: null };
  const start = text.indexOf('message DaemonConfig {');
  let depth = 0;
  let end = -1;
  for (let i = start; i < text.length && end < 0; i++) {
    if (text[i] === '{') depth++;
    if (text[i] === '}' && --depth === 0) end = i;
  }
  const extra = missing.map(([type, name], i) => `  ${type} ${name} = ${9000 + i};\n`).join('');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kbox-helm-proto-'));
  fs.mkdirSync(path.join(dir, 'kbox', 'v1'), { recursive: true });
  fs.writeFileSync(path.join(dir, rel), text.slice(0, end) + extra + text.slice(end));
  return { dir, note: `config.proto lacks ${missing.map(([, n]) => n).join(', ')} (the auth work adds them): checked with them added` };
}

// protoc parses the text format with kboxd's own rules (unknown fields, wrong types and
// malformed values are errors), the same parser kboxd uses.
function configErrors(proto, text) {
  try {
    execFileSync('protoc', [`-I${proto.dir}`, '--encode=kbox.v1.DaemonConfig', 'kbox/v1/config.proto'],
      { input: text, stdio: ['pipe', 'ignore', 'pipe'] });
    return [];
  } catch (e) {
    return [`kboxd.textproto does not parse as kbox.v1.DaemonConfig: ${String(e.stderr || e.message).trim()}`];
  }
}

// ---- one rendered scenario --------------------------------------------------------------------

function renderedErrors(requireFn, validate, proto, dir) {
  const errors = [];
  const values = JSON.parse(fs.readFileSync(path.join(dir, 'values.json'), 'utf8'));
  errors.push(...valuesErrors(validate, values));
  const rendered = JSON.parse(fs.readFileSync(path.join(dir, 'objects.json'), 'utf8'));
  const objects = rendered.map((r) => r.object);
  for (const { source, object } of rendered) {
    const where = `${source}: ${object.kind}/${object.metadata && object.metadata.name}`;
    errors.push(...validateObject(requireFn, object).map((e) => `${where}: ${e}`));
    errors.push(...rules.metadataErrors(object).map((e) => `${source}: ${e}`));
  }
  const seen = new Set();
  for (const o of objects) {
    const id = `${o.kind}/${o.metadata.namespace}/${o.metadata.name}`;
    if (seen.has(id)) errors.push(`${id} rendered twice`);
    seen.add(id);
  }
  const found = rules.allWorkloads(objects);
  if (found.error) return errors.concat(found.error);
  errors.push(...rules.selectorErrors(found, objects));
  const configMaps = objects.filter((o) => o.kind === 'ConfigMap' && o.data && 'kboxd.textproto' in o.data);
  if (configMaps.length !== 1) return errors.concat('want exactly one ConfigMap with kboxd.textproto');
  const configs = new Map();
  for (const parts of found.all) {
    const configText = configMaps[0].data[parts.configKey];
    if (typeof configText !== 'string') { errors.push(`no ConfigMap key ${parts.configKey}`); continue; }
    configs.set(parts, configText);
    const where = (e) => (parts === found.main ? e : `${parts.workload.metadata.name}: ${e}`);
    errors.push(...rules.securityErrors(parts).map(where), ...rules.probeErrors(parts).map(where));
    errors.push(...configErrors(proto, configText).map(where), ...rules.configWiringErrors(parts, objects, configText).map(where));
  }
  if (configs.size === found.all.length) errors.push(...rules.compileTierErrors(found, objects, configs));
  const parts = found.main;
  if (!fs.readFileSync(path.join(dir, 'NOTES.txt'), 'utf8').includes(parts.workload.metadata.name)) {
    errors.push('NOTES.txt does not name the release\'s objects');
  }
  return errors;
}

// ---- self-test: the checks above must catch these ---------------------------------------------

function selfTestCases() {
  const kboxd = (objs) => rules.workloadParts(objs).container;
  const configMap = (objs) => objs.find((o) => o.kind === 'ConfigMap' && o.data['kboxd.textproto']);
  return [
    ['unknown field in a container', (o) => { kboxd(o).bogusField = 1; }],
    ['unknown field deep in a probe', (o) => { kboxd(o).readinessProbe.httpGet.paths = '/readyz'; }],
    ['wrong type (containerPort as a string)', (o) => { kboxd(o).ports[0].containerPort = '8080'; }],
    ['missing required field (the container name)', (o) => { delete kboxd(o).name; }],
    ['an extra capability', (o) => { kboxd(o).securityContext.capabilities.add.push('NET_ADMIN'); }],
    ['a writable root file system', (o) => { kboxd(o).securityContext.readOnlyRootFilesystem = false; }],
    ['an invalid label value', (o) => { o[0].metadata.labels['app.kubernetes.io/version'] = 'not valid!'; }],
    ['Service selecting other pods', (o) => { o.find((x) => x.kind === 'Service').spec.selector = { app: 'other' }; }],
    ['readiness on /healthz', (o) => { kboxd(o).readinessProbe.httpGet.path = '/healthz'; }],
    ['egress allowed', (o) => { o.find((x) => x.kind === 'NetworkPolicy').spec.egress = [{}]; }],
    ['a label map where a LabelSelector belongs', (o) => {
      o.find((x) => x.kind === 'NetworkPolicy').spec.ingress[0].from[0].podSelector = { app: 'prometheus' };
    }],
    ['unknown config field', (o) => { configMap(o).data['kboxd.textproto'] += 'no_such_field: 1\n'; }],
    ['config field of the wrong type', (o) => { configMap(o).data['kboxd.textproto'] += 'io_threads: "two"\n'; }],
    ['listen port not the container port', (o) => {
      const c = configMap(o);
      c.data['kboxd.textproto'] = c.data['kboxd.textproto'].replace(/^listen: .*$/m, 'listen: "0.0.0.0:1"');
    }],
  ];
}

// Breakages of a scenario with the compile tier on.
function compileTierCases() {
  const parts = (objs) => rules.allWorkloads(objs);
  const configMap = (objs) => objs.find((o) => o.kind === 'ConfigMap' && o.data['kboxd.textproto']);
  const mainPolicy = (objs) => objs.find((x) => x.kind === 'NetworkPolicy' && x.metadata.name === parts(objs).main.workload.metadata.name);
  const compilePolicy = (objs) => objs.find((x) => x.kind === 'NetworkPolicy' && x.metadata.name !== parts(objs).main.workload.metadata.name);
  return [
    ['GPU pods may reach anywhere', (o) => { mainPolicy(o).spec.egress.push({ to: [{ ipBlock: { cidr: '0.0.0.0/0' } }] }); }],
    ['compile pods may open connections', (o) => { compilePolicy(o).spec.egress = [{}]; }],
    ['compile endpoint not the compile Service', (o) => {
      const c = configMap(o);
      c.data['kboxd.textproto'] = c.data['kboxd.textproto'].replace(/^compile_endpoint: .*$/m, 'compile_endpoint: "http://elsewhere:8080"');
    }],
    ['compile pods with a GPU', (o) => { parts(o).compile.container.resources.limits['nvidia.com/gpu'] = 1; }],
    ['compile pods selected by the GPU pods\' Service', (o) => {
      Object.assign(parts(o).compile.pod.metadata.labels, parts(o).main.workload.spec.selector.matchLabels);
    }],
    ['compile pods holding the API tokens', (o) => {
      const c = configMap(o);
      c.data['kboxd-compile.textproto'] += 'api_tokens_file: "/etc/kbox/tokens/tokens"\n';
    }],
    ['an HPA on the GPU pods', (o) => {
      o.find((x) => x.kind === 'HorizontalPodAutoscaler').spec.scaleTargetRef.name = parts(o).main.workload.metadata.name;
    }],
  ];
}

function selfTest(requireFn, validate, proto, dir) {
  const failures = [];
  const pristine = fs.readFileSync(path.join(dir, 'objects.json'), 'utf8');
  if (renderedErrors(requireFn, validate, proto, dir).length) return ['the scenario is not clean to begin with'];
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kbox-helm-selftest-'));
  for (const f of ['values.json', 'NOTES.txt']) fs.copyFileSync(path.join(dir, f), path.join(scratch, f));
  const tier = !rules.allWorkloads(JSON.parse(pristine).map((r) => r.object)).error &&
    rules.allWorkloads(JSON.parse(pristine).map((r) => r.object)).compile;
  for (const [name, mutate] of (tier ? compileTierCases() : selfTestCases())) {
    const rendered = JSON.parse(pristine);
    mutate(rendered.map((r) => r.object));
    fs.writeFileSync(path.join(scratch, 'objects.json'), JSON.stringify(rendered));
    const caught = renderedErrors(requireFn, validate, proto, scratch);
    console.log(`  ${caught.length ? 'caught' : 'MISSED'}: ${name}${caught.length ? ` (${caught[0].slice(0, 120)})` : ''}`);
    if (!caught.length) failures.push(`self-test: ${name} was not caught`);
  }
  fs.rmSync(scratch, { recursive: true, force: true });
  return failures;
}

function main() {
  const opts = parseArgs(process.argv.slice(2));
  const [mode, target] = opts.positional;
  const requireFn = createRequire(path.join(path.resolve(opts['npm-dir']), 'package.json'));
  const validate = compileSchema(requireFn, opts.schema);
  let errors;
  if (mode === 'values') {
    errors = valuesErrors(validate, JSON.parse(fs.readFileSync(target, 'utf8')));
  } else if (mode === 'rendered' || mode === 'self-test') {
    if (!opts['proto-dir']) throw new Error('--proto-dir is required');
    const proto = protoForConfig(opts['proto-dir']);
    if (proto.note) console.log(`  note: ${proto.note}`);
    errors = (mode === 'rendered' ? renderedErrors : selfTest)(requireFn, validate, proto, target);
    if (proto.dir !== opts['proto-dir']) fs.rmSync(proto.dir, { recursive: true, force: true });
  } else {
    throw new Error('usage: validate.cjs --npm-dir DIR --schema FILE [--proto-dir DIR] values FILE | rendered DIR | self-test DIR');
  }
  for (const e of errors) console.log(`  error: ${e}`);
  process.exitCode = errors.length ? 1 : 0;
}

try {
  main();
} catch (e) {
  console.error(`validate.cjs: ${e.message}`);
  process.exitCode = 2;
}
