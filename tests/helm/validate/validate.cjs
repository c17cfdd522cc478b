'use strict';
// Checks the kbox chart without helm or a cluster (tests/helm/check-chart drives it):
//
//   validate.cjs values    FILE.json  merged values against values.schema.json (exit 1 if invalid)
//   validate.cjs rendered  DIR        everything about one rendered scenario (kbox-helm-render --out DIR)
//   validate.cjs self-test DIR        breaks a rendered scenario in known ways; each must be caught
//
// Options: --npm-dir (where scripts/install-deps put node_modules), --schema (values.schema.json),
// --proto-dir (the repository's proto/ folder: config.proto's sections for the schema's `config`,
// and the config file check with protoc).

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

// config.proto's messages and enums, read well enough for this file's plain proto3 (no nested
// types, options or oneofs): each message's fields as { type, label } by name (label: 'repeated',
// 'optional' or '').
function readConfigProto(protoDir) {
  const text = fs.readFileSync(path.join(protoDir, 'kbox', 'v1', 'config.proto'), 'utf8')
    .replace(/\/\/[^\n]*/g, '');
  const messages = new Map();
  const enums = new Set();
  const block = /\b(message|enum)\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{([^{}]*)\}/g;
  for (let m; (m = block.exec(text));) {
    if (m[1] === 'enum') { enums.add(m[2]); continue; }
    const fields = new Map();
    const field = /(?:^|;)\s*(?:(repeated|optional)\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s+([A-Za-z_][A-Za-z0-9_]*)\s*=\s*\d+\s*(?=;)/g;
    for (let f; (f = field.exec(m[3]));) fields.set(f[3], { type: f[2], label: f[1] || '' });
    messages.set(m[2], fields);
  }
  if (!messages.has('DaemonConfig')) throw new Error('config.proto has no message DaemonConfig');
  return { messages, enums };
}

// DaemonConfig's sections: its message-typed fields, by name, each with its message's fields.
function configSections(protoInfo) {
  const sections = new Map();
  for (const [name, f] of protoInfo.messages.get('DaemonConfig')) {
    if (protoInfo.messages.has(f.type)) sections.set(name, { type: f.type, fields: protoInfo.messages.get(f.type) });
  }
  return sections;
}

// values.schema.json's `config` against config.proto: each key a section of DaemonConfig, each
// key inside a field of that section's message, of a JSON type the text format takes for it.
function schemaConfigErrors(schema, protoInfo) {
  const errors = [];
  const config = schema.properties && schema.properties.config;
  if (!config || !config.properties) return ['values.schema.json has no config properties'];
  const sections = configSections(protoInfo);
  const jsonType = (type) => {
    if (type === 'string') return ['string'];
    if (type === 'bool') return ['boolean'];
    if (type === 'double' || type === 'float') return ['number', 'integer'];
    if (/^u?int(32|64)$|^s?fixed(32|64)$|^sint(32|64)$/.test(type)) return ['integer'];
    if (protoInfo.enums.has(type)) return ['string'];
    return [];
  };
  for (const [name, sub] of Object.entries(config.properties)) {
    const section = sections.get(name);
    if (!section) { errors.push(`values.schema.json config.${name} is not a section of kbox.v1.DaemonConfig`); continue; }
    if (sub.type !== 'object' || sub.additionalProperties !== false) errors.push(`values.schema.json config.${name} is not a strict object`);
    for (const [field, fs_] of Object.entries(sub.properties || {})) {
      const f = section.fields.get(field);
      const where = `values.schema.json config.${name}.${field}`;
      if (!f) { errors.push(`${where} is not a field of kbox.v1.${section.type}`); continue; }
      const want = jsonType(f.type);
      if (f.label === 'repeated') {
        if (fs_.type !== 'array' || !fs_.items || !want.includes(fs_.items.type)) errors.push(`${where} is not an array of ${f.type}`);
      } else if (!want.includes(fs_.type)) {
        errors.push(`${where} is ${fs_.type}, not ${want.join(' or ') || f.type} (${f.type})`);
      }
    }
  }
  return errors;
}

// What protoc accepts but the chart never renders: a section twice, or a singular field twice
// (the text format merges the one and lets the last of the other win, so a field the chart
// sets could be silently replaced).
function configShapeErrors(protoInfo, text) {
  let entries;
  try {
    entries = rules.parseTextConfig(text);
  } catch (e) {
    return [`kboxd.textproto does not read as text format: ${e.message}`];
  }
  const errors = [];
  const sections = configSections(protoInfo);
  const seen = new Set();
  for (const { path: p, line } of entries) {
    const key = p.join('.');
    const label = p.length === 1 ? 'section' : 'field';
    const f = p.length === 2 && sections.has(p[0]) ? sections.get(p[0]).fields.get(p[1]) : null;
    if (f && f.label === 'repeated') continue;
    if (seen.has(key)) errors.push(`kboxd.textproto line ${line}: ${label} ${key} is given twice`);
    seen.add(key);
  }
  return errors;
}

// Fields agreed with the auth work (api_tokens_file and the two auth_required_for_* flags, in
// DaemonConfig's auth section, message AuthConfig). Until that work is in config.proto they are
// added to a copy of it, so the rest of the file is still checked against the real schema; once
// it is, the real definitions are used.
const AGREED_FIELDS = [
  ['string', 'api_tokens_file'], ['bool', 'auth_required_for_metrics'], ['bool', 'auth_required_for_health'],
];
const AGREED_MESSAGE = 'AuthConfig';

function protoForConfig(protoDir) {
  const rel = path.join('kbox', 'v1', 'config.proto');
  const text = fs.readFileSync(path.join(protoDir, rel), 'utf8');
  const start = text.indexOf(`message ${AGREED_MESSAGE} {`);
  if (start < 0) throw new Error(`config.proto has no message ${AGREED_MESSAGE} (DaemonConfig's auth section)`);
  let depth = 0;
  let end = -1;
  for (let i = start; i < text.length && end < 0; i++) {
    if (text[i] === '{') depth++;
    if (text[i] === '}' && --depth === 0) end = i;
  }
  const body = text.slice(start, end);
  const missing = AGREED_FIELDS.filter(([, name]) => !new RegExp(`\\b${name}\\s*=`).test(body));
  if (!missing.length) return { dir: protoDir, note: null };
  const extra = missing.map(([type, name], i) => `  ${type} ${name} = ${9000 + i};\n`).join('');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kbox-helm-proto-'));
  fs.mkdirSync(path.join(dir, 'kbox', 'v1'), { recursive: true });
  fs.writeFileSync(path.join(dir, rel), text.slice(0, end) + extra + text.slice(end));
  return { dir, note: `config.proto's ${AGREED_MESSAGE} lacks ${missing.map(([, n]) => n).join(', ')} (the auth work adds them): checked with them added` };
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
    errors.push(...configErrors(proto, configText).map(where), ...configShapeErrors(proto.info, configText).map(where),
      ...rules.configWiringErrors(parts, objects, configText).map(where));
  }
  if (configs.size === found.all.length) errors.push(...rules.compileTierErrors(found, objects, configs));
  const parts = found.main;
  if (!fs.readFileSync(path.join(dir, 'NOTES.txt'), 'utf8').includes(parts.workload.metadata.name)) {
    errors.push('NOTES.txt does not name the release\'s objects');
  }
  return errors;
}

