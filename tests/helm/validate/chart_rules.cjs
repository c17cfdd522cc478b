'use strict';
// What the API server checks beyond the OpenAPI schemas (names, labels, a few cross-field
// rules), how the chart's objects refer to each other, and the chart's security invariants.
// Each rule returns error strings; none may fire for any ci/ scenario.

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_NAME = /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

// Capabilities the sandbox needs (templates/_security.tpl says why for each); nothing else.
const ALLOWED_CAPABILITIES = ['SYS_ADMIN', 'SETUID', 'SETGID', 'CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'KILL'];
// The tokens file format agreed with kboxd's auth: `<name> <secret> [max_concurrent_jobs]`.
const TOKEN_LINE = /^([a-z0-9_-]{1,64})\s+(\S{16,})(\s+[0-9]+)?$/;
const TOKENS_FILE = '/etc/kbox/tokens/tokens';

function labelErrors(where, labels) {
  const errors = [];
  for (const [key, value] of Object.entries(labels || {})) {
    const slash = key.lastIndexOf('/');
    const prefix = slash >= 0 ? key.slice(0, slash) : '';
    const name = slash >= 0 ? key.slice(slash + 1) : key;
    if ((prefix && (prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix))) || name.length > 63 || !LABEL_NAME.test(name)) {
      errors.push(`${where}: invalid label key ${JSON.stringify(key)}`);
    }
    if (typeof value !== 'string' || value.length > 63 || !LABEL_VALUE.test(value)) {
      errors.push(`${where}: invalid label value ${JSON.stringify(value)} for ${key}`);
    }
  }
  return errors;
}

// metadata.name and labels the way the API server validates them.
function metadataErrors(object) {
  const where = `${object.kind}/${object.metadata && object.metadata.name}`;
  const errors = [];
  const name = object.metadata && object.metadata.name;
  // Services, and the pods' owners (names become label values and host names), need DNS labels.
  const needsLabel = ['Service', 'DaemonSet', 'Deployment'].includes(object.kind);
  if (typeof name !== 'string' || !(needsLabel ? name.length <= 63 && DNS_LABEL.test(name)
    : name.length <= 253 && DNS_SUBDOMAIN.test(name))) {
    errors.push(`${where}: invalid metadata.name`);
  }
  if (!object.metadata.namespace) errors.push(`${where}: no metadata.namespace`);
  errors.push(...labelErrors(`${where} metadata.labels`, object.metadata.labels));
  return errors;
}

function matches(selector, labels) {
  return Object.entries(selector || {}).every(([k, v]) => (labels || {})[k] === v);
}

function byKind(objects, kind) { return objects.filter((o) => o.kind === kind); }

// Each workload (the GPU pods' DaemonSet or Deployment, and with the compile tier its compile
// Deployment), its pod template, kboxd's container and the ConfigMap key its --config names.
function allWorkloads(objects) {
  const workloads = objects.filter((o) => o.kind === 'DaemonSet' || o.kind === 'Deployment');
  const out = [];
  for (const workload of workloads) {
    const pod = workload.spec.template;
    const container = (pod.spec.containers || []).find((c) => c.name === 'kboxd');
    if (!container) return { error: `${workload.metadata.name}: no container named kboxd` };
    const args = (container.command || []).concat(container.args || []);
    const configArg = args[args.indexOf('--config') + 1] || '';
    out.push({ workload, pod, container, configKey: configArg.split('/').pop() });
  }
  const main = out.filter((p) => p.configKey === 'kboxd.textproto');
  const compile = out.filter((p) => p.configKey === 'kboxd-compile.textproto');
  if (main.length !== 1 || compile.length > 1 || main.length + compile.length !== out.length) {
    return { error: `want one kboxd workload (and at most one compile-tier Deployment), got ${out.map((p) => p.workload.metadata.name).join(', ')}` };
  }
  if (compile.length && compile[0].workload.kind !== 'Deployment') return { error: 'the compile tier is not a Deployment' };
  return { main: main[0], compile: compile[0] || null, all: out };
}

// The GPU pods' workload (the only one without the compile tier).
function workloadParts(objects) {
  const found = allWorkloads(objects);
  return found.error ? found : found.main;
}

function securityErrors({ pod, container }) {
  const errors = [];
  const sc = container.securityContext || {};
  const ps = pod.spec;
  if (ps.hostNetwork || ps.hostPID || ps.hostIPC) errors.push('pod shares a host namespace');
  if (ps.automountServiceAccountToken !== false) errors.push('service account token is mounted');
  if (sc.readOnlyRootFilesystem !== true) errors.push('root file system is writable');
  const caps = sc.capabilities || {};
  if (sc.privileged) {
    if (caps.add && caps.add.length) errors.push('privileged container also lists capabilities');
  } else {
    if (JSON.stringify(caps.drop) !== '["ALL"]') errors.push('capabilities.drop is not [ALL]');
    for (const cap of caps.add || []) {
      if (!ALLOWED_CAPABILITIES.includes(cap)) errors.push(`capability ${cap} is not one the sandbox needs`);
    }
    // The API server's rule: no allowPrivilegeEscalation=false with CAP_SYS_ADMIN.
    if (sc.allowPrivilegeEscalation === false && (caps.add || []).includes('SYS_ADMIN')) {
      errors.push('allowPrivilegeEscalation: false with CAP_SYS_ADMIN is rejected by the API server');
    }
  }
  for (const p of [sc.seccompProfile, sc.appArmorProfile]) {
    if (p && p.type === 'Localhost' && !p.localhostProfile) errors.push('Localhost profile without localhostProfile');
  }
  return errors;
}

function probeErrors({ container }) {
  const errors = [];
  const want = { startupProbe: '/healthz', livenessProbe: '/healthz', readinessProbe: '/readyz' };
  const ports = new Set((container.ports || []).map((p) => p.name));
  for (const [probe, path] of Object.entries(want)) {
    const get = container[probe] && container[probe].httpGet;
    if (!get || get.path !== path) errors.push(`${probe} is not an httpGet on ${path}`);
    else if (!ports.has(get.port)) errors.push(`${probe} names port ${get.port}, which the container lacks`);
  }
  return errors;
}

// ---- kboxd's config file, read ---------------------------------------------------------------

// The protobuf text format the chart renders kboxd's config in: `name: value`, `name: [a, b]`
// and `name { ... }` (or `name < ... >`, with an optional colon), `#` comments, `,`/`;`
// separators. Returns every field in file order as { path: ['scheduling', 'compile_workers'],
// value, message, line }: value is a string's contents or a scalar's token (an enum's name, a
// number, true/false), message is true for a section (its fields follow with longer paths).
// Throws on what the text format does not allow; protoc (validate.cjs) is the judge of field
// names and types.
function parseTextConfig(text) {
  const tokens = [];
  let line = 1;
  const ESCAPES = { n: '\n', t: '\t', r: '\r', '"': '"', "'": "'", '\\': '\\' };
  for (let i = 0; i < text.length;) {
    const c = text[i];
    if (c === '\n') { line++; i++; continue; }
    if (/\s/.test(c)) { i++; continue; }
    if (c === '#') { while (i < text.length && text[i] !== '\n') i++; continue; }
    if (c === '"' || c === "'") {
      let j = i + 1;
      let value = '';
      while (j < text.length && text[j] !== c) {
        if (text[j] === '\n') throw new Error(`line ${line}: string not closed`);
        if (text[j] === '\\') { value += ESCAPES[text[j + 1]] || text[j + 1]; j += 2; } else value += text[j++];
      }
      if (j >= text.length) throw new Error(`line ${line}: string not closed`);
      const last = tokens[tokens.length - 1];
      if (last && last.kind === 'string' && last.open) last.value += value; // "a" "b" is "ab"
      else tokens.push({ kind: 'string', value, line, open: true });
      i = j + 1;
      continue;
    }
    if (tokens.length) tokens[tokens.length - 1].open = false;
    if ('{}<>:[],;'.includes(c)) { tokens.push({ kind: 'punct', value: c, line }); i++; continue; }
    const word = /^[-+]?[A-Za-z0-9_.]+/.exec(text.slice(i, i + 400));
    if (!word) throw new Error(`line ${line}: unexpected ${JSON.stringify(c)}`);
    tokens.push({ kind: 'word', value: word[0], line });
    i += word[0].length;
  }
  const out = [];
  const punct = (t, v) => t && t.kind === 'punct' && v.includes(t.value);
  const scalar = (t) => {
    if (!t || t.kind === 'punct') throw new Error(`line ${t ? t.line : line}: a value is missing`);
    return t.value;
  };
  const fields = (pos, prefix, close) => {
    while (pos < tokens.length && !punct(tokens[pos], close || '\0')) {
      const name = tokens[pos++];
      if (name.kind !== 'word' || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name.value)) {
        throw new Error(`line ${name.line}: a field name is expected, not ${JSON.stringify(name.value)}`);
      }
      const path = prefix.concat(name.value);
      const colon = punct(tokens[pos], ':');
      if (colon) pos++;
      if (punct(tokens[pos], '{<')) {
        out.push({ path, value: null, message: true, line: name.line });
        const end = tokens[pos].value === '{' ? '}' : '>';
        pos = fields(pos + 1, path, end);
        if (!punct(tokens[pos], end)) throw new Error(`line ${name.line}: ${path.join('.')} is not closed`);
        pos++;
      } else if (!colon) {
        throw new Error(`line ${name.line}: ':' or '{' is expected after ${path.join('.')}`);
      } else if (punct(tokens[pos], '[')) {
        pos++;
        while (!punct(tokens[pos], ']')) {
          out.push({ path, value: scalar(tokens[pos++]), message: false, line: name.line });
          if (punct(tokens[pos], ',')) pos++;
          else if (!punct(tokens[pos], ']')) throw new Error(`line ${name.line}: ${path.join('.')}: ',' or ']' is expected`);
        }
        pos++;
      } else {
        out.push({ path, value: scalar(tokens[pos++]), message: false, line: name.line });
      }
      if (punct(tokens[pos], ',;')) pos++;
    }
    if (close && pos >= tokens.length) throw new Error(`${prefix.join('.')} is not closed`);
    return pos;
  };
  if (fields(0, [], null) !== tokens.length) throw new Error('unexpected closing bracket');
  return out;
}