// ---- self-test: the checks above must catch these ---------------------------------------------

// A field added to a section of a config text: into the section where it is rendered (a second
// `section { }` would be refused for that alone), else as a new section.
function intoSection(text, section, field) {
  const open = new RegExp(`^${section} \\{$`, 'm');
  return open.test(text) ? text.replace(open, `${section} {\n  ${field}`) : `${text}${section} {\n  ${field}\n}\n`;
}

function selfTestCases() {
  const kboxd = (objs) => rules.workloadParts(objs).container;
  const configMap = (objs) => objs.find((o) => o.kind === 'ConfigMap' && o.data['kboxd.textproto']);
  const addField = (objs, section, field) => {
    const c = configMap(objs);
    c.data['kboxd.textproto'] = intoSection(c.data['kboxd.textproto'], section, field);
  };
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
    ['unknown config field', (o) => { addField(o, 'listener', 'no_such_field: 1'); }],
    ['a flat config field (the layout before sections)', (o) => { configMap(o).data['kboxd.textproto'] += 'io_threads: 2\n'; }],
    ['a config field in the wrong section', (o) => { addField(o, 'scheduling', 'python: "/usr/bin/python3"'); }],
    ['config field of the wrong type', (o) => { addField(o, 'listener', 'io_threads: "two"'); }],
    ['a config section given twice', (o) => { configMap(o).data['kboxd.textproto'] += 'limits {\n  job_pids: 2048\n}\nlimits {\n}\n'; }],
    ['a chart field overridden by a later one', (o) => {
      const c = configMap(o);
      c.data['kboxd.textproto'] = c.data['kboxd.textproto'].replace(/^(\s*)work_dir: (.*)$/m, '$1work_dir: $2\n$1work_dir: "/var/lib/kbox/work/elsewhere"');
    }],
    ['listen port not the container port', (o) => {
      const c = configMap(o);
      c.data['kboxd.textproto'] = c.data['kboxd.textproto'].replace(/^(\s*)listen: .*$/m, '$1listen: "0.0.0.0:1"');
    }],
    ['listen outside the listener section', (o) => {
      const c = configMap(o);
      const listen = c.data['kboxd.textproto'].match(/^\s*listen: (.*)$/m)[1];
      c.data['kboxd.textproto'] = `${c.data['kboxd.textproto'].replace(/^\s*listen: .*\n/m, '')}listen: ${listen}\n`;
    }],
    ['build cache on the read-only root', (o) => {
      const c = configMap(o);
      c.data['kboxd.textproto'] = c.data['kboxd.textproto'].replace(/^(\s*)build_cache_dir: .*$/m, '$1build_cache_dir: "/var/cache/kbox"');
    }],
    ['compile_workers left to kboxd', (o) => {
      const c = configMap(o);
      c.data['kboxd.textproto'] = c.data['kboxd.textproto'].replace(/^\s*compile_workers: .*\n/m, '');
    }],
    ['compile_workers above the CPU request', (o) => {
      const c = configMap(o);
      c.data['kboxd.textproto'] = c.data['kboxd.textproto'].replace(/^(\s*)compile_workers: .*$/m, '$1compile_workers: 64');
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
      c.data['kboxd.textproto'] = c.data['kboxd.textproto'].replace(/^(\s*)compile_endpoint: .*$/m, '$1compile_endpoint: "http://elsewhere:8080"');
    }],
    ['GPU pods not role run', (o) => {
      const c = configMap(o);
      c.data['kboxd.textproto'] = c.data['kboxd.textproto'].replace(/^(\s*)role: .*$/m, '$1role: ROLE_ALL');
    }],
    ['compile pods not role compile', (o) => {
      const c = configMap(o);
      c.data['kboxd-compile.textproto'] = c.data['kboxd-compile.textproto'].replace(/^(\s*)role: .*$/m, '$1role: ROLE_ALL');
    }],
    ['compile pods with a GPU', (o) => { parts(o).compile.container.resources.limits['nvidia.com/gpu'] = 1; }],
    ['compile pods selected by the GPU pods\' Service', (o) => {
      Object.assign(parts(o).compile.pod.metadata.labels, parts(o).main.workload.spec.selector.matchLabels);
    }],
    ['compile pods holding the API tokens', (o) => {
      const c = configMap(o);
      c.data['kboxd-compile.textproto'] = intoSection(c.data['kboxd-compile.textproto'], 'auth', 'api_tokens_file: "/etc/kbox/tokens/tokens"');
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
  // The schema's config sections and fields against config.proto, whenever it is given.
  let errors = opts['proto-dir']
    ? schemaConfigErrors(JSON.parse(fs.readFileSync(opts.schema, 'utf8')), readConfigProto(opts['proto-dir'])) : [];
  if (mode === 'values') {
    errors = errors.concat(valuesErrors(validate, JSON.parse(fs.readFileSync(target, 'utf8'))));
  } else if (mode === 'rendered' || mode === 'self-test') {
    if (!opts['proto-dir']) throw new Error('--proto-dir is required');
    const proto = protoForConfig(opts['proto-dir']);
    proto.info = readConfigProto(proto.dir);
    if (proto.note) console.log(`  note: ${proto.note}`);
    errors = errors.concat((mode === 'rendered' ? renderedErrors : selfTest)(requireFn, validate, proto, target));
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