// The config's scalar fields by dotted path ("listener.listen"), each with its values in file
// order (repeated fields have several; a singular one set twice too, where the last one wins).
function configFields(configText) {
  const fields = new Map();
  for (const f of parseTextConfig(configText)) {
    if (f.message) continue;
    const key = f.path.join('.');
    if (!fields.has(key)) fields.set(key, []);
    fields.get(key).push(f.value);
  }
  return fields;
}

// One field's value as kboxd reads it (the last one given), or null.
function configField(fields, key) {
  const values = fields.get(key);
  return values && values.length ? values[values.length - 1] : null;
}

// The config file's paths and port against the pod's mounts and ports.
function configWiringErrors(parts, objects, configText) {
  const errors = [];
  const { pod, container } = parts;
  let fields;
  try {
    fields = configFields(configText);
  } catch (e) {
    return [`config does not read as text format: ${e.message}`];
  }
  const field = (key) => configField(fields, key);
  const mountFor = (path) => (container.volumeMounts || []).find((m) => path === m.mountPath || path.startsWith(m.mountPath + '/'));
  const listen = field('listener.listen');
  const port = (container.ports || []).find((p) => p.name === 'http');
  if (!listen || !port || listen !== `0.0.0.0:${port.containerPort}`) {
    errors.push(`config listener.listen ${listen} is not 0.0.0.0:<the container's http port>`);
  }
  // The directories kboxd writes: on the pod's volumes (the build cache's claim or emptyDir, the
  // job journal's), never on the read-only root.
  const dirs = ['store.work_dir', 'caches.build_cache_dir'].concat(fields.has('store.job_store_dir') ? ['store.job_store_dir'] : []);
  for (const name of dirs) {
    const path = field(name);
    const mount = path && mountFor(path);
    if (!mount || mount.readOnly) errors.push(`config ${name} ${path} is not on a writable volume`);
  }
  // Compile stages at once: named (kboxd's own default counts the node's cores, not the pod's)
  // and not above the pod's CPU request in whole cores.
  const workers = field('scheduling.compile_workers');
  const cpu = ((container.resources || {}).requests || {}).cpu;
  const cores = cpu === undefined ? null
    : Math.max(1, Math.floor(String(cpu).endsWith('m') ? parseInt(cpu, 10) / 1000 : Number(cpu)));
  if (workers === null || !/^[1-9][0-9]*$/.test(workers)) {
    errors.push(`config has no scheduling.compile_workers (${workers}): kboxd would count the node's cores, not the pod's`);
  } else if (cores !== null && Number(workers) > cores) {
    errors.push(`scheduling.compile_workers ${workers} is above the pod's CPU request (${cpu})`);
  }
  const key = parts.configKey || 'kboxd.textproto';
  const configMap = byKind(objects, 'ConfigMap').find((c) => c.data && c.data[key] === configText);
  const configVolume = (pod.spec.volumes || []).find((v) => v.configMap && configMap && v.configMap.name === configMap.metadata.name);
  const configMount = configVolume && (container.volumeMounts || []).find((m) => m.name === configVolume.name);
  const args = (container.command || []).concat(container.args || []);
  const configArg = args[args.indexOf('--config') + 1];
  if (!configMount || !configArg || configArg !== `${configMount.mountPath}/${key}`) {
    errors.push(`--config does not name the mounted ConfigMap's ${key}`);
  }
  const tokensFile = field('auth.api_tokens_file');
  if (tokensFile !== null) {
    const mount = mountFor(tokensFile);
    const volume = mount && (pod.spec.volumes || []).find((v) => v.name === mount.name);
    const item = volume && volume.secret && (volume.secret.items || []).find((i) => `${mount.mountPath}/${i.path}` === tokensFile);
    if (tokensFile !== TOKENS_FILE || !item || item.key !== 'tokens' || !mount.readOnly) {
      errors.push(`auth.api_tokens_file ${tokensFile} is not key "tokens" of a Secret mounted read-only at ${TOKENS_FILE}`);
    } else {
      const secret = byKind(objects, 'Secret').find((s) => s.metadata.name === volume.secret.secretName);
      if (secret) errors.push(...tokensFileErrors(secret));
    }
  } else if (byKind(objects, 'Secret').length && key === 'kboxd.textproto') {
    errors.push('a tokens Secret is rendered but kboxd is not pointed at it');
  }
  return errors;
}

// The compile tier's wiring: the GPU pods' config names the compile Service as its endpoint with
// role run, the compile pods' config says role compile, and an HPA scales the compile Deployment.
function compileTierErrors(found, objects, configs) {
  const errors = [];
  const read = (text) => { try { return configFields(text); } catch (e) { return new Map(); } };
  const main = read(configs.get(found.main));
  const hpas = byKind(objects, 'HorizontalPodAutoscaler');
  if (!found.compile) {
    if (main.has('scheduling.role') || main.has('scheduling.compile_endpoint')) {
      errors.push('scheduling.role or compile_endpoint set without a compile tier');
    }
    if (hpas.length) errors.push('an HPA without a compile tier');
    return errors;
  }
  const compileConfig = read(configs.get(found.compile));
  if (configField(main, 'scheduling.role') !== 'ROLE_RUN') errors.push('the GPU pods are not scheduling.role ROLE_RUN');
  if (configField(compileConfig, 'scheduling.role') !== 'ROLE_COMPILE') errors.push('the compile pods are not scheduling.role ROLE_COMPILE');
  if (compileConfig.has('auth.api_tokens_file')) errors.push('the compile pods hold the API tokens');
  const compileLabels = found.compile.pod.metadata.labels;
  const svc = byKind(objects, 'Service').find((s) => matches(s.spec.selector, compileLabels));
  const endpoint = configField(main, 'scheduling.compile_endpoint');
  const want = svc && `http://${svc.metadata.name}.${svc.metadata.namespace}.svc:${svc.spec.ports[0].port}`;
  if (!svc) errors.push('no Service selects the compile pods');
  else if (endpoint !== want) errors.push(`scheduling.compile_endpoint ${endpoint} is not the compile Service (${want})`);
  const resources = found.compile.container.resources || {};
  for (const side of ['requests', 'limits']) {
    if (Object.keys(resources[side] || {}).some((k) => k.includes('gpu'))) errors.push('the compile pods ask for a GPU');
  }
  for (const hpa of hpas) {
    const ref = hpa.spec.scaleTargetRef;
    if (ref.kind !== 'Deployment' || ref.name !== found.compile.workload.metadata.name) errors.push('the HPA does not scale the compile Deployment');
    if (found.compile.workload.spec.replicas !== undefined) errors.push('the compile Deployment sets replicas under an HPA');
  }
  return errors;
}

function tokensFileErrors(secret) {
  const text = (secret.stringData || {}).tokens;
  if (typeof text !== 'string') return [`Secret ${secret.metadata.name} has no stringData.tokens`];
  const errors = [];
  const names = new Set();
  const lines = text.split('\n').filter((l) => l.trim() && !l.trim().startsWith('#'));
  if (!lines.length) errors.push(`Secret ${secret.metadata.name}: no token`);
  for (const line of lines) {
    const m = line.trim().match(TOKEN_LINE);
    if (!m) { errors.push(`Secret ${secret.metadata.name}: malformed token line`); continue; }
    if (names.has(m[1])) errors.push(`Secret ${secret.metadata.name}: token name ${m[1]} repeated`);
    names.add(m[1]);
  }
  return errors;
}

// Selectors that must find the chart's pods or Service: each Service, PodDisruptionBudget and
// NetworkPolicy selects the pods of exactly one workload; no policy lets a pod open a connection
// but the GPU pods' to the compile pods (and the cluster DNS that names them).
function selectorErrors(found, objects) {
  const errors = [];
  const workloads = found.all || [found];
  const owners = (selector) => workloads.filter((p) => matches(selector, p.pod.metadata.labels));
  for (const { workload, pod } of workloads) {
    errors.push(...labelErrors(`${workload.metadata.name} pod template labels`, pod.metadata.labels));
    if (!matches(workload.spec.selector.matchLabels, pod.metadata.labels)) errors.push(`${workload.metadata.name}: workload selector does not match its pod template`);
    if (workloads.filter((p) => matches(workload.spec.selector.matchLabels, p.pod.metadata.labels)).length !== 1) {
      errors.push(`${workload.metadata.name}: workload selector matches another workload's pods`);
    }
  }
  for (const svc of byKind(objects, 'Service')) {
    const selected = owners(svc.spec.selector);
    if (selected.length !== 1) { errors.push(`Service ${svc.metadata.name} does not select the pods of one workload`); continue; }
    const names = new Set((selected[0].container.ports || []).map((p) => p.name));
    for (const p of svc.spec.ports) {
      if (typeof p.targetPort === 'string' && !names.has(p.targetPort)) errors.push(`Service targetPort ${p.targetPort} is not a container port`);
    }
  }
  for (const pdb of byKind(objects, 'PodDisruptionBudget')) {
    if (owners(pdb.spec.selector.matchLabels).length !== 1) errors.push('PodDisruptionBudget does not select the pods');
  }
  const compileLabels = found.compile ? found.compile.pod.metadata.labels : null;
  const dnsRule = (rule) => (rule.ports || []).every((p) => p.port === 53) &&
    (rule.to || []).every((peer) => peer.namespaceSelector && peer.podSelector &&
      (peer.podSelector.matchLabels || {})['k8s-app'] === 'kube-dns');
  const compileRule = (rule) => compileLabels && (rule.ports || []).length && rule.ports.every((p) => p.port === 'http') &&
    (rule.to || []).length && rule.to.every((peer) => peer.podSelector && !peer.namespaceSelector &&
      matches(peer.podSelector.matchLabels, compileLabels));
  for (const np of byKind(objects, 'NetworkPolicy')) {
    const selected = owners(np.spec.podSelector.matchLabels);
    if (selected.length !== 1) { errors.push('NetworkPolicy does not select the pods'); continue; }
    const types = np.spec.policyTypes || [];
    if (!types.includes('Ingress') || !types.includes('Egress')) errors.push('NetworkPolicy does not govern both directions');
    const mayBuild = found.compile && selected[0] === found.main;
    for (const rule of np.spec.egress || []) {
      if (!mayBuild || !(compileRule(rule) || dnsRule(rule))) errors.push('NetworkPolicy allows egress');
    }
    for (const rule of np.spec.ingress || []) {
      if (!rule.from || !rule.from.length) errors.push('NetworkPolicy ingress rule without peers admits everyone');
      if (!rule.ports || !rule.ports.every((p) => p.port === 'http')) errors.push('NetworkPolicy opens a port other than kboxd\'s');
    }
  }
  const services = byKind(objects, 'Service');
  for (const sm of byKind(objects, 'ServiceMonitor')) {
    const svc = services.find((s) => matches(sm.spec.selector.matchLabels, s.metadata.labels));
    if (!svc) { errors.push('ServiceMonitor selects no Service'); continue; }
    if (!(sm.spec.namespaceSelector.matchNames || []).includes(svc.metadata.namespace)) errors.push('ServiceMonitor looks in the wrong namespace');
    for (const ep of sm.spec.endpoints) {
      if (!svc.spec.ports.some((p) => p.name === ep.port)) errors.push(`ServiceMonitor port ${ep.port} is not a Service port`);
      if (ep.path !== '/metrics') errors.push('ServiceMonitor does not scrape /metrics');
    }
  }
  return errors;
}

module.exports = {
  metadataErrors, workloadParts, allWorkloads, compileTierErrors, securityErrors, probeErrors, configWiringErrors, selectorErrors,
  parseTextConfig, configFields, configField, ALLOWED_CAPABILITIES,
};
